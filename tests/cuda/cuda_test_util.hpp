// Helpers for the CUDA tests: a device buffer that frees itself, uploads and downloads, the
// normwise relative error, and the skip every CUDA test starts with. Not a test by itself.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "smelt/kernels/cuda/cuda_kernels.hpp"

namespace smelt::test {

// Every CUDA test runs only where a device is: on the GPU machine's prepared script
// (scripts/cuda-check); elsewhere it is skipped with this message.
#define SMELT_REQUIRE_CUDA_DEVICE()                                                                  \
  do {                                                                                               \
    if (smelt::cuda::device_count() == 0)                                                            \
      GTEST_SKIP() << (smelt::cuda::built() ? "no CUDA device on this machine"                       \
                                            : "this build has no CUDA backend (no nvcc at configure)"); \
  } while (0)

template <typename T>
struct DeviceVec {
  T* p = nullptr;
  int64_t n = 0;
  explicit DeviceVec(int64_t count) : n(count) { p = static_cast<T*>(cuda::device_alloc(count * (int64_t)sizeof(T))); }
  explicit DeviceVec(const std::vector<T>& host) : DeviceVec((int64_t)host.size()) { upload(host); }
  DeviceVec(const DeviceVec&) = delete;
  DeviceVec& operator=(const DeviceVec&) = delete;
  ~DeviceVec() { cuda::device_free(p); }
  void upload(const std::vector<T>& host) { cuda::copy_to_device(p, host.data(), n * (int64_t)sizeof(T), nullptr); }
  std::vector<T> download() const {
    std::vector<T> h(n);
    cuda::copy_to_host(h.data(), p, n * (int64_t)sizeof(T), nullptr);
    EXPECT_EQ(cuda::stream_sync(nullptr), "");
    return h;
  }
};

// ||a - b||_2 / ||b||_2 (0 when both are zero).
inline double norm_err(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    const double d = (double)a[i] - b[i];
    num += d * d;
    den += (double)b[i] * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}
inline double norm_err(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  return norm_err(a.data(), b.data(), std::min(a.size(), b.size()));
}

// Prints a measured error so the GPU machine's log shows every figure the bounds are held to.
inline void report(const std::string& what, double err, double bound) {
  std::printf("  %-48s %.3e (bound %.0e)\n", what.c_str(), err, bound);
  EXPECT_LE(err, bound) << what;
}

}  // namespace smelt::test
