// One completion, token by token, as the serving engine (one per busy slot, engine.hpp) and
// `smelt generate` (cli/generate_cmd.cpp) both decode it: from a row of logits to the next token
// (padded ids masked, the repeat penalty, the request's seeded sampler, log probabilities) and
// from the token to the text that became final (end of document, the length budget, stop strings
// held back until they can no longer match). Not the model (model/decoder.hpp), not scheduling.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "smelt/common/status.hpp"
#include "smelt/serve/sampling.hpp"
#include "smelt/serve/text_stream.hpp"
#include "smelt/tokenizer/tokenizer.hpp"

namespace smelt {

struct TopLogprob {
  int32_t id = 0;
  float logprob = 0;
};

// One generated token as the request sees it. When an end-of-document token ends the request
// while text is still held back (a possible stop string's start, an unfinished character), one
// last event carries that token's id and the text; the token is not part of the completion
// (GenResult::ids and completion_tokens leave it out).
struct TokenEvent {
  int32_t id = 0;
  float logprob = 0;             // log p(id) under the model (log-softmax of the raw logits)
  std::vector<TopLogprob> top;   // the `logprobs` most likely tokens, most likely first
  std::string text;              // text that became final with this token (may be ""): whole UTF-8,
                                 // never part of a stop string
};

enum class FinishReason { kStop, kLength, kCancelled, kAborted };
// "stop" (end of document or a stop string), "length" (max_tokens or the context), "cancelled"
// (the client went away), "aborted" (shutdown before it ended).
const char* finish_reason_name(FinishReason r);

struct GenResult {
  std::vector<int32_t> ids;  // generated ids (an end-of-document token that stopped it excluded)
  // With GenRequest::prompt_logprobs >= 0: one event per prompt token read, in order (all of them
  // unless the request was aborted first); [0] has logprob NaN and no top (nothing precedes it),
  // [i] log p(prompt[i] | prompt[<i]) and its top entries; text is "" (the prompt is not output).
  std::vector<TokenEvent> prompt_events;
  std::string text;          // their text, cut before a stop string that matched
  FinishReason finish = FinishReason::kLength;
  int prompt_tokens = 0, completion_tokens = 0;
  double queue_seconds = 0, ttft_seconds = 0, total_seconds = 0;  // from submit
  std::vector<TokenEvent> tokens;  // every token's event (filled when logprobs > 0)
};

struct GenRequest {
  std::vector<int32_t> prompt;    // at least one token
  int max_tokens = 16;            // >= 1; 0 only with prompt_logprobs (score the prompt, generate nothing)
  SamplingConfig sampling;        // temperature 0: greedy
  std::vector<std::string> stop;  // stop strings (not included in the text)
  int logprobs = 0;               // top entries per token, 0..20
  // The prompt's own log probabilities (GenResult::prompt_events): -1 off, else 0..20 top entries
  // per prompt token. Every prompt row then wants its logits (scored as score_prompt says).
  int prompt_logprobs = -1;
  bool ignore_eos = false;
  // llama.cpp's repeat penalty (apply_repeat_penalty) over the last repeat_last_n tokens, prompt
  // included; 1: off. Set by `smelt generate`; the HTTP API has no field for it.
  float repeat_penalty = 1.0f;
  int repeat_last_n = 64;
  // Called on the scheduler thread for every token, in order; must not block. Returning false
  // cancels the request (the client is gone): its slot is freed at this step.
  std::function<bool(const TokenEvent&)> on_token;
  // Called once on the scheduler thread when the request ends (any reason), after the last on_token.
  std::function<void(const GenResult&)> on_done;
};

class Completion {
 public:
  // r and tok are borrowed and must outlive it. V: the model's vocabulary (ids the tokenizer
  // cannot decode, from its vocab_size() up to V, are never chosen); budget: completion tokens at
  // most (>= 1; 0 for a request that only scores its prompt and never samples). Errors are the sampler's (an invalid r.sampling).
  Status init(const GenRequest& r, const Tokenizer& tok, int V, int budget);
  // The next token from logits z (V), which it changes (the padded ids masked, the repeat
  // penalty applied); the sampler advances.
  int32_t sample(float* z);
  // ev.logprob of ev.id and the request's `logprobs` most likely entries, from sample()'s z.
  void score(const float* z, TokenEvent& ev) const;
  // ev.logprob of prompt token ev.id and the request's `prompt_logprobs` most likely entries, from
  // the raw logits z (V) of the row before it, which it changes as sample() does (the padded ids
  // masked; no penalty: the model's own distribution).
  void score_prompt(float* z, TokenEvent& ev) const;
  // Whether id ends the completion as its end of document (never with ignore_eos).
  bool is_end_of_document(int32_t id) const;
  // Takes the sampled token ev.id: appends it (unless it is the end of document) and its text to
  // res.ids and res.text, and sets ev.text to the text that became final with it. True when the
  // completion has ended, with why: kStop (end of document or a stop string) or kLength.
  bool accept(TokenEvent& ev, GenResult& res, FinishReason& why);

 private:
  void mask_padding(float* z) const;

  const GenRequest* req_ = nullptr;
  const Tokenizer* tok_ = nullptr;
  int V_ = 0, budget_ = 0, count_ = 0;  // count_: tokens accepted into the completion
  Sampler sampler_;
  std::unique_ptr<TextStream> stream_;
  std::string held_;                // decoded text not handed out yet (it may start a stop string)
  std::vector<int32_t> history_;    // prompt + completion, for the repeat penalty (when on)
};

}  // namespace smelt
