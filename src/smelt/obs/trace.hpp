// The process-wide timeline tracer (docs/trace.md): spans, counters and instants recorded into one
// buffer per thread and written as Chrome trace-event JSON, which Perfetto and chrome://tracing
// open. Off, every site costs one relaxed atomic load. Not the trainer's choice of steps
// (train/trainer_trace.cpp) nor reading traces back (trace_tools.hpp).
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "smelt/common/status.hpp"

namespace smelt {

namespace trace_detail {
extern std::atomic<bool> g_on;
struct Arg {
  const char* key;  // a string literal (or trace_intern)
  double value;
};
}  // namespace trace_detail

inline bool trace_on() { return trace_detail::g_on.load(std::memory_order_relaxed); }

// The clock of every event: the steady clock, in nanoseconds (written as microseconds).
int64_t trace_now_ns();

// A span on the calling thread's track, from construction to destruction, written as a complete
// event ("X"). Names and argument keys must outlive the trace: string literals, or trace_intern.
// Spans of one thread nest by construction (scopes); a span begun while tracing was off is not
// recorded even if tracing is on when it ends, and the reverse.
class TraceSpan {
 public:
  explicit TraceSpan(const char* name) {
    if (trace_on()) begin(name);
  }
  TraceSpan(const char* name, const char* key, double value) {
    if (trace_on()) {
      begin(name);
      arg(key, value);
    }
  }
  ~TraceSpan() {
    if (active_) end();
  }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;
  // Adds a numeric argument (shown with the span; at most kMaxArgs, more are dropped).
  void arg(const char* key, double value) {
    if (active_ && nargs_ < kMaxArgs) args_[nargs_++] = {key, value};
  }
  bool active() const { return active_; }
  static constexpr int kMaxArgs = 3;

 private:
  void begin(const char* name);
  void end();
  const char* name_ = nullptr;
  int64_t start_ns_ = 0;
  trace_detail::Arg args_[kMaxArgs];
  int nargs_ = 0;
  bool active_ = false;
};

// A counter sample ("C") on the calling process: one series `key` of the counter `name`.
// Non-finite values are not recorded.
void trace_counter(const char* name, const char* key, double value);
// An instant event ("i"). scope: 'g' global, 'p' this process, 't' this thread.
void trace_instant(const char* name, char scope = 't', const char* key = nullptr, double value = 0);
// Names the calling thread's track (a string literal); costs nothing while tracing is off. Threads
// that never record an event while tracing is on get no track.
void trace_thread_name(const char* name);
// A copy of s that lives as long as the process (for names made at run time; rare events only).
const char* trace_intern(std::string_view s);

// Control, from one thread (the trainer's). trace_start turns recording on; trace_stop turns it
// off (spans open then still end and are recorded); trace_idle says whether every span, counter
// or instant begun while on has been recorded, after which trace_write may read the buffers.
void trace_start();
void trace_stop();
bool trace_idle();
// Events recorded since the last write (every thread).
int64_t trace_event_count();

// What the file says about the process it came from.
struct TraceProcessInfo {
  int rank = 0, world_size = 1;
  int64_t clock_sync_ns = -1;  // the steady clock right after the ranks' barrier (-1: none)
  nlohmann::json extra = nlohmann::json::object();  // more otherData fields (steps, run_dir, ...)
};
// pid of rank r in every Smelt trace (pid 0 is special to Perfetto).
inline int trace_pid(int rank) { return rank + 1; }

// Writes the recorded events as {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}
// to path atomically (parent folders created) and empties the buffers. Call only after
// trace_stop() and trace_idle(). events: how many went into the file.
Status trace_write(const std::string& path, const TraceProcessInfo& info, int64_t* events = nullptr);

// "A-B" (1 <= A <= B) or "N" (the single step N); "" means off (first = 0, last = -1).
Status trace_parse_steps(std::string_view text, int64_t& first, int64_t& last);

// Resident memory of this process in bytes (/proc/self/statm), 0 when unknown.
int64_t trace_rss_bytes();

}  // namespace smelt
