// SwiGLU gate [Shazeer 2020]: out = silu(gate) * up on the fused [gate | up] projection output.
// Not the projections themselves (matmul.cpp).
#include <cmath>

#include "smelt/kernels/cpu/vec_math.hpp"
#include "smelt/kernels/kernels.hpp"

namespace smelt {

void swiglu_forward(float* out, const float* gu, int N, int H) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* g = gu + (int64_t)n * 2 * H;
    const float* u = g + H;
    float* o = out + (int64_t)n * H;
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= H; i += 8) {
      __m256 gi = _mm256_loadu_ps(g + i);
      __m256 den = _mm256_add_ps(one, vmath::exp8(_mm256_sub_ps(zero, gi)));
      _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_div_ps(gi, den), _mm256_loadu_ps(u + i)));
    }
    for (; i < H; i++) o[i] = g[i] / (1.0f + vmath::exp1(-g[i])) * u[i];
  }
}

// d/dg silu(g) = s + g s (1-s), s = sigmoid(g).
void swiglu_backward(float* dgu, const float* dout, const float* gu, int N, int H) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* g = gu + (int64_t)n * 2 * H;
    const float* u = g + H;
    const float* d = dout + (int64_t)n * H;
    float* dg = dgu + (int64_t)n * 2 * H;
    float* du = dg + H;
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= H; i += 8) {
      __m256 gi = _mm256_loadu_ps(g + i), di = _mm256_loadu_ps(d + i);
      __m256 s = _mm256_div_ps(one, _mm256_add_ps(one, vmath::exp8(_mm256_sub_ps(zero, gi))));
      __m256 silu = _mm256_mul_ps(gi, s);
      _mm256_storeu_ps(du + i, _mm256_mul_ps(di, silu));
      __m256 ds = _mm256_add_ps(s, _mm256_mul_ps(silu, _mm256_sub_ps(one, s)));
      _mm256_storeu_ps(dg + i, _mm256_mul_ps(_mm256_mul_ps(di, _mm256_loadu_ps(u + i)), ds));
    }
    for (; i < H; i++) {
      float s = 1.0f / (1.0f + vmath::exp1(-g[i]));
      float silu = g[i] * s;
      du[i] = d[i] * silu;
      dg[i] = (d[i] * u[i]) * (s + silu * (1.0f - s));
    }
  }
}

void swiglu_forward_ref(float* out, const float* gu, int N, int H) {
  for (int n = 0; n < N; n++)
    for (int i = 0; i < H; i++) {
      double g = gu[n * 2 * H + i], u = gu[n * 2 * H + H + i];
      out[n * H + i] = (float)(g / (1.0 + std::exp(-g)) * u);
    }
}

void swiglu_backward_ref(float* dgu, const float* dout, const float* gu, int N, int H) {
  for (int n = 0; n < N; n++)
    for (int i = 0; i < H; i++) {
      double g = gu[n * 2 * H + i], u = gu[n * 2 * H + H + i], d = dout[n * H + i];
      double s = 1.0 / (1.0 + std::exp(-g));
      dgu[n * 2 * H + H + i] = (float)(d * g * s);
      dgu[n * 2 * H + i] = (float)(d * u * (s * (1 - s) * g + s));
    }
}

}  // namespace smelt
