// StopSignals (stop_signals.hpp): block in the caller, sigwait on a watcher thread.
#include "smelt/common/stop_signals.hpp"

#include <pthread.h>

#include <atomic>

namespace smelt {

namespace {
std::atomic<void (*)()> g_on_stop{nullptr};
std::atomic<bool> g_watcher_done{false};

void on_signal(int) {
  if (auto f = g_on_stop.load()) f();
}
}  // namespace

StopSignals::StopSignals(void (*on_stop)()) {
  g_on_stop = on_stop;
  g_watcher_done = false;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigemptyset(&set_);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set_, &old_);
  watcher_ = std::thread([this] {
    for (;;) {
      int sig = 0;
      if (sigwait(&set_, &sig) != 0) continue;
      if (g_watcher_done) return;
      if (auto f = g_on_stop.load()) f();
    }
  });
}

StopSignals::~StopSignals() {
  g_watcher_done = true;
  pthread_kill(watcher_.native_handle(), SIGTERM);  // pending on the watcher until its sigwait takes it
  watcher_.join();
  pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

}  // namespace smelt
