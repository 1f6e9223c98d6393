// Progress bar / periodic log lines.
#include "smelt/common/progress.hpp"

#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

namespace smelt {

Progress::Progress(std::string stage, uint64_t total_bytes, double interval_s)
    : stage_(std::move(stage)), total_(total_bytes), interval_s_(interval_s),
      tty_(isatty(STDERR_FILENO)), start_(std::chrono::steady_clock::now()), last_(start_) {}

double Progress::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string Progress::line(uint64_t items, uint64_t bytes, const std::string& extra) const {
  double t = std::max(elapsed_s(), 1e-9);
  double mb = bytes / 1e6;
  std::string s = fmt::format("[{}] {} docs  {:.1f} MB  {:.0f} docs/s  {:.2f} MB/s", stage_, items,
                              mb, items / t, mb / t);
  if (total_ > 0 && bytes > 0) {
    double frac = std::min(1.0, static_cast<double>(bytes) / total_);
    double eta = t / frac - t;
    s += fmt::format("  {:.0f}%  ETA {:02d}:{:02d}", frac * 100, static_cast<int>(eta) / 60,
                     static_cast<int>(eta) % 60);
  }
  if (!extra.empty()) s += "  " + extra;
  return s;
}

void Progress::tick(uint64_t items, uint64_t bytes, const std::string& extra) {
  auto now = std::chrono::steady_clock::now();
  double since = std::chrono::duration<double>(now - last_).count();
  if (since < (tty_ ? 0.2 : interval_s_)) return;
  last_ = now;
  if (tty_) {
    std::fprintf(stderr, "\r%s\x1b[K", line(items, bytes, extra).c_str());
    drawn_ = true;
  } else {
    std::fprintf(stderr, "%s\n", line(items, bytes, extra).c_str());
  }
  std::fflush(stderr);
}

void Progress::finish() {
  if (tty_ && drawn_) std::fprintf(stderr, "\r\x1b[K");
  drawn_ = false;
}

}  // namespace smelt
