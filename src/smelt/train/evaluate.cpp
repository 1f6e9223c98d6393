// Held-out evaluation (evaluate.hpp): packed rows in file order, one pass at most.
#include "smelt/train/evaluate.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "smelt/dataset/blend.hpp"
#include "smelt/dataset/indexed.hpp"
#include "smelt/train/trainer.hpp"

namespace smelt {

Status evaluate(Model& m, const LoaderConfig& base, const std::string& sources, int64_t max_tokens, EvalResult& r) {
  r = EvalResult{};
  LoaderConfig e = base;
  e.sources = sources;
  e.mode = "packed";
  e.shuffle = false;
  e.prefetch_threads = 0;
  e.stream_tokenizer.clear();
  int B, T;
  train_batch_shape(base, B, T);
  e.rank = 0, e.ranks = 1;  // under data parallelism every rank evaluates the same tokens (same numbers)
  e.seq_len = std::min(T, m.config().max_seq_len);
  e.batch_size = std::max(1, B);
  // Never read past one pass over the held-out tokens.
  std::vector<DataSource> src;
  if (Status s = blend_parse_sources(sources, src); !s) return Status::error("[eval] data: " + s.message());
  uint64_t available = 0;
  for (const auto& d : src) {
    IndexedDataset ds;
    if (Status s = ds.open(d.prefix); !s) return Status::error("[eval] data: " + s.message());
    available += ds.tokens() + (e.append_eod ? ds.sequences() : 0);
  }
  const uint64_t limit = std::min<uint64_t>((uint64_t)max_tokens, available);
  Loader loader;
  if (Status s = loader.open(e); !s) return Status::error("[eval] " + s.message());
  double sum = 0.0;
  while (r.tokens < limit) {
    const Batch& b = loader.next();
    float loss = 0;
    if (Status s = m.forward(b, loss); !s) return s;
    r.entropy += m.prediction_entropy(128);
    const float* losses = m.token_losses();
    const int N = b.B * b.T;
    for (int n = 0; n < N && r.tokens < limit; n++)
      if (b.targets[n] >= 0) {
        sum += losses[n];
        r.tokens++;
      }
    r.batches++;
  }
  if (r.tokens == 0) return Status::error(fmt::format("[eval] {}: no tokens to evaluate", sources));
  r.loss = sum / (double)r.tokens;
  r.entropy /= r.batches;
  r.perplexity = std::exp(r.loss);
  return Status::ok();
}

}  // namespace smelt
