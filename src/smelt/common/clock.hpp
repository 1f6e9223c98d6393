// The one monotonic clock the tree times itself with: seconds since an arbitrary start, and the
// milliseconds since a time point. Not wall-clock time (timestamps in files use system_clock).
#pragma once
#include <chrono>

namespace smelt {

// Seconds on the steady clock; only differences mean anything.
inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Milliseconds from t0 to now on the steady clock.
inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace smelt
