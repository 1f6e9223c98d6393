// Global gradient norm (sum of squares) with a fixed reduction order, and the clipping factor.
// Not the distributed reduction (dist/): ranks sum their squared norms themselves.
#include <cmath>

#include "smelt/kernels/kernels.hpp"

namespace smelt {

namespace {
constexpr int kMaxPartials = 4096;  // blocks per call on the stack; larger inputs loop in rounds
}  // namespace

void grad_norm_block_partials(const float* grad, int64_t n, int64_t first_block, int64_t last_block, double* out) {
  const int64_t nb = last_block - first_block;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < nb; b++) {
    const int64_t i0 = (first_block + b) * kGradNormBlock;
    const int64_t i1 = i0 + kGradNormBlock < n ? i0 + kGradNormBlock : n;
    double s = 0.0;
    for (int64_t i = i0; i < i1; i++) s += (double)grad[i] * grad[i];
    out[b] = s;
  }
}

double grad_norm_squared(const float* grad, int64_t n) {
  double total = 0.0;
  const int64_t nblocks = (n + kGradNormBlock - 1) / kGradNormBlock;
  double part[kMaxPartials];
  for (int64_t b0 = 0; b0 < nblocks; b0 += kMaxPartials) {
    const int64_t b1 = nblocks - b0 < kMaxPartials ? nblocks : b0 + kMaxPartials;
    grad_norm_block_partials(grad, n, b0, b1, part);
    for (int64_t b = 0; b < b1 - b0; b++) total += part[b];
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
