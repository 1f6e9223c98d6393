// Held-out evaluation (evaluate.hpp): packed rows in file order, one pass at most.
#include "smelt/train/evaluate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "smelt/dataset/blend.hpp"
#include "smelt/dataset/chat_shard.hpp"
#include "smelt/dataset/indexed.hpp"
#include "smelt/tokenizer/tokenizer.hpp"

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

namespace {
// The evaluation loader: packed rows of base's shape (T capped at max_seq_len) over sources in
// file order, and how many target tokens one pass holds (a source's first token is only an input).
Status eval_loader_open(const LoaderConfig& base, const std::string& sources, int max_seq_len, Loader& loader,
                        uint64_t& available) {
  LoaderConfig e = base;
  e.sources = sources;
  e.mode = BatchMode::kPacked;
  e.shuffle = false;
  e.span_tokens = 0;  // (the held-out text in file order, whole documents, whatever the training reads)
  e.prefetch_threads = 0;
  e.stream_tokenizer.clear();
  int B, T;
  train_batch_shape(base, B, T);
  e.rank = 0, e.ranks = 1;  // under data parallelism every rank evaluates the same tokens (same numbers)
  e.seq_len = std::min(T, max_seq_len);
  e.batch_size = std::max(1, B);
  std::vector<DataSource> src;
  if (Status s = blend_parse_sources(sources, src); !s) return Status::error("[eval] data: " + s.message());
  available = 0;
  for (const auto& d : src) {
    IndexedDataset ds;
    if (Status s = ds.open(d.prefix); !s) return Status::error("[eval] data: " + s.message());
    if (e.format == DataFormat::kChat) {  // only the replies' tokens are targets, each once (whole conversations)
      available += chat_shard_trained_tokens(ds);
      continue;
    }
    const uint64_t n = ds.tokens() + (e.append_eod ? ds.sequences() : 0);
    available += n > 0 ? n - 1 : 0;
  }
  if (Status s = loader.open(e); !s) return Status::error("[eval] " + s.message());
  return Status::ok();
}
}  // namespace

Status evaluate(Model& m, const LoaderConfig& base, const std::string& sources, int64_t max_tokens, EvalResult& r,
                const EvalText* text, std::vector<int32_t>* targets, const EvalForward& forward) {
  EvalModel em;
  em.max_seq_len = m.config().max_seq_len;
  em.forward = forward ? forward : [&m](const Batch& b, float& loss) { return m.forward_loss(b, loss); };
  em.token_losses = [&m] { return m.token_losses(); };
  em.entropy = [&m] { return m.prediction_entropy(128); };
  return evaluate(em, base, sources, max_tokens, r, text, targets);
}

