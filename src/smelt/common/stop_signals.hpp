// SIGINT/SIGTERM as a stop request taken on a thread of its own: the compute threads never run a
// handler. Needed because oneDNN's JIT sgemm (2.6, jit_avx512_common_gemm_f32) points rsp into a
// heap workspace while it runs, and a signal delivered there writes its frame into the heap
// (oneDNN issue #4845, fixed in 3.11). Not the stop logic itself (the caller's flag).
#pragma once
#include <signal.h>

#include <thread>

namespace smelt {

// While it lives: SIGINT and SIGTERM are blocked in the constructing thread and in every thread it
// starts from then on (they inherit the mask), and a watcher thread takes them with sigwait and
// calls on_stop. A handler that calls on_stop is installed too, for threads that existed before
// (OpenBLAS starts its pool before main), so on_stop must be async-signal-safe (set an atomic
// flag). Construct it before any worker thread starts. Processes spawned while it lives inherit the
// block. The destructor stops the watcher and restores the mask; the handler stays.
class StopSignals {
 public:
  explicit StopSignals(void (*on_stop)());
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  sigset_t set_, old_;
  std::thread watcher_;
};

}  // namespace smelt
