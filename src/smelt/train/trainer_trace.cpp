// The trainer's trace of a step range ([trace], trainer_impl.hpp): its clock sync and start, its end
// and RUN/trace/rank{R}.json. Not the recording nor the file format (obs/trace.hpp).
#include <chrono>
#include <filesystem>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "smelt/train/trainer_impl.hpp"

namespace fs = std::filesystem;

namespace smelt::train_detail {

// [trace] steps = "A-B": at the range's first step every rank passes one barrier and notes its
// clock right after it (`smelt trace merge` aligns the ranks' files there), then recording starts.
// Once per run (a rollback that steps back does not trace again).
Status Trainer::trace_begin_step() {
  const int64_t next = step_ + 1;
  if (c_.trace.first <= 0 || trace_sync_ns_ >= 0 || next < c_.trace.first || next > c_.trace.last)
    return Status::ok();
  if (Status s = comm_->barrier(); !s) return s;
  trace_sync_ns_ = trace_now_ns();
  trace_thread_name("main");
  trace_start();
  trace_instant("clock_sync", 'g', "rank", rank());
  tracing_ = true;
  return Status::ok();
}

// Per traced step the counters; after the range's last step recording stops, and the file is
// written as soon as the spans begun in the range have ended (a background checkpoint write may
// end a few steps later).
void Trainer::trace_end_step(const StepStats& st) {
  if (tracing_) {
    trace_counter("tokens_per_s", "tokens_per_s", st.tok_s);
    trace_counter("memory", "rss_mb", (double)trace_rss_bytes() / 1e6);
    trace_last_step_ = step_;
    if (step_ >= c_.trace.last) {
      trace_stop();
      tracing_ = false;
      trace_pending_ = true;
    }
  }
  if (trace_pending_ && trace_idle()) trace_write_file();
}

// RUN/trace/rank{R}.json (or [trace] dir). A trace that cannot be written does not stop training.
void Trainer::trace_write_file() {
  trace_stop();
  tracing_ = trace_pending_ = false;
  for (int i = 0; i < 200 && !trace_idle(); i++) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const fs::path dir = c_.trace.dir.empty() ? fs::path(run_dir_) / "trace" : fs::path(c_.trace.dir);
  const std::string path = (dir / fmt::format("rank{}.json", rank())).string();
  if (!trace_idle()) {
    spdlog::warn("trace: a span of the traced range is still open after 2 s; {} is not written", path);
    return;
  }
  TraceProcessInfo info;
  info.rank = rank();
  info.world_size = ranks();
  info.clock_sync_ns = trace_sync_ns_;
  info.extra = {{"steps", c_.trace.steps}, {"first_step", c_.trace.first}, {"last_step", trace_last_step_},
                {"run_dir", run_dir_}};
  int64_t events = 0;
  if (Status s = trace_write(path, info, &events); !s) {
    spdlog::warn("trace: {}", s.message());
    return;
  }
  spdlog::info("trace of steps {}-{}: {} ({} events; open it in ui.perfetto.dev{})", c_.trace.first, trace_last_step_,
               path, events, ranks() > 1 ? ", or merge the ranks' files with smelt trace merge" : "");
}

}  // namespace smelt::train_detail