Status evaluate(const EvalModel& m, const LoaderConfig& base, const std::string& sources, int64_t max_tokens,
                EvalResult& r, const EvalText* text, std::vector<int32_t>* targets) {
  r = EvalResult{};
  const auto t0 = std::chrono::steady_clock::now();
  if (targets) targets->clear();
  Loader loader;
  uint64_t available = 0;
  if (Status s = eval_loader_open(base, sources, m.max_seq_len, loader, available); !s) return s;
  // Never read past one pass over the held-out tokens.
  const uint64_t limit = std::min<uint64_t>((uint64_t)max_tokens, available);
  double sum = 0.0;
  const size_t V = text ? text->bytes.size() : 0;
  while (r.tokens < limit) {
    const Batch& b = loader.next();
    float loss = 0;
    if (Status s = m.forward(b, loss); !s) return s;
    r.entropy += m.entropy();
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

namespace {
// log-softmax of z (V) into out, in double.
void log_softmax(const float* z, int V, std::vector<double>& out) {
  out.resize(V);
  double mx = z[0];
  for (int i = 1; i < V; i++) mx = std::max(mx, (double)z[i]);
  double sum = 0;
  for (int i = 0; i < V; i++) sum += std::exp((double)z[i] - mx);
  const double lse = mx + std::log(sum);
  for (int i = 0; i < V; i++) out[i] = (double)z[i] - lse;
}

int argmax(const float* z, int V) {
  int best = 0;
  for (int i = 1; i < V; i++)
    if (z[i] > z[best]) best = i;
  return best;
}
}  // namespace

Status evaluate_kl(const ModelConfig& c, const float* params, WeightFormat test, WeightFormat ref,
                   const LoaderConfig& base, const std::string& sources, int64_t max_tokens, int threads,
                   KlResult& r, const EvalText* text) {
  r = KlResult{};
  const auto t0 = std::chrono::steady_clock::now();
  Loader loader;
  uint64_t available = 0;
  if (Status s = eval_loader_open(base, sources, c.max_seq_len, loader, available); !s) return s;
  const uint64_t limit = std::min<uint64_t>((uint64_t)max_tokens, available);
  int B, T;
  train_batch_shape(base, B, T);
  T = std::min(T, c.max_seq_len);
  Decoder dt, dr;
  DecoderOptions o;
  o.slots = 1;
  o.slot_tokens = T;
  o.max_rows = T;
  o.threads = threads;
  o.format = test;
  if (Status s = dt.init(c, params, o); !s) return s;
  o.format = ref;
  if (Status s = dr.init(c, params, o); !s) return s;
  const int V = c.vocab_size;
  std::vector<float> zt((size_t)T * V), zr((size_t)T * V);
  std::vector<DecodeRow> rows(T);
  std::vector<double> lt, lr;
  double kl = 0, nll_t = 0, nll_r = 0;
  while (r.tokens < limit) {
    const Batch& b = loader.next();
    for (int row = 0; row < b.B && r.tokens < limit; row++) {
      const int32_t* in = b.inputs.data() + (size_t)row * b.T;
      const int32_t* tg = b.targets.data() + (size_t)row * b.T;
      // With document masking each document (segment) of the row alone, as the training
      // forward's attention sees it (RoPE scores depend only on relative positions, so starting
      // each at position 0 changes nothing but rounding); without it the whole row at once.
      const int32_t* seg = b.segments.empty() || !b.mask_segments ? nullptr : b.segments.data() + (size_t)row * b.T;
      for (int t0 = 0; t0 < b.T;) {
        int t1 = t0 + 1;
        while (t1 < b.T && (!seg || seg[t1] == seg[t0])) t1++;
        for (int t = t0; t < t1; t++) rows[t - t0] = DecodeRow{0, in[t], true};
        dt.clear(0);
        dr.clear(0);
        if (Status s = dt.step(rows.data(), t1 - t0, zt.data() + (size_t)t0 * V); !s) return s;
        if (Status s = dr.step(rows.data(), t1 - t0, zr.data() + (size_t)t0 * V); !s) return s;
        t0 = t1;
      }
      for (int t = 0; t < b.T && r.tokens < limit; t++) {
        if (tg[t] < 0) continue;
        const float* a = zt.data() + (size_t)t * V;
        const float* p = zr.data() + (size_t)t * V;
        log_softmax(a, V, lt);
        log_softmax(p, V, lr);
        double k = 0;
        for (int i = 0; i < V; i++) k += std::exp(lr[i]) * (lr[i] - lt[i]);
        kl += k;
        r.max_kl = std::max(r.max_kl, k);
        r.agree += argmax(a, V) == argmax(p, V);
        nll_t -= lt[tg[t]];
        nll_r -= lr[tg[t]];
        if (text && (size_t)tg[t] < text->bytes.size()) r.bytes += text->bytes[tg[t]];
        r.tokens++;
      }
    }
  }
  if (r.tokens == 0) return Status::error(fmt::format("[eval] {}: no tokens to evaluate", sources));
  r.mean_kl = kl / (double)r.tokens;
  r.greedy_agreement = (double)r.agree / (double)r.tokens;
  r.loss = nll_t / (double)r.tokens;
  r.ref_loss = nll_r / (double)r.tokens;
  if (text && r.bytes > 0) {
    r.bits_per_byte = nll_t / (std::log(2.0) * (double)r.bytes);
    r.ref_bits_per_byte = nll_r / (std::log(2.0) * (double)r.bytes);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return Status::ok();
}

}  // namespace smelt
