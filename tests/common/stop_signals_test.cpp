// StopSignals: a SIGTERM/SIGINT runs the stop callback on the watcher, never on the thread that set
// it up or on threads started after it; oneDNN's sgemm (whose JIT code points rsp into the heap)
// survives a storm of SIGTERMs there, which corrupted the heap when a plain handler took them.
#include "smelt/common/stop_signals.hpp"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "smelt/kernels/kernels.hpp"

using namespace smelt;

namespace {

std::atomic<int> g_calls{0};
std::atomic<pid_t> g_tid{0};  // the thread the last stop callback ran on

void record_stop() {  // async-signal-safe, as StopSignals requires
  g_tid = gettid();
  g_calls++;
}

// Sends `sig` to the whole process until the callback has run (at most 10 s).
bool signal_until_stopped(int sig) {
  const int before = g_calls;
  for (int i = 0; i < 100000 && g_calls == before; i++) {
    kill(getpid(), sig);
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return g_calls > before;
}

bool blocked_here(int sig) {
  sigset_t now;
  pthread_sigmask(SIG_BLOCK, nullptr, &now);
  return sigismember(&now, sig) == 1;
}

TEST(StopSignalsTest, TheCallbackRunsOffTheCallerAndItsLaterThreads) {
  const pid_t main_tid = gettid();
  std::atomic<pid_t> worker_tid{0};
  std::atomic<bool> done{false};
  {
    StopSignals stop(record_stop);
    EXPECT_TRUE(blocked_here(SIGTERM));
    EXPECT_TRUE(blocked_here(SIGINT));
    std::thread worker([&] {  // a compute thread: busy, signals blocked by inheritance
      worker_tid = gettid();
      while (!done) {
      }
    });
    while (!worker_tid) std::this_thread::yield();
    for (int sig : {SIGTERM, SIGINT}) {
      EXPECT_TRUE(signal_until_stopped(sig)) << "signal " << sig << " never reached the callback";
      EXPECT_NE(g_tid, main_tid) << "signal " << sig;
      EXPECT_NE(g_tid, worker_tid.load()) << "signal " << sig;
    }
    done = true;
    worker.join();
  }
  EXPECT_FALSE(blocked_here(SIGTERM));  // the destructor restored the mask (and joined the watcher)
  EXPECT_FALSE(blocked_here(SIGINT));
}

// The child: one thread runs oneDNN's fp32 sgemm at a depth that uses its heap workspace (K > 84
// on AVX-512) while another sends SIGTERM to the process every 20 us; heap churn beside it, so
// a corrupted chunk is found by free(). Without StopSignals (a plain handler) this aborts within
// a few hundred GEMMs.
void gemm_under_signals() {
  alarm(60);  // a corrupted heap can also hang; the default SIGALRM action ends the child
  StopSignals stop(record_stop);
  gemm_set_backend(GemmBackend::kOneDnn);
  const int M = 64, N = 64, K = 512;
  std::vector<float> a((size_t)M * K, 0.5f), b((size_t)K * N, 0.25f), c((size_t)M * N);
  std::atomic<bool> done{false};
  std::thread sender([&] {
    while (!done) {
      kill(getpid(), SIGTERM);
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  });
  for (int i = 0; i < 3000; i++) {
    gemm_f32(false, false, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, c.data(), N);
    std::free(std::malloc(1000 + i % 5000));
  }
  done = true;
  sender.join();
  const bool right = c[0] == 0.125f * K && g_calls > 0;
  a = {}, b = {}, c = {};  // frees the buffers the signal frames would have landed beside
  std::exit(right ? 0 : 3);
}

TEST(StopSignalsTest, OneDnnGemmSurvivesAStormOfStopSignals) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // OpenBLAS has started threads
  EXPECT_EXIT(gemm_under_signals(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
