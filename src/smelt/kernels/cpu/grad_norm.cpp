// Global gradient norm (sum of squares) with a fixed reduction order, and the clipping factor.
// Not the distributed reduction (dist/): ranks sum their squared norms themselves.
#include <immintrin.h>

#include <cmath>

#include "smelt/kernels/kernels.hpp"

namespace smelt {

namespace {
constexpr int kMaxPartials = 4096;  // blocks per call on the stack; larger inputs loop in rounds

// Sum of squares of one block in double: sixteen lanes (four AVX2 accumulators of four doubles,
// so the adds do not wait on each other), combined in a fixed order, then the tail. The order
// depends only on the block's length: the same bits on every thread count and every rank.
inline double block_sum_squares(const float* g, int64_t n) {
  __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 4; k++) {
      __m256d x = _mm256_cvtps_pd(_mm_loadu_ps(g + i + 4 * k));
      acc[k] = _mm256_fmadd_pd(x, x, acc[k]);
    }
  __m256d a = _mm256_add_pd(_mm256_add_pd(acc[0], acc[1]), _mm256_add_pd(acc[2], acc[3]));
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, a);
  double s = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; i < n; i++) s += (double)g[i] * g[i];
  return s;
}
}  // namespace

void grad_norm_block_partials(const float* grad, int64_t n, int64_t first_block, int64_t last_block, double* out) {
  const int64_t nb = last_block - first_block;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < nb; b++) {
    const int64_t i0 = (first_block + b) * kGradNormBlock;
    const int64_t i1 = i0 + kGradNormBlock < n ? i0 + kGradNormBlock : n;
    out[b] = block_sum_squares(grad + i0, i1 - i0);
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
