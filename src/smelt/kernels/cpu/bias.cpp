// Bias of a linear layer (the q/k/v projections of Qwen2): added to every row; its gradient is
// the column sums of the output's gradient. Not the GEMM (matmul.cpp).
#include <cstdint>

#include "smelt/kernels/kernels.hpp"

namespace smelt {

void bias_forward(float* out, const float* bias, int N, int OC) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    float* o = out + (int64_t)n * OC;
#pragma omp simd
    for (int j = 0; j < OC; j++) o[j] += bias[j];
  }
}

// Each thread owns a range of columns and sums its rows in order: fixed bits for any team size.
void bias_backward(float* dbias, const float* dout, int N, int OC) {
#pragma omp parallel for schedule(static)
  for (int j0 = 0; j0 < OC; j0 += 64) {
    const int j1 = j0 + 64 < OC ? j0 + 64 : OC;
    float acc[64] = {};
    for (int n = 0; n < N; n++) {
      const float* d = dout + (int64_t)n * OC;
      for (int j = j0; j < j1; j++) acc[j - j0] += d[j];
    }
    for (int j = j0; j < j1; j++) dbias[j] += acc[j - j0];
  }
}

}  // namespace smelt
