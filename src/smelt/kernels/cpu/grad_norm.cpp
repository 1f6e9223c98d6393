// Global gradient norm (sum of squares) with a fixed reduction order, and the clipping factor.
// Not the distributed reduction (dist/): ranks sum their squared norms themselves.
#include <cmath>

#include "smelt/kernels/kernels.hpp"

namespace smelt {

namespace {
constexpr int64_t kBlock = 1 << 16;
constexpr int kMaxPartials = 4096;  // blocks per call on the stack; larger inputs loop in rounds
}  // namespace

double grad_norm_squared(const float* grad, int64_t n) {
  double total = 0.0;
  int64_t nblocks = (n + kBlock - 1) / kBlock;
  for (int64_t b0 = 0; b0 < nblocks; b0 += kMaxPartials) {
    int nb = (int)(nblocks - b0 < kMaxPartials ? nblocks - b0 : kMaxPartials);
    double part[kMaxPartials];
#pragma omp parallel for schedule(static)
    for (int b = 0; b < nb; b++) {
      int64_t i0 = (b0 + b) * kBlock, i1 = i0 + kBlock < n ? i0 + kBlock : n;
      double s = 0.0;
      for (int64_t i = i0; i < i1; i++) s += (double)grad[i] * grad[i];
      part[b] = s;
    }
    for (int b = 0; b < nb; b++) total += part[b];
  }
  return total;
}

double grad_norm_squared_ref(const float* grad, int64_t n) {
  long double s = 0;
  for (int64_t i = 0; i < n; i++) s += (long double)grad[i] * grad[i];
  return (double)s;
}

float grad_clip_scale(double norm, float max_norm) {
  if (max_norm <= 0.0f) return 1.0f;
  double c = max_norm / (norm + 1e-6);
  return c < 1.0 ? (float)c : 1.0f;
}

}  // namespace smelt
