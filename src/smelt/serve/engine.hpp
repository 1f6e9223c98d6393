// The serving engine behind `smelt serve` (docs/serve.md): a request queue, a fixed set of
// sequence slots and one scheduler thread that runs continuous batching over model/decoder.hpp.
// Each step takes one row from every decoding sequence plus up to prefill_chunk prompt tokens of
// sequences still reading their prompts, runs them through the model together, samples each
// sequence's next token with its own seeded sampler, and hands the tokens to the requests'
// callbacks as whole UTF-8 text (a Completion per sequence, completion.hpp). Requests that arrive
// while others decode join at the next step; a finished or cancelled one frees its slot at once.
// A request with prompt_logprobs also gets its prompt scored: every prompt row then wants logits,
// and row i's give log p(prompt[i+1] | prompt[<=i]) (GenResult::prompt_events). Not HTTP (http_server.hpp), not the
// OpenAI JSON (openai_api.hpp).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <optional>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "smelt/common/status.hpp"
#include "smelt/model/decoder.hpp"
#include "smelt/serve/completion.hpp"
#include "smelt/tokenizer/tokenizer.hpp"

namespace smelt {

struct EngineConfig {
  int slots = 4;           // sequences decoding at once
  int max_queue = 16;      // requests waiting for a slot at most (beyond: refused, HTTP 429)
  int ctx = 0;             // tokens per sequence, prompt + completion (0: the model's max_seq_len)
  int threads = 1;
  int prefill_chunk = 32;  // prompt tokens per step over all prefilling sequences (>= 1)
  WeightFormat format = WeightFormat::kF32;
  std::optional<KvFormat> kv_cache;  // unset: as the weights (decoder_kv_format)
  std::shared_ptr<const LoraAdapters> lora;  // adapters run unmerged beside the base (nullptr: none)
};

// A fixed-bucket histogram (Prometheus semantics: cumulative counts by upper bound, plus +Inf).
struct Histogram {
  std::vector<double> bounds;    // upper bounds, ascending
  std::vector<uint64_t> counts;  // per bucket (bounds.size() + 1: the last is +Inf), not cumulative
  double sum = 0;
  uint64_t count = 0;
  explicit Histogram(std::vector<double> b = {}) : bounds(std::move(b)), counts(bounds.size() + 1, 0) {}
  void observe(double v);
};

struct EngineStats {
  int slots = 0, busy_slots = 0, queue_depth = 0;
  uint64_t requests_ok = 0, requests_cancelled = 0, requests_aborted = 0, requests_rejected = 0;
  uint64_t prompt_tokens = 0, generated_tokens = 0, steps = 0;
  Histogram ttft{{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}};          // seconds
  Histogram token_latency{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}};  // seconds per token
};

enum class Admission { kAccepted, kQueueFull, kTooLong, kStopping, kInvalid };

class Engine {
 public:
  Engine();
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Takes the model (params in param_layout(c) order) and the tokenizer; plans the decoder;
  // starts the scheduler thread.
  Status start(const ModelConfig& c, std::vector<float> params, const Tokenizer& tok, const EngineConfig& ec);
  // Queues a request. kTooLong: prompt alone does not fit the context (why says by how much; a
  // request with max_tokens 0 may fill it); kInvalid: empty prompt, ids outside the vocabulary,
  // bad max_tokens/logprobs/prompt_logprobs/sampling (why names the field). On kAccepted the
  // callbacks will run; otherwise they never do.
  Admission submit(std::shared_ptr<GenRequest> r, std::string* why = nullptr);
  // Queues all of rs or none (one HTTP request with several prompts): each is checked as by
  // submit (a refusal sets *which to the first bad one's index), then kQueueFull unless the free
  // slots and the queue can take them all at once. Accepted, they queue in order, back to back.
  Admission submit_all(std::vector<std::shared_ptr<GenRequest>> rs, std::string* why = nullptr, int* which = nullptr);
  // Stops accepting; lets the sequences in flight and in the queue finish for up to grace_seconds,
  // then ends the rest with kAborted; joins the scheduler. Idempotent.
  void shutdown(double grace_seconds = 30);

  EngineStats stats() const;
  const ModelConfig& model() const { return decoder_.config(); }
  const Tokenizer& tokenizer() const { return *tok_; }
  const EngineConfig& config() const { return cfg_; }
  int ctx() const { return cfg_.ctx; }
  std::string describe() const;  // one line: format, slots, ctx, kernels, cache MiB

 private:
  struct Seq;
  // A row of the step whose logits are wanted: its sequence, and the prompt position those logits
  // score (-1: they give the sequence's next token).
  struct RowUse {
    Seq* seq;
    int scores;
  };
  Admission check(const GenRequest* r, std::string* why) const;
  void loop();
  bool admit_locked();
  void plan_rows();
  TokenEvent sample(Seq& s, float* z);
  void deliver(Seq& s, TokenEvent ev, double t);
  void score_prompt(Seq& s, int pos, float* z);
  void prompt_read(Seq& s, double t, bool first_token);
  void run_step();
  void finish(Seq& s, FinishReason r);

  EngineConfig cfg_;
  const Tokenizer* tok_ = nullptr;
  std::vector<float> params_;
  Decoder decoder_;
  std::vector<std::unique_ptr<Seq>> seqs_;  // (slots) nullptr: free
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::shared_ptr<GenRequest>, double>> queue_;  // request, submit time
  bool stopping_ = false;
  double abort_at_ = 0;  // steady seconds after which shutdown aborts what is left (0: not set)
  std::thread thread_;
  EngineStats stats_;
  std::vector<float> logits_;
  std::vector<DecodeRow> rows_;
  std::vector<RowUse> uses_;  // each row with logits, in row order (at most max_rows: logits_ holds them all)
};

}  // namespace smelt
