// The tracer's cost per event (bench/trace/run): a span with tracing off and on, a counter,
// writing the file and reading the RSS, each timed over many events on one thread. With the events per step of a
// traced run this bounds the step-time overhead however noisy the machine's A/B runs are.
// Usage: trace_bench [EVENTS]   (default 200000)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "smelt/obs/trace.hpp"

using namespace smelt;

namespace {

double now_ns() {
  return (double)std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best of 5 of ns per iteration of f over n iterations.
template <typename F>
double per_event(int64_t n, F f) {
  double best = 1e30;
  for (int rep = 0; rep < 5; rep++) {
    const double t0 = now_ns();
    for (int64_t i = 0; i < n; i++) f(i);
    best = std::min(best, (now_ns() - t0) / (double)n);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 200000;
  volatile double sink = 0;
  const double empty = per_event(n, [&](int64_t i) { sink = sink + (double)i; });
  trace_stop();
  const double off = per_event(n, [&](int64_t i) {
    TraceSpan s("layer", "layer", (double)(i & 7));
    sink = sink + (double)i;
  });
  trace_thread_name("bench");
  trace_start();
  const double on = per_event(n, [&](int64_t i) {
    TraceSpan s("layer", "layer", (double)(i & 7));
    sink = sink + (double)i;
  });
  const double counter = per_event(n, [&](int64_t i) { trace_counter("tokens_per_s", "tokens_per_s", (double)i); });
  trace_stop();
  const double rss = per_event(2000, [&](int64_t) { sink = sink + (double)trace_rss_bytes(); });
  const int64_t events = trace_event_count();
  const std::string path = (std::filesystem::temp_directory_path() / "smelt_trace_bench.json").string();
  const double t0 = now_ns();
  int64_t written = 0;
  if (Status s = trace_write(path, TraceProcessInfo{}, &written); !s) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 1;
  }
  const double write = (now_ns() - t0) / (double)written;
  std::error_code ec;
  const double mb = (double)std::filesystem::file_size(path, ec) / 1e6;
  std::filesystem::remove(path, ec);
  std::printf("tracer cost per event (best of 5 x %lld, the loop's own %.1f ns taken off):\n", (long long)n, empty);
  std::printf("  span, tracing off  %7.1f ns\n", off - empty);
  std::printf("  span, tracing on   %7.1f ns\n", on - empty);
  std::printf("  counter, on        %7.1f ns\n", counter - empty);
  std::printf("  writing the file   %7.1f ns per event (%lld events recorded, %.1f MB)\n", write, (long long)events, mb);
  std::printf("  reading the RSS    %7.1f us (/proc/self/statm, once per traced step, between steps)\n", rss / 1e3);
  return 0;
}
