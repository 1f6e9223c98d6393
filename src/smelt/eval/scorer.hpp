// The model side of task evaluation (docs/eval.md): log-likelihoods of continuations given a
// context, rolling log-likelihoods of whole documents and greedy generation, all through the
// KV-cache decoder (model/decoder.hpp). The continuations of one context share its forward pass
// (prefix reuse): the context is read once into one cache slot, copied into a slot per
// continuation, and the continuations' tokens run together as the rows of one step. Not task
// files (eval/task.hpp), prompts or metrics (eval/run.hpp).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "smelt/common/status.hpp"
#include "smelt/model/config.hpp"
#include "smelt/model/decoder.hpp"

namespace smelt {

struct ScorerOptions {
  WeightFormat format = WeightFormat::kF32;
  int threads = 1;
  bool prefix_reuse = true;   // false: every (context, continuation) pair read from its first token
  int max_choices = 8;        // continuations run together (cache slots beside the context's)
  int max_rows = 256;         // decoder rows per step
  int ctx = 0;                // tokens per sequence (0: the model's max_seq_len)
  bool batch_invariant = false;  // the serve kernels: the same bits whatever the step's rows
  const LoraAdapters* lora = nullptr;  // adapters unmerged beside the base (borrowed; nullptr: none)
};

// The bytes a Scorer with these options holds once init ran: its decoder (decoder_bytes, slots
// max_choices + 1) and its logits and per-row scratch. A training run's memory plan counts it
// for [eval] tasks.
int64_t scorer_bytes(const ModelConfig& c, const ScorerOptions& o);

struct LlScore {
  double logprob = 0;  // sum over the continuation's tokens of log p(token | everything before)
  bool greedy = true;  // every continuation token is the argmax at its position
};

class Scorer {
 public:
  // params (layout param_layout(c)) is borrowed and must outlive the scorer; vocab: the tokenizer's
  // vocabulary (ids from vocab to c.vocab_size, padding, are never counted in a softmax).
  Status init(const ModelConfig& c, const float* params, int vocab, const ScorerOptions& o);
  // out[j] = log p(conts[j] | context). The context (>= 1 token) is cut from the left where
  // context + continuation does not fit ctx(); a continuation longer than ctx() is an error.
  Status loglikelihood(const std::vector<int32_t>& context, const std::vector<std::vector<int32_t>>& conts,
                       std::vector<LlScore>& out);
  // Sum of log p(ids[i] | ids[<i]) for i >= 1 (ids[0] is the document's start token), read in
  // windows of ctx() predicted tokens each with up to ctx() tokens of context before it.
  Status rolling(const std::vector<int32_t>& ids, double& logprob);
  // Greedy continuation of prompt (cut from the left to leave room for max_tokens): appends
  // tokens to out until max_tokens, the context, end_token or stop(out) returns true.
  Status greedy(const std::vector<int32_t>& prompt, int max_tokens, int32_t end_token,
                const std::function<bool(const std::vector<int32_t>&)>& stop, std::vector<int32_t>& out);

  int ctx() const { return dec_.slot_tokens(); }
  uint64_t rows_run() const { return rows_run_; }  // decoder rows so far (the forward work done)
  const Decoder& decoder() const { return dec_; }

 private:
  // Runs rows in steps of max_rows; for each row with logits, calls take(row index, logits).
  Status run(const std::vector<DecodeRow>& rows, const std::function<void(size_t, const float*)>& take);
  // Runs rows and scores targets[k] on the k-th row with logits: score(k, log p, is argmax).
  Status run_scored(const std::vector<DecodeRow>& rows, const std::vector<int32_t>& targets,
                    const std::function<void(size_t, double, bool)>& score);
  // log p(target) and whether target is the argmax, from one row of logits.
  void score_row(const float* z, int32_t target, double& logprob, bool& greedy) const;
  Status continuations(int n_ctx, const std::vector<std::vector<int32_t>>& conts, size_t first, size_t count,
                       std::vector<LlScore>& out, const float* ctx_logits);
  Status pairs(const std::vector<int32_t>& context, const std::vector<std::vector<int32_t>>& conts,
               std::vector<LlScore>& out);

  Decoder dec_;
  ScorerOptions opt_;
  int vocab_ = 0;
  std::vector<float> logits_, last_, losses_, lse_;
  std::vector<int32_t> targets_;
  uint64_t rows_run_ = 0;
};

}  // namespace smelt
