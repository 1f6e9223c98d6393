// Continuous batching over Decoder: admission, the step's rows (every decoding sequence's last
// token, then prompt chunks within the prefill budget), each sequence's tokens through its
// Completion (sampling, stop strings: completion.hpp), and the stats /metrics shows. Not HTTP.
#include "smelt/serve/engine.hpp"

#include <algorithm>
#include <chrono>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "smelt/common/clock.hpp"

namespace smelt {

void Histogram::observe(double v) {
  size_t b = std::lower_bound(bounds.begin(), bounds.end(), v) - bounds.begin();
  counts[b]++;
  sum += v;
  count++;
}

struct Engine::Seq {
  std::shared_ptr<GenRequest> req;
  int slot = 0;
  size_t fed = 0;          // prompt tokens in the cache
  int32_t next = -1;       // the sampled token the next step feeds (-1: still in the prompt)
  Completion completion;   // sampling and text; its budget: min(max_tokens, ctx - prompt)
  double t_submit = 0, t_admit = 0, t_last = 0;
  GenResult result;
};

Engine::Engine() = default;
Engine::~Engine() { shutdown(0); }

Status Engine::start(const ModelConfig& c, std::vector<float> params, const Tokenizer& tok,
                     const EngineConfig& ec) {
  if (ec.slots < 1 || ec.max_queue < 0 || ec.prefill_chunk < 1 || ec.threads < 1)
    return Status::error(fmt::format("[serve] slots {}, max_queue {}, prefill_chunk {}, threads {}: slots, "
                                     "prefill_chunk and threads must be >= 1, max_queue >= 0",
                                     ec.slots, ec.max_queue, ec.prefill_chunk, ec.threads));
  cfg_ = ec;
  if (cfg_.ctx == 0) cfg_.ctx = c.max_seq_len;
  if (cfg_.ctx < 2 || cfg_.ctx > c.max_seq_len)
    return Status::error(fmt::format("[serve] ctx {}: must be in [2, max_seq_len = {}]", cfg_.ctx, c.max_seq_len));
  if ((int64_t)tok.vocab_size() > c.vocab_size)
    return Status::error(fmt::format("[serve] the tokenizer's vocabulary ({}) is larger than the model's "
                                     "vocab_size ({})", tok.vocab_size(), c.vocab_size));
  tok_ = &tok;
  params_ = std::move(params);
  DecoderOptions o;
  o.slots = cfg_.slots;
  o.slot_tokens = cfg_.ctx;
  o.max_rows = cfg_.slots + cfg_.prefill_chunk;
  o.threads = cfg_.threads;
  o.format = cfg_.format;
  o.kv_cache = cfg_.kv_cache;
  o.batch_invariant = true;
  o.lora = cfg_.lora.get();
  if (Status s = decoder_.init(c, params_.data(), o); !s) return s;
  seqs_.clear();
  seqs_.resize(cfg_.slots);
  logits_.assign((size_t)o.max_rows * c.vocab_size, 0.0f);
  rows_.reserve(o.max_rows);
  stats_ = EngineStats{};
  stats_.slots = cfg_.slots;
  stopping_ = false;
  abort_at_ = 0;
  thread_ = std::thread([this] { loop(); });
  return Status::ok();
}

std::string Engine::describe() const {
  const std::string lora = cfg_.lora ? fmt::format(", LoRA rank {} on {} unmerged (fp32)", cfg_.lora->config.rank,
                                                   fmt::join(cfg_.lora->config.targets, "/"))
                                     : std::string();
  return fmt::format("{} slots x {} tokens, prefill chunk {}, {} threads, {}{}, {} KV cache + scratch {:.1f} MiB",
                     cfg_.slots, cfg_.ctx, cfg_.prefill_chunk, cfg_.threads, decoder_.linear_isa(), lora,
                     kv_format_name(decoder_.kv_cache()), decoder_.bytes() / 1048576.0);
}

// The checks of one request that need no lock (everything but the queue's room).
Admission Engine::check(const GenRequest* r, std::string* why) const {
  auto refuse = [&](Admission a, std::string msg) {
    if (why) *why = std::move(msg);
    return a;
  };
  if (!r || r->prompt.empty()) return refuse(Admission::kInvalid, "prompt: at least one token is needed");
  const int V = decoder_.config().vocab_size;
  for (size_t i = 0; i < r->prompt.size(); i++)
    if (r->prompt[i] < 0 || r->prompt[i] >= V)
      return refuse(Admission::kInvalid, fmt::format("prompt: token {} at position {} is outside the "
                                                     "vocabulary [0, {})", r->prompt[i], i, V));
  if (r->prompt_logprobs < -1 || r->prompt_logprobs > 20)
    return refuse(Admission::kInvalid, fmt::format("prompt_logprobs: {} (must be -1 (off) or in [0, 20])",
                                                   r->prompt_logprobs));
  if (r->max_tokens < (r->prompt_logprobs >= 0 ? 0 : 1))
    return refuse(Admission::kInvalid, fmt::format("max_tokens: {} (must be >= 1; 0 only with prompt_logprobs, "
                                                   "to score the prompt)", r->max_tokens));
  if (r->logprobs < 0 || r->logprobs > 20)
    return refuse(Admission::kInvalid, fmt::format("logprobs: {} (must be in [0, 20])", r->logprobs));
  if (Status s = sampling_config_validate(r->sampling); !s) return refuse(Admission::kInvalid, s.message());
  if (r->max_tokens == 0 && (int)r->prompt.size() > cfg_.ctx)
    return refuse(Admission::kTooLong, fmt::format("the prompt is {} tokens; the context is {}", r->prompt.size(),
                                                   cfg_.ctx));
  if (r->max_tokens > 0 && (int)r->prompt.size() >= cfg_.ctx)
    return refuse(Admission::kTooLong, fmt::format("the prompt is {} tokens; the context is {} (prompt and "
                                                   "completion together), which leaves no room to generate",
                                                   r->prompt.size(), cfg_.ctx));
  return Admission::kAccepted;
}

Admission Engine::submit(std::shared_ptr<GenRequest> r, std::string* why) {
  std::vector<std::shared_ptr<GenRequest>> one;
  one.push_back(std::move(r));
  return submit_all(std::move(one), why);
}

Admission Engine::submit_all(std::vector<std::shared_ptr<GenRequest>> rs, std::string* why, int* which) {
  if (rs.empty()) {
    if (why) *why = "no request to queue";
    return Admission::kInvalid;
  }
  for (size_t i = 0; i < rs.size(); i++)
    if (Admission a = check(rs[i].get(), why); a != Admission::kAccepted) {
      if (which) *which = (int)i;
      return a;
    }
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) {
    if (why) *why = "the server is shutting down";
    return Admission::kStopping;
  }
  int active = 0;
  for (const auto& s : seqs_) active += s != nullptr;
  if (active + queue_.size() + rs.size() > (size_t)(cfg_.slots + cfg_.max_queue)) {
    stats_.requests_rejected++;
    if (why)
      *why = rs.size() == 1 ? fmt::format("all {} slots are busy and {} requests wait (--max-queue)", cfg_.slots,
                                          queue_.size())
                            : fmt::format("{} requests at once do not fit: {} of {} slots are busy and {} requests "
                                          "wait (--max-queue {})", rs.size(), active, cfg_.slots, queue_.size(),
                                          cfg_.max_queue);
    return Admission::kQueueFull;
  }
  const double t = now_s();
  for (auto& r : rs) queue_.emplace_back(std::move(r), t);
  cv_.notify_one();
  return Admission::kAccepted;
}

