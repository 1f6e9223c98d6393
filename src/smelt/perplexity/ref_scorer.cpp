// The reference scorer (ref_scorer.hpp): a document's bits per byte under a decoder, the sum over
// its tokens of -log2 p(token | context) over its UTF-8 bytes (CCNet, Wenzek et al. 2019, with our
// own model in place of their KenLM).
//
// Windows: ids = [EOD, t1 .. tn] (the end-of-document token first, as in a packed training row
// where the previous document's EOD precedes it, so t1 is predicted too), n targets. Window k
// takes the inputs ids[kT .. kT+T) and predicts ids[kT+1 .. kT+T] (T = max_seq_len): windows of
// non-overlapping targets, each seeing only the tokens before it in its own window. These are
// exactly `smelt eval`'s packed rows (T+1 tokens, consuming T) over a shard holding [EOD, t1..tn],
// so ref_bpb is eval's bits per byte of that shard (tests/perplexity/ref_scorer_test.cpp).
//
// Concurrency: one set of fp32 weights; a mutex-guarded pool of contexts (a Decoder with its KV
// caches, logits and scratch), one per document in flight. A document's windows always run as the
// same steps on an identical context, so its bits do not depend on the calling thread or on the
// other documents being scored.
#include "smelt/perplexity/ref_scorer.hpp"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/ckpt/export_gguf.hpp"
#include "smelt/kernels/decode_linear.hpp"
#include "smelt/kernels/kernels.hpp"
#include "smelt/model/config.hpp"
#include "smelt/model/decoder.hpp"
#include "smelt/model/params.hpp"
#include "smelt/tokenizer/tokenizer.hpp"

namespace smelt {

namespace fs = std::filesystem;

namespace {

// Token rows per decoder step at most: bounds the logits buffer (rows x V floats) and the scratch,
// and is wide enough for the linear layers to run as GEMMs.
constexpr int kStepRows = 256;

struct RefModel {
  std::string source;  // the step folder or the GGUF file
  int64_t step = -1;   // -1 for a GGUF file
  ModelConfig cfg;
  std::vector<float> params;  // param_layout(cfg), fp32
  Tokenizer tok;
};

// A run folder (its newest valid checkpoint) or a step folder, verified, with its tokenizer.json.
Status ref_load_checkpoint(const std::string& dir, RefModel& m) {
  std::error_code ec;
  m.source = dir;
  if (!fs::exists(fs::path(dir) / "manifest.json", ec)) {
    std::vector<std::string> warnings;
    Status s = ckpt_find_latest(dir, m.source, &warnings);
    for (const auto& w : warnings) spdlog::warn("[perplexity] {}", w);
    if (!s)
      return Status::error(fmt::format("[perplexity] checkpoint {}: no manifest.json here and {} (want a run folder "
                                       "or RUN/checkpoints/step_N)", dir, s.message()));
  }
  const std::string tok_path = (fs::path(m.source) / "tokenizer.json").string();
  if (!fs::exists(tok_path, ec))
    return Status::error(fmt::format("[perplexity] checkpoint {}: no tokenizer.json beside the weights; the "
                                     "reference scorer needs the tokenizer the model was trained with (save the "
                                     "run with its tokenizer, or export a GGUF file, which carries one)", m.source));
  if (Status s = ckpt_verify(m.source); !s) return Status::error("[perplexity] " + s.message());
  CkptManifest man;
  if (Status s = ckpt_load_model(m.source, m.cfg, m.params, &man); !s) return Status::error("[perplexity] " + s.message());
  m.step = man.step;
  if (Status s = Tokenizer::load(tok_path, m.tok); !s)
    return Status::error(fmt::format("[perplexity] {}: {}", tok_path, s.message()));
  return Status::ok();
}

// A folder is a checkpoint, a file a GGUF model (its own tokenizer); then the tokenizer's checks.
Status ref_load(const std::string& path, RefModel& m) {
  std::error_code ec;
  if (path.empty()) return Status::error("[perplexity] checkpoint: empty (want a run folder, a checkpoint folder "
                                         "or a .gguf file)");
  if (fs::is_directory(path, ec)) {
    if (Status s = ref_load_checkpoint(path, m); !s) return s;
  } else if (fs::is_regular_file(path, ec)) {
    m.source = path;
    if (Status s = gguf_load_model(path, m.cfg, m.params, m.tok); !s) return Status::error("[perplexity] " + s.message());
  } else {
    return Status::error(fmt::format("[perplexity] checkpoint {}: not found (want a run folder RUN, a checkpoint "
                                     "folder RUN/checkpoints/step_N or a .gguf file)", path));
  }
  if ((int64_t)m.tok.vocab_size() > m.cfg.vocab_size)
    return Status::error(fmt::format("[perplexity] {}: tokenizer vocabulary {} is larger than the model's vocab_size "
                                     "{}; is it the tokenizer the model was trained with?", m.source,
                                     m.tok.vocab_size(), m.cfg.vocab_size));
  if (!m.tok.eod_id())
    return Status::error(fmt::format("[perplexity] {}: the tokenizer has no end-of-document token (<|endoftext|>), "
                                     "which starts every scored document", m.source));
  return Status::ok();
}

// "auto": bf16 where oneDNN runs the wide GEMMs on AMX, else q8_0 where the int8 decode kernels are
// vectorized (about 3x f32 at 16 rows, bench/RESULTS.md "serve"), else f32.
Status ref_weight_format(const std::string& name, WeightFormat& f) {
  if (name != "auto") return weight_format_parse(name, f);
  if (std::string(gemm_bf16_isa()).find("amx") != std::string::npos) f = WeightFormat::kBf16;
  else if (std::string(decode_linear_isa()) != "portable") f = WeightFormat::kQ8_0;
  else f = WeightFormat::kF32;
  return Status::ok();
}

struct Context {
  Decoder dec;
  std::vector<float> logits;    // (kStepRows, V)
  std::vector<DecodeRow> rows;  // one step's rows
  std::vector<int32_t> target;  // [row] the token it predicts
  std::vector<float> losses, lse;  // [row] -ln p(target), the logits' logsumexp
  std::vector<uint32_t> enc;
  std::vector<int32_t> ids;     // [EOD, the text's tokens]
};

class DecoderRefScorer final : public ReferenceScorer {
 public:
  Status open(const RefScorerOptions& o);
  double bits_per_byte(std::string_view text) override;
  std::string describe() const override;

