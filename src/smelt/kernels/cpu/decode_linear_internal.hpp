// What the decode kernels' files share (decode_linear.cpp, decode_linear_bf16.cpp): the path the
// dispatch chose, and the pieces of the per-element formula every path evaluates alike.
#pragma once
#include <unistd.h>

#include <cmath>
#include <cstdint>

#include "smelt/kernels/decode_linear.hpp"

namespace smelt::decode_detail {

DecodeIsa current_isa();  // decode_linear_set_isa's choice, else the CPU's best

// out = beta == 0 ? s : fma(beta, out, s) (out is not read when beta is 0).
inline float finish(float s, const float* o, float beta) { return beta == 0.0f ? s : std::fma(beta, *o, s); }

// The L1 data cache's size (32 KiB where the system does not say): how many weight rows a
// batch-1 tile reads side by side.
inline int64_t l1d_bytes() {
  static const int64_t l1 = [] {
    const long v = sysconf(_SC_LEVEL1_DCACHE_SIZE);
    return v > 0 ? (int64_t)v : int64_t(32) << 10;
  }();
  return l1;
}

constexpr int kLanes = 16;
// The fixed halving tree of 16 lane sums: q[j] = p[j] + p[j+8], then + [j+4], + [j+2], + [j+1]
// (the AVX-512 and AVX2 paths reduce their registers in exactly this order).
inline float tree16(const float* p) {
  float q[8];
  for (int j = 0; j < 8; j++) q[j] = p[j] + p[j + 8];
  for (int j = 0; j < 4; j++) q[j] = q[j] + q[j + 4];
  for (int j = 0; j < 2; j++) q[j] = q[j] + q[j + 2];
  return q[0] + q[1];
}

}  // namespace smelt::decode_detail