void Engine::shutdown(double grace_seconds) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_ || abort_at_ == 0 || now_s() + grace_seconds < abort_at_) abort_at_ = now_s() + grace_seconds;
    stopping_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  EngineStats s = stats_;
  s.queue_depth = (int)queue_.size();
  s.busy_slots = 0;
  for (const auto& q : seqs_) s.busy_slots += q != nullptr;
  return s;
}

// Moves queued requests into free slots, first come first served. Under mu_.
bool Engine::admit_locked() {
  bool any = false;
  for (int slot = 0; slot < cfg_.slots && !queue_.empty(); slot++) {
    if (seqs_[slot]) continue;
    auto seq = std::make_unique<Seq>();
    seq->req = std::move(queue_.front().first);
    seq->t_submit = queue_.front().second;
    queue_.pop_front();
    seq->slot = slot;
    seq->t_admit = now_s();
    const int budget = std::min(seq->req->max_tokens, cfg_.ctx - (int)seq->req->prompt.size());
    seq->result.prompt_tokens = (int)seq->req->prompt.size();
    seq->result.queue_seconds = seq->t_admit - seq->t_submit;
    if (seq->req->prompt_logprobs >= 0) {  // the first prompt token: nothing precedes it
      seq->result.prompt_events.reserve(seq->req->prompt.size());
      TokenEvent first;
      first.id = seq->req->prompt[0];
      first.logprob = std::numeric_limits<float>::quiet_NaN();
      seq->result.prompt_events.push_back(std::move(first));
    }
    if (Status s = seq->completion.init(*seq->req, *tok_, decoder_.config().vocab_size, budget); !s) continue;  // validated
    decoder_.clear(slot);
    seqs_[slot] = std::move(seq);
    any = true;
  }
  return any;
}

