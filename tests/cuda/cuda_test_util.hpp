// Helpers for the CUDA tests: a device buffer that frees itself, uploads and downloads, the
// normwise relative error, and the skip every CUDA test starts with. Not a test by itself.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
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

// The attention tests' shapes and masks (cuda_attention_test, cuda_attention_bf16_test).
struct AttnShape { int B, T, NH, NKV, HS; };
enum class Mask { kCausal, kDocuments, kDocumentsPadded };

// Segment ids as the loader writes them (dataset/packing.cpp): documents of 1..90 tokens numbered
// 0, 1, 2, ... along each row; kDocumentsPadded ends each row with 1..40 padding tokens (-1),
// which, as on the CPU, attend to the padding before them.
inline std::vector<int32_t> segments(const AttnShape& s, Mask mask, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<int32_t> seg((size_t)s.B * s.T);
  for (int b = 0; b < s.B; b++) {
    int32_t* row = seg.data() + (size_t)b * s.T;
    int id = 0, left = 1 + (int)(g() % 90);
    for (int t = 0; t < s.T; t++) {
      if (left == 0) id++, left = 1 + (int)(g() % 90);
      row[t] = id, left--;
    }
    if (mask == Mask::kDocumentsPadded)
      for (int t = s.T - 1 - (int)(g() % 40); t < s.T; t++) row[t] = -1;
  }
  return seg;
}

inline int count_non_finite(const std::vector<float>& v) {
  int n = 0;
  for (float x : v) n += !std::isfinite(x);
  return n;
}

}  // namespace smelt::test
