// Log-likelihoods, rolling log-likelihoods and greedy generation through the decoder (scorer.hpp).
// Slot 0 holds a context; slots 1..max_choices its continuations.
#include "smelt/eval/scorer.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "smelt/kernels/kernels.hpp"

namespace smelt {

namespace {
DecoderOptions decoder_options(const ScorerOptions& o) {
  DecoderOptions d;
  d.slots = o.max_choices + 1;
  d.slot_tokens = o.ctx;
  d.max_rows = o.max_rows;
  d.threads = o.threads;
  d.format = o.format;
  d.batch_invariant = o.batch_invariant;
  d.lora = o.lora;
  return d;
}
}  // namespace

int64_t scorer_bytes(const ModelConfig& c, const ScorerOptions& o) {
  // logits_ (max_rows, V), losses_, lse_, targets_ (max_rows), last_ (V)
  return decoder_bytes(c, decoder_options(o)) + 4 * ((int64_t)o.max_rows * (c.vocab_size + 3) + c.vocab_size);
}

Status Scorer::init(const ModelConfig& c, const float* params, int vocab, const ScorerOptions& o) {
  if (o.max_choices < 1 || o.max_rows < 1) return Status::error("[eval] scorer: max_choices and max_rows must be >= 1");
  if (vocab < 1 || vocab > c.vocab_size)
    return Status::error(fmt::format("[eval] the tokenizer's {} ids do not fit the model's vocabulary of {}", vocab,
                                     c.vocab_size));
  opt_ = o;
  vocab_ = vocab;
  if (Status s = dec_.init(c, params, decoder_options(o)); !s) return s;
  logits_.assign((size_t)o.max_rows * c.vocab_size, 0.0f);
  losses_.assign((size_t)o.max_rows, 0.0f);
  lse_.assign((size_t)o.max_rows, 0.0f);
  targets_.assign((size_t)o.max_rows, 0);
  last_.assign((size_t)c.vocab_size, 0.0f);
  rows_run_ = 0;
  return Status::ok();
}

void Scorer::score_row(const float* z, int32_t target, double& logprob, bool& greedy) const {
  // As the server scores a token (serve/completion.cpp): over the tokenizer's ids, in double.
  float mx = z[0];
  int32_t arg = 0;
  for (int i = 1; i < vocab_; i++)
    if (z[i] > mx) mx = z[i], arg = i;
  double sum = 0;
  for (int i = 0; i < vocab_; i++) sum += std::exp((double)z[i] - mx);
  const float lse = mx + (float)std::log(sum);
  logprob = (double)(z[target] - lse);
  greedy = arg == target;
}

// The step's rows with logits scored together by the training loss kernel (one streaming,
// vectorized softmax per row; the padding ids set to -inf first so they weigh nothing).
Status Scorer::run_scored(const std::vector<DecodeRow>& rows, const std::vector<int32_t>& targets,
                          const std::function<void(size_t, double, bool)>& score) {
  const int V = dec_.config().vocab_size;
  size_t k = 0;
  for (size_t at = 0; at < rows.size(); at += (size_t)opt_.max_rows) {
    const int n = (int)std::min(rows.size() - at, (size_t)opt_.max_rows);
    if (Status s = dec_.step(rows.data() + at, n, logits_.data()); !s) return s;
    rows_run_ += (uint64_t)n;
    int m = 0;
    for (int i = 0; i < n; i++) m += rows[at + i].logits;
    for (int i = 0; i < m; i++) {
      float* z = logits_.data() + (size_t)V * i;
      std::fill(z + vocab_, z + V, -std::numeric_limits<float>::infinity());
      targets_[i] = targets[k + i];
    }
    cross_entropy_forward(losses_.data(), lse_.data(), logits_.data(), targets_.data(), m, V);
    for (int i = 0; i < m; i++) {
      const float* z = logits_.data() + (size_t)V * i;
      const float zt = z[targets_[i]];
      bool greedy = true;  // the target is the argmax: nothing above it, nothing equal before it
      for (int v = 0; v < vocab_ && greedy; v++) greedy = z[v] < zt || (z[v] == zt && v >= targets_[i]);
      score(k + i, -(double)losses_[i], greedy);
    }
    k += (size_t)m;
  }
  return Status::ok();
}

Status Scorer::run(const std::vector<DecodeRow>& rows, const std::function<void(size_t, const float*)>& take) {
  const size_t V = (size_t)dec_.config().vocab_size;
  for (size_t at = 0; at < rows.size(); at += (size_t)opt_.max_rows) {
    const int n = (int)std::min(rows.size() - at, (size_t)opt_.max_rows);
    if (Status s = dec_.step(rows.data() + at, n, logits_.data()); !s) return s;
    rows_run_ += (uint64_t)n;
    size_t k = 0;
    for (int i = 0; i < n; i++)
      if (rows[at + i].logits) take(at + i, logits_.data() + V * k++);
  }
  return Status::ok();
}

// Continuations first..first+count-1 of the context in slot 0 (n_ctx tokens, its last row's
// logits in ctx_logits), continuation j in slot 1 + (j - first).
Status Scorer::continuations(int n_ctx, const std::vector<std::vector<int32_t>>& conts, size_t first, size_t count,
                             std::vector<LlScore>& out, const float* ctx_logits) {
  std::vector<DecodeRow> rows;
  std::vector<std::pair<size_t, int32_t>> target;  // [row] (continuation, target token)
  for (size_t j = first; j < first + count; j++) {
    const int slot = 1 + (int)(j - first);
    dec_.copy_prefix(0, slot, n_ctx);
    double lp;
    bool g;
    score_row(ctx_logits, conts[j][0], lp, g);
    out[j] = LlScore{lp, g};
    for (size_t k = 0; k + 1 < conts[j].size(); k++) {
      rows.push_back(DecodeRow{slot, conts[j][k], true});
      target.emplace_back(j, conts[j][k + 1]);
    }
  }
  std::vector<int32_t> ids;
  for (const auto& t : target) ids.push_back(t.second);
  return run_scored(rows, ids, [&](size_t k, double lp, bool g) {
    out[target[k].first].logprob += lp;
    out[target[k].first].greedy = out[target[k].first].greedy && g;
  });
}

// Without prefix reuse: each pair read whole into its own slot, the pairs of a wave in one step.
Status Scorer::pairs(const std::vector<int32_t>& context, const std::vector<std::vector<int32_t>>& conts,
                     std::vector<LlScore>& out) {
  for (size_t first = 0; first < conts.size(); first += (size_t)opt_.max_choices) {
    const size_t count = std::min(conts.size() - first, (size_t)opt_.max_choices);
    std::vector<DecodeRow> rows;
    std::vector<std::pair<size_t, int32_t>> target;
    for (size_t j = first; j < first + count; j++) {
      const int slot = 1 + (int)(j - first);
      dec_.clear(slot);
      out[j] = LlScore{};
      for (size_t k = 0; k < context.size(); k++) {
        const bool last = k + 1 == context.size();
        rows.push_back(DecodeRow{slot, context[k], last});
        if (last) target.emplace_back(j, conts[j][0]);
      }
      for (size_t k = 0; k + 1 < conts[j].size(); k++) {
        rows.push_back(DecodeRow{slot, conts[j][k], true});
        target.emplace_back(j, conts[j][k + 1]);
      }
    }
    std::vector<int32_t> ids;
    for (const auto& t : target) ids.push_back(t.second);
    Status s = run_scored(rows, ids, [&](size_t k, double lp, bool g) {
      out[target[k].first].logprob += lp;
      out[target[k].first].greedy = out[target[k].first].greedy && g;
    });
    if (!s) return s;
  }
  return Status::ok();
}

Status Scorer::loglikelihood(const std::vector<int32_t>& context, const std::vector<std::vector<int32_t>>& conts,
                             std::vector<LlScore>& out) {
  if (context.empty()) return Status::error("[eval] an empty context (it holds at least the start token)");
  size_t longest = 0;
  for (size_t j = 0; j < conts.size(); j++) {
    if (conts[j].empty()) return Status::error(fmt::format("[eval] continuation {} has no tokens", j));
    longest = std::max(longest, conts[j].size());
  }
  const size_t T = (size_t)ctx();
  if (longest >= T)
    return Status::error(fmt::format("[eval] a continuation of {} tokens leaves no room for its context in {} tokens",
                                     longest, T));
  // The inputs are context + continuation minus its last token: keep the context's last tokens.
  const size_t keep = std::min(context.size(), T - (longest - 1));
  const std::vector<int32_t> ctx(context.end() - (std::ptrdiff_t)keep, context.end());
  out.assign(conts.size(), LlScore{});
  if (!opt_.prefix_reuse) return pairs(ctx, conts, out);
  dec_.clear(0);
  std::vector<DecodeRow> rows;
  for (size_t k = 0; k < ctx.size(); k++) rows.push_back(DecodeRow{0, ctx[k], k + 1 == ctx.size()});
  const size_t V = (size_t)dec_.config().vocab_size;
  if (Status s = run(rows, [&](size_t, const float* z) { std::copy(z, z + V, last_.begin()); }); !s) return s;
  for (size_t first = 0; first < conts.size(); first += (size_t)opt_.max_choices)
    if (Status s = continuations((int)ctx.size(), conts, first, std::min(conts.size() - first, (size_t)opt_.max_choices),
                                 out, last_.data());
        !s)
      return s;
  return Status::ok();
}

Status Scorer::rolling(const std::vector<int32_t>& ids, double& logprob) {
  logprob = 0;
  const size_t n = ids.size(), T = (size_t)ctx();
  for (size_t s = 1; s < n;) {  // predict ids[s..e) from inputs ids[b..e-1)
    const size_t e = std::min(s + T, n), b = e - 1 > T ? e - 1 - T : 0;
    dec_.clear(0);
    std::vector<DecodeRow> rows;
    std::vector<int32_t> target;
    for (size_t i = b; i + 1 < e; i++) {
      const bool want = i + 1 >= s;
      rows.push_back(DecodeRow{0, ids[i], want});
      if (want) target.push_back(ids[i + 1]);
    }
    Status st = run_scored(rows, target, [&](size_t, double lp, bool) { logprob += lp; });
    if (!st) return st;
    s = e;
  }
  return Status::ok();
}

Status Scorer::greedy(const std::vector<int32_t>& prompt, int max_tokens, int32_t end_token,
                      const std::function<bool(const std::vector<int32_t>&)>& stop, std::vector<int32_t>& out) {
  out.clear();
  const int T = ctx();
  if (prompt.empty()) return Status::error("[eval] an empty prompt");
  max_tokens = std::min(max_tokens, T - 1);
  const size_t keep = std::min(prompt.size(), (size_t)(T - max_tokens));
  dec_.clear(0);
  std::vector<DecodeRow> rows;
  for (size_t k = prompt.size() - keep; k < prompt.size(); k++) rows.push_back(DecodeRow{0, prompt[k], k + 1 == prompt.size()});
  const size_t V = (size_t)dec_.config().vocab_size;
  if (Status s = run(rows, [&](size_t, const float* z) { std::copy(z, z + V, last_.begin()); }); !s) return s;
  for (int i = 0; i < max_tokens; i++) {
    int32_t arg = 0;
    for (int v = 1; v < vocab_; v++)
      if (last_[v] > last_[arg]) arg = v;
    if (arg == end_token) break;
    out.push_back(arg);
    if (stop(out) || i + 1 == max_tokens || dec_.position(0) >= T) break;
    DecodeRow r{0, arg, true};
    if (Status s = run({r}, [&](size_t, const float* z) { std::copy(z, z + V, last_.begin()); }); !s) return s;
  }
  return Status::ok();
}

}  // namespace smelt