// Frees the slot first, so a request's on_done sees its slot already available to the next one.
void Engine::finish(Seq& s, FinishReason r) {
  s.result.finish = r;
  s.result.completion_tokens = (int)s.result.ids.size();
  s.result.total_seconds = now_s() - s.t_submit;
  GenResult result = std::move(s.result);
  std::shared_ptr<GenRequest> req = std::move(s.req);
  {
    std::lock_guard<std::mutex> lock(mu_);
    switch (r) {
      case FinishReason::kStop:
      case FinishReason::kLength: stats_.requests_ok++; break;
      case FinishReason::kCancelled: stats_.requests_cancelled++; break;
      case FinishReason::kAborted: stats_.requests_aborted++; break;
    }
    seqs_[s.slot].reset();  // s is gone after this
  }
  if (req->on_done) req->on_done(result);
}

void Engine::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      admit_locked();
      auto active = [&] { return std::any_of(seqs_.begin(), seqs_.end(), [](const auto& s) { return s != nullptr; }); };
      while (!active() && queue_.empty() && !stopping_) cv_.wait(lock);
      if (stopping_ && !active() && queue_.empty()) return;
      if (stopping_ && now_s() >= abort_at_) {
        // Grace is over: end what is left, queued requests included (they were accepted).
        std::vector<std::unique_ptr<Seq>> left;
        for (auto& q : queue_) {
          auto s = std::make_unique<Seq>();
          s->req = std::move(q.first);
          s->t_submit = q.second;
          s->slot = -1;
          s->result.prompt_tokens = (int)s->req->prompt.size();
          left.push_back(std::move(s));
        }
        queue_.clear();
        lock.unlock();
        for (auto& s : seqs_)
          if (s) finish(*s, FinishReason::kAborted);
        for (auto& s : left) {
          s->result.finish = FinishReason::kAborted;
          s->result.total_seconds = now_s() - s->t_submit;
          if (s->req->on_done) s->req->on_done(s->result);
          std::lock_guard<std::mutex> g(mu_);
          stats_.requests_aborted++;
        }
        return;
      }
      if (!active()) continue;
    }
    run_step();
  }
}

