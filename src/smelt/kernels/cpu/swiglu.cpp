// SwiGLU gate [Shazeer 2020]: out = silu(gate) * up on the fused [gate | up] projection output.
// Not the projections themselves (matmul.cpp).
#include <cmath>

#include "smelt/kernels/kernels.hpp"

namespace smelt {

void swiglu_forward(float* out, const float* gu, int N, int H) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* g = gu + (int64_t)n * 2 * H;
    const float* u = g + H;
    float* o = out + (int64_t)n * H;
    for (int i = 0; i < H; i++) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
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
    for (int i = 0; i < H; i++) {
      float s = 1.0f / (1.0f + std::exp(-g[i]));
      float silu = g[i] * s;
      du[i] = d[i] * silu;
      dg[i] = d[i] * u[i] * (s + silu * (1.0f - s));
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