 private:
  Status new_context(std::unique_ptr<Context>& out) const;
  std::unique_ptr<Context> acquire();
  void release(std::unique_ptr<Context> c);
  Status score(Context& c, double& nats) const;
  Status score_windows(Context& c, int64_t first, int count, double& nats) const;

  RefScorerOptions o_;
  RefModel m_;
  DecoderOptions dopt_;
  int T_ = 0;
  int32_t eod_ = 0;
  int64_t context_bytes_ = 0;
  std::string isa_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Context>> free_;  // idle contexts
  int made_ = 0;                                // contexts made (<= o_.contexts)
};

Status DecoderRefScorer::open(const RefScorerOptions& o) {
  o_ = o;
  if (o.batch_rows < 1 || o.threads < 1 || o.contexts < 1)
    return Status::error(fmt::format("[perplexity] batch_rows = {}, threads = {}, contexts = {}: each must be >= 1",
                                     o.batch_rows, o.threads, o.contexts));
  WeightFormat f;
  if (Status s = ref_weight_format(o.weights, f); !s)
    return Status::error(fmt::format("[perplexity] weights: {} (or auto)", s.message()));
  if (Status s = ref_load(o.checkpoint, m_); !s) return s;
  T_ = o.max_seq_len > 0 ? o.max_seq_len : m_.cfg.max_seq_len;
  if (T_ < 2 || T_ > m_.cfg.max_seq_len)
    return Status::error(fmt::format("[perplexity] max_seq_len = {}: must be in [2, {}] (the model's max_seq_len), or "
                                     "0 for the model's", o.max_seq_len, m_.cfg.max_seq_len));
  eod_ = (int32_t)*m_.tok.eod_id();
  dopt_.slots = o.batch_rows;
  dopt_.slot_tokens = T_;
  dopt_.max_rows = kStepRows;
  dopt_.threads = o.threads;
  dopt_.format = f;
  std::unique_ptr<Context> c;
  if (Status s = new_context(c); !s) return s;
  context_bytes_ = c->dec.bytes() + (int64_t)sizeof(float) * (int64_t)c->logits.size();
  isa_ = c->dec.linear_isa();
  free_.push_back(std::move(c));
  made_ = 1;
  return Status::ok();
}

Status DecoderRefScorer::new_context(std::unique_ptr<Context>& out) const {
  auto c = std::make_unique<Context>();
  if (Status s = c->dec.init(m_.cfg, m_.params.data(), dopt_); !s) return Status::error("[perplexity] " + s.message());
  c->logits.assign((size_t)kStepRows * m_.cfg.vocab_size, 0.0f);
  c->rows.reserve(kStepRows);
  c->target.reserve(kStepRows);
  c->losses.assign(kStepRows, 0.0f);
  c->lse.assign(kStepRows, 0.0f);
  out = std::move(c);
  return Status::ok();
}

// An idle context, a new one while fewer than o_.contexts exist, else wait for one.
std::unique_ptr<Context> DecoderRefScorer::acquire() {
  std::unique_lock<std::mutex> lock(mu_);
  while (free_.empty() && made_ >= o_.contexts) cv_.wait(lock);
  if (!free_.empty()) {
    auto c = std::move(free_.back());
    free_.pop_back();
    return c;
  }
  made_++;
  lock.unlock();
  std::unique_ptr<Context> c;
  if (Status s = new_context(c); !s) {  // (init validated the same options: not expected)
    spdlog::error("{}", s.message());
    std::lock_guard<std::mutex> relock(mu_);
    made_--;
    return nullptr;
  }
  return c;
}

void DecoderRefScorer::release(std::unique_ptr<Context> c) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(std::move(c));
  }
  cv_.notify_one();
}