// The step's rows: every decoding sequence's last token, then prompt chunks of the sequences
// still reading their prompts within the prefill budget. uses_ gets each row whose logits are
// wanted, in row order: a decoding row, a prompt's last row, and every prompt row of a sequence
// that scores its prompt (at most slots + prefill_chunk rows in all, the logits buffer's rows).
void Engine::plan_rows() {
  rows_.clear();
  uses_.clear();
  for (auto& s : seqs_)
    if (s && s->next >= 0) {
      rows_.push_back(DecodeRow{s->slot, s->next, true});
      uses_.push_back(RowUse{s.get(), -1});
    }
  int budget = cfg_.prefill_chunk;
  for (auto& s : seqs_) {
    if (!s || s->next >= 0 || budget == 0) continue;
    const auto& p = s->req->prompt;
    const bool scored = s->req->prompt_logprobs >= 0;
    const int k = (int)std::min<size_t>(budget, p.size() - s->fed);
    for (int i = 0; i < k; i++) {
      const size_t at = s->fed + i;
      const bool last = at + 1 == p.size();
      rows_.push_back(DecodeRow{s->slot, p[at], last || scored});
      if (last || scored) uses_.push_back(RowUse{s.get(), last ? -1 : (int)at + 1});
    }
    s->fed += k;
    budget -= k;
  }
}

// The next token from a row of logits z (V): the request's Completion samples it and gives its
// log probability and the `logprobs` most likely entries.
TokenEvent Engine::sample(Seq& s, float* z) {
  TokenEvent ev;
  ev.id = s.completion.sample(z);
  s.completion.score(z, ev);
  return ev;
}

// Prompt token pos of s scored from the logits z (V) of the row before it.
void Engine::score_prompt(Seq& s, int pos, float* z) {
  TokenEvent ev;
  ev.id = s.req->prompt[pos];
  s.completion.score_prompt(z, ev);
  s.result.prompt_events.push_back(std::move(ev));
}

// The prompt's last row has run: its stats, counted before any callback (a request's on_done sees
// stats that include it). first_token: a token follows now (else the request only scored it).
void Engine::prompt_read(Seq& s, double t, bool first_token) {
  std::lock_guard<std::mutex> lock(mu_);
  s.result.ttft_seconds = t - s.t_submit;
  stats_.prompt_tokens += s.req->prompt.size();
  if (first_token) stats_.ttft.observe(s.result.ttft_seconds);
}

// Hands one sampled token to its request: stats, the text that became final (held back while it
// may start a stop string), the callbacks, and the end of the request when it came.
void Engine::deliver(Seq& s, TokenEvent ev, double t) {
  const bool is_eod = s.completion.is_end_of_document(ev.id);
  if (s.next < 0) prompt_read(s, t, true);  // the prompt's last row: the first token
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (s.next >= 0) stats_.token_latency.observe(t - s.t_last);
    stats_.generated_tokens += !is_eod;
  }
  s.t_last = t;
  FinishReason end = FinishReason::kLength;
  const bool done = s.completion.accept(ev, s.result, end);
  if (s.req->logprobs > 0) s.result.tokens.push_back(ev);
  if (is_eod) {
    if (!ev.text.empty() && s.req->on_token) s.req->on_token(ev);  // the held tail; the eod itself is not output
    return finish(s, FinishReason::kStop);
  }
  if (s.req->on_token && !s.req->on_token(ev)) return finish(s, FinishReason::kCancelled);
  if (done) return finish(s, end);
  s.next = ev.id;
}

void Engine::run_step() {
  plan_rows();
  if (Status st = decoder_.step(rows_.data(), (int)rows_.size(), logits_.data()); !st) {
    // Checked at admission; a failure here is a bug. End every sequence of the step rather than loop.
    for (const DecodeRow& row : rows_)
      if (seqs_[row.slot]) finish(*seqs_[row.slot], FinishReason::kAborted);
    return;
  }
  const double t = now_s();
  const size_t V = decoder_.config().vocab_size;
  // A sequence's rows come in order and its last use is its last row: finish() only after it.
  for (size_t r = 0; r < uses_.size(); r++) {
    Seq& s = *uses_[r].seq;
    float* z = logits_.data() + r * V;
    if (uses_[r].scores >= 0) {
      score_prompt(s, uses_[r].scores, z);
    } else if (s.req->max_tokens == 0) {  // scored only: it ends once its prompt is read
      prompt_read(s, t, false);
      finish(s, FinishReason::kLength);
    } else {
      deliver(s, sample(s, z), t);
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.steps++;
}

}  // namespace smelt
