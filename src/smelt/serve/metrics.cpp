// Prometheus text for GET /metrics (metrics.hpp). Histograms as Prometheus wants them:
// cumulative _bucket{le} lines ending with le="+Inf" (= _count), then _sum and _count.
#include "smelt/serve/metrics.hpp"

#include <fmt/format.h>

namespace smelt {

void ServeCounters::finished(FinishReason r) {
  std::lock_guard<std::mutex> lk(mu_);
  s_.finish[(int)r]++;
}

void ServeCounters::rejected(Admission a) {
  std::lock_guard<std::mutex> lk(mu_);
  s_.rejected[(int)a]++;
}

void ServeCounters::response(int status) {
  std::lock_guard<std::mutex> lk(mu_);
  s_.status[status]++;
}

ServeCounters::Snapshot ServeCounters::snapshot() const {
  std::lock_guard<std::mutex> lk(mu_);
  return s_;
}

namespace {

void family(std::string& o, const char* name, const char* type, const char* help) {
  o += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

// Shortest text that reads back as the same double ("0.025", "1", "2.5").
std::string num(double v) { return fmt::format("{}", v); }

void histogram(std::string& o, const char* name, const char* help, const Histogram& h) {
  family(o, name, "histogram", help);
  uint64_t cum = 0;
  for (size_t i = 0; i < h.bounds.size(); i++) {
    cum += i < h.counts.size() ? h.counts[i] : 0;
    o += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, num(h.bounds[i]), cum);
  }
  o += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n", name, h.count);
  o += fmt::format("{}_sum {}\n{}_count {}\n", name, num(h.sum), name, h.count);
}

}  // namespace

std::string metrics_render(const EngineStats& e, const ServeCounters::Snapshot& c) {
  std::string o;
  family(o, "smelt_requests_total", "counter", "Completions that ended, by finish reason.");
  const char* finish[4] = {"stop", "length", "cancelled", "aborted"};
  for (int i = 0; i < 4; i++) o += fmt::format("smelt_requests_total{{finish=\"{}\"}} {}\n", finish[i], c.finish[i]);
  family(o, "smelt_requests_rejected_total", "counter",
         "Completion requests the engine refused, by reason (queue_full is HTTP 429).");
  const std::pair<Admission, const char*> why[] = {{Admission::kQueueFull, "queue_full"}, {Admission::kTooLong, "too_long"},
                                                   {Admission::kInvalid, "invalid"}, {Admission::kStopping, "stopping"}};
  for (const auto& [a, name] : why)
    o += fmt::format("smelt_requests_rejected_total{{reason=\"{}\"}} {}\n", name, c.rejected[(int)a]);
  family(o, "smelt_http_responses_total", "counter", "HTTP responses, by status code.");
  for (const auto& [code, n] : c.status) o += fmt::format("smelt_http_responses_total{{code=\"{}\"}} {}\n", code, n);
  family(o, "smelt_prompt_tokens_total", "counter", "Prompt tokens read (prefill).");
  o += fmt::format("smelt_prompt_tokens_total {}\n", e.prompt_tokens);
  family(o, "smelt_generation_tokens_total", "counter", "Tokens generated.");
  o += fmt::format("smelt_generation_tokens_total {}\n", e.generated_tokens);
  family(o, "smelt_decode_steps_total", "counter", "Batched model steps run.");
  o += fmt::format("smelt_decode_steps_total {}\n", e.steps);
  histogram(o, "smelt_time_to_first_token_seconds", "Seconds from a request's arrival to its first token.", e.ttft);
  histogram(o, "smelt_time_per_output_token_seconds", "Seconds between a request's successive tokens.",
            e.token_latency);
  family(o, "smelt_queue_depth", "gauge", "Requests waiting for a slot.");
  o += fmt::format("smelt_queue_depth {}\n", e.queue_depth);
  family(o, "smelt_busy_slots", "gauge", "Slots holding a sequence (prefilling or decoding).");
  o += fmt::format("smelt_busy_slots {}\n", e.busy_slots);
  family(o, "smelt_slots", "gauge", "Sequence slots (--slots).");
  o += fmt::format("smelt_slots {}\n", e.slots);
  return o;
}

}  // namespace smelt
