// Held-out evaluation (evaluate.hpp): packed rows in file order, one pass at most.
#include "smelt/train/evaluate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "smelt/dataset/blend.hpp"
#include "smelt/dataset/indexed.hpp"
#include "smelt/tokenizer/tokenizer.hpp"
#include "smelt/train/trainer.hpp"

namespace smelt {

EvalText EvalText::from(const Tokenizer& t) {
  EvalText e;
  const BpeModel& m = t.model();
  e.bytes.assign(std::max<size_t>(t.vocab_size(), m.vocab.size()), 0);
  for (size_t id = 0; id < m.vocab.size(); id++) e.bytes[id] = (uint32_t)m.vocab[id].size();
  for (const auto& s : m.specials)
    if (s.id < e.bytes.size()) e.bytes[s.id] = 0;
  if (auto eod = t.eod_id(); eod && *eod < e.bytes.size()) {
    e.eod = *eod;
    e.bytes[*eod] = 1;
  }
  return e;
}

std::string eval_text(const Tokenizer& t, const std::vector<int32_t>& targets) {
  const EvalText e = EvalText::from(t);
  std::string out;
  std::vector<uint32_t> run;
  auto flush = [&] {
    t.decode(run.data(), run.size(), out);
    run.clear();
  };
  for (int32_t id : targets) {
    if (id == e.eod) {
      flush();
      out += '\n';
    } else if (id >= 0 && (size_t)id < e.bytes.size() && e.bytes[id] > 0) {
      run.push_back((uint32_t)id);
    }
  }
  flush();
  return out;
}

Status evaluate(Model& m, const LoaderConfig& base, const std::string& sources, int64_t max_tokens, EvalResult& r,
                const EvalText* text, std::vector<int32_t>* targets) {
  r = EvalResult{};
  const auto t0 = std::chrono::steady_clock::now();
  if (targets) targets->clear();
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
  // Never read past one pass over the held-out tokens: a source's first token is only an input.
  std::vector<DataSource> src;
  if (Status s = blend_parse_sources(sources, src); !s) return Status::error("[eval] data: " + s.message());
  uint64_t available = 0;
  for (const auto& d : src) {
    IndexedDataset ds;
    if (Status s = ds.open(d.prefix); !s) return Status::error("[eval] data: " + s.message());
    const uint64_t n = ds.tokens() + (e.append_eod ? ds.sequences() : 0);
    available += n > 0 ? n - 1 : 0;
  }
  const uint64_t limit = std::min<uint64_t>((uint64_t)max_tokens, available);
  Loader loader;
  if (Status s = loader.open(e); !s) return Status::error("[eval] " + s.message());
  double sum = 0.0;
  const size_t V = text ? text->bytes.size() : 0;
  while (r.tokens < limit) {
    const Batch& b = loader.next();
    float loss = 0;
    if (Status s = m.forward_loss(b, loss); !s) return s;
    r.entropy += m.prediction_entropy(128);
    const float* losses = m.token_losses();
    const int N = b.B * b.T;
    for (int n = 0; n < N && r.tokens < limit; n++)
      if (const int32_t id = b.targets[n]; id >= 0) {
        sum += losses[n];
        r.tokens++;
        if (text && (size_t)id < V) r.bytes += text->bytes[id];
        if (targets) targets->push_back(id);
      }
    r.batches++;
  }
  if (r.tokens == 0) return Status::error(fmt::format("[eval] {}: no tokens to evaluate", sources));
  r.loss = sum / (double)r.tokens;
  r.entropy /= r.batches;
  r.perplexity = std::exp(r.loss);
  if (text && r.bytes > 0) r.bits_per_byte = sum / (std::log(2.0) * (double)r.bytes);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return Status::ok();
}

}  // namespace smelt