double DecoderRefScorer::bits_per_byte(std::string_view text) {
  if (text.empty()) return -1;
  std::unique_ptr<Context> c = acquire();
  if (!c) return -1;
  // Special-token text inside a document is ordinary text, as `smelt tokenize` encodes it.
  c->enc.clear();  // (encode appends)
  m_.tok.encode(text, c->enc, false);
  c->ids.assign(1, eod_);
  c->ids.insert(c->ids.end(), c->enc.begin(), c->enc.end());
  double nats = 0;
  Status s = score(*c, nats);
  release(std::move(c));
  if (!s) {
    spdlog::error("{}", s.message());
    return -1;
  }
  return nats / (std::log(2.0) * (double)text.size());
}

// Windows of T targets (see the top of the file), batch_rows of them per group of steps.
Status DecoderRefScorer::score(Context& c, double& nats) const {
  const int64_t n = (int64_t)c.ids.size() - 1;  // targets
  const int64_t windows = (n + T_ - 1) / T_;
  nats = 0;
  for (int64_t w = 0; w < windows; w += o_.batch_rows) {
    double part = 0;
    if (Status s = score_windows(c, w, (int)std::min<int64_t>(o_.batch_rows, windows - w), part); !s) return s;
    nats += part;
  }
  return Status::ok();
}

// Windows first .. first+count-1, window i in slot i: their tokens fed in lockstep, kStepRows /
// count positions of each per step (the KV caches carry the context between steps).
Status DecoderRefScorer::score_windows(Context& c, int64_t first, int count, double& nats) const {
  const int64_t n = (int64_t)c.ids.size() - 1;
  const int V = m_.cfg.vocab_size, chunk = std::max(1, kStepRows / count);
  for (int i = 0; i < count; i++) c.dec.clear(i);
  nats = 0;
  for (int64_t at = 0; at < T_; at += chunk) {
    c.rows.clear();
    c.target.clear();
    for (int i = 0; i < count; i++) {
      const int64_t begin = (first + i) * T_, end = std::min<int64_t>(begin + T_, n);  // inputs [begin, end)
      for (int64_t t = begin + at; t < std::min(begin + at + chunk, end); t++) {
        c.rows.push_back(DecodeRow{i, c.ids[t], true});
        c.target.push_back(c.ids[t + 1]);
      }
    }
    if (c.rows.empty()) break;
    if (Status s = c.dec.step(c.rows.data(), (int)c.rows.size(), c.logits.data()); !s)
      return Status::error("[perplexity] " + s.message());
    // The training forward's loss kernel (what `smelt eval` sums), per row in fp32.
    const int rows = (int)c.rows.size();
    cross_entropy_forward(c.losses.data(), c.lse.data(), c.logits.data(), c.target.data(), rows, V);
    for (int r = 0; r < rows; r++) nats += c.losses[r];
  }
  return Status::ok();
}

std::string DecoderRefScorer::describe() const {
  const ModelConfig& c = m_.cfg;
  const std::string step = m_.step >= 0 ? fmt::format(" (step {})", m_.step) : std::string(" (GGUF)");
  return fmt::format("reference model {}{}: {:.1f}M parameters (d_model {}, {} layers, vocab {}); {} weights ({}); "
                     "windows of {} tokens, {} per step group, {} thread(s); up to {} context(s) of {:.1f} MiB",
                     m_.source, step, (double)param_layout(c).total / 1e6, c.d_model, c.n_layers, c.vocab_size,
                     weight_format_name(dopt_.format), isa_, T_, o_.batch_rows, o_.threads, o_.contexts,
                     (double)context_bytes_ / (1 << 20));
}

}  // namespace

Status make_ref_scorer(const RefScorerOptions& o, std::unique_ptr<ReferenceScorer>& out) {
  auto s = std::make_unique<DecoderRefScorer>();
  if (Status st = s->open(o); !st) return st;
  out = std::move(s);
  return Status::ok();
}

}  // namespace smelt
