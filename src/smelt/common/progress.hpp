// Progress reporting for long work: a redrawn bar on stderr when it is a terminal (items/s, MB/s,
// ETA when the total is known), plain periodic log lines otherwise. Not thread-safe: call tick()
// from one thread.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace smelt {

class Progress {
 public:
  // total_bytes 0: unknown (no ETA). interval_s: seconds between plain log lines.
  Progress(std::string stage, uint64_t total_bytes, double interval_s = 10.0);
  // Reports the counters now if enough time has passed (0.2 s on a terminal, interval_s otherwise).
  void tick(uint64_t items, uint64_t bytes, const std::string& extra = "");
  // Clears the bar (terminal) so a summary can follow.
  void finish();
  double elapsed_s() const;

 private:
  std::string line(uint64_t items, uint64_t bytes, const std::string& extra) const;
  std::string stage_;
  uint64_t total_;
  double interval_s_;
  bool tty_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace smelt
