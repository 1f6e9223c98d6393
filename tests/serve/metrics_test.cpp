// Prometheus text (serve/metrics.hpp): every family has HELP and TYPE, histogram buckets are
// cumulative and end with +Inf equal to _count, labels carry the finish reasons and status codes.
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "smelt/serve/metrics.hpp"

using namespace smelt;

namespace {

bool has_line(const std::string& text, const std::string& line) {
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (l == line) return true;
  return false;
}

TEST(Metrics, RendersEveryFamily) {
  EngineStats e;
  e.slots = 4;
  e.busy_slots = 1;
  e.queue_depth = 2;
  e.prompt_tokens = 30;
  e.generated_tokens = 12;
  e.ttft.counts[0] = 1;  // one in (0, 0.01], two in (0.025, 0.05]
  e.ttft.counts[2] = 2;
  e.ttft.count = 3;
  e.ttft.sum = 0.105;
  ServeCounters c;
  c.finished(FinishReason::kStop);
  c.finished(FinishReason::kLength);
  c.finished(FinishReason::kLength);
  c.rejected(Admission::kQueueFull);
  c.response(200);
  c.response(429);
  std::string t = metrics_render(e, c.snapshot());
  for (const char* l : {"# TYPE smelt_requests_total counter", "smelt_requests_total{finish=\"stop\"} 1",
                        "smelt_requests_total{finish=\"length\"} 2", "smelt_requests_total{finish=\"cancelled\"} 0",
                        "smelt_requests_rejected_total{reason=\"queue_full\"} 1",
                        "smelt_http_responses_total{code=\"429\"} 1", "smelt_prompt_tokens_total 30",
                        "smelt_generation_tokens_total 12", "# TYPE smelt_time_to_first_token_seconds histogram",
                        "smelt_time_to_first_token_seconds_bucket{le=\"0.01\"} 1",
                        "smelt_time_to_first_token_seconds_bucket{le=\"0.025\"} 1",
                        "smelt_time_to_first_token_seconds_bucket{le=\"0.05\"} 3",
                        "smelt_time_to_first_token_seconds_bucket{le=\"30\"} 3",
                        "smelt_time_to_first_token_seconds_bucket{le=\"+Inf\"} 3",
                        "smelt_time_to_first_token_seconds_sum 0.105", "smelt_time_to_first_token_seconds_count 3",
                        "# TYPE smelt_time_per_output_token_seconds histogram",
                        "smelt_time_per_output_token_seconds_count 0", "smelt_queue_depth 2", "smelt_busy_slots 1",
                        "smelt_slots 4"})
    EXPECT_TRUE(has_line(t, l)) << l << "\n" << t;
  // every sample line belongs to a family declared above it
  std::istringstream in(t);
  std::string declared;
  for (std::string l; std::getline(in, l);) {
    if (l.rfind("# TYPE ", 0) == 0) declared = l.substr(7, l.find(' ', 7) - 7);
    if (l.empty() || l[0] == '#') continue;
    EXPECT_EQ(l.rfind(declared, 0), 0u) << l;
  }
}

}  // namespace
