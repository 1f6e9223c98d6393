// Token embedding lookup and its scatter-add backward. Not the LM head (matmul.cpp).
#include <cstring>

#include <omp.h>

#include "smelt/kernels/kernels.hpp"

namespace smelt {

void embedding_forward(float* out, const int32_t* inp, const float* wte, int N, int C, int V) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    std::memcpy(out + (int64_t)n * C, wte + (int64_t)inp[n] * C, sizeof(float) * C);
  }
}

// Each thread owns a channel range and walks the tokens in order: no races, fixed summation order.
void embedding_backward(float* dwte, const float* dout, const int32_t* inp, int N, int C, int V) {
#pragma omp parallel
  {
    int nt = omp_get_num_threads(), id = omp_get_thread_num();
    int c0 = (int)((int64_t)C * id / nt), c1 = (int)((int64_t)C * (id + 1) / nt);
    for (int n = 0; n < N; n++) {
      float* d = dwte + (int64_t)inp[n] * C;
      const float* g = dout + (int64_t)n * C;
      for (int c = c0; c < c1; c++) d[c] += g[c];
    }
  }
}

void embedding_forward_ref(float* out, const int32_t* inp, const float* wte, int N, int C, int V) {
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) out[(int64_t)n * C + c] = wte[(int64_t)inp[n] * C + c];
}

void embedding_backward_ref(float* dwte, const float* dout, const int32_t* inp, int N, int C,
                            int V) {
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) dwte[(int64_t)inp[n] * C + c] += dout[(int64_t)n * C + c];
}

}  // namespace smelt
