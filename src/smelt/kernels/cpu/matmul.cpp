// Linear layers through BLAS: out = inp @ weight^T and its two backward GEMMs. OpenBLAS runs
// single-threaded; the OpenMP team splits the rows (one pool, see docs/model.md "Threads").
// Not a GEMM implementation of our own.
#include <algorithm>

#include <cblas.h>
#include <omp.h>

#include "smelt/kernels/kernels.hpp"

extern "C" void openblas_set_num_threads(int);

namespace smelt {

void kernels_set_threads(int threads) {
  openblas_set_num_threads(1);
  omp_set_num_threads(std::max(1, threads));
}

namespace {
// Rows [r0,r1) of `rows` for thread id of nt, in blocks of 16 so GEMM panels stay whole.
void split(int rows, int id, int nt, int& r0, int& r1) {
  int blocks = (rows + 15) / 16;
  r0 = std::min(rows, (int)((int64_t)blocks * id / nt) * 16);
  r1 = std::min(rows, (int)((int64_t)blocks * (id + 1) / nt) * 16);
}
}  // namespace

void matmul_forward(float* out, const float* inp, const float* weight, int N, int IC, int OC,
                    float beta) {
#pragma omp parallel
  {
    int r0, r1;
    split(N, omp_get_thread_num(), omp_get_num_threads(), r0, r1);
    if (r1 > r0)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, OC, IC, 1.0f,
                  inp + (int64_t)r0 * IC, IC, weight, IC, beta, out + (int64_t)r0 * OC, OC);
  }
}

void matmul_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC) {
#pragma omp parallel
  {
    int id = omp_get_thread_num(), nt = omp_get_num_threads(), r0, r1;
    if (dinp) {
      split(N, id, nt, r0, r1);
      if (r1 > r0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, IC, OC, 1.0f,
                    dout + (int64_t)r0 * OC, OC, weight, IC, 0.0f, dinp + (int64_t)r0 * IC, IC);
    }
    // dweight rows [o0,o1) = dout[:, o0:o1]^T @ inp: each thread owns whole rows of dweight.
    split(OC, id, nt, r0, r1);
    if (r1 > r0)
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1 - r0, IC, N, 1.0f, dout + r0, OC,
                  inp, IC, 1.0f, dweight + (int64_t)r0 * IC, IC);
  }
}

void matmul_forward_ref(float* out, const float* inp, const float* weight, int N, int IC, int OC,
                        float beta) {
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      double s = 0;
      for (int i = 0; i < IC; i++) s += (double)inp[(int64_t)n * IC + i] * weight[(int64_t)o * IC + i];
      float prev = beta != 0.0f ? beta * out[(int64_t)n * OC + o] : 0.0f;
      out[(int64_t)n * OC + o] = prev + (float)s;
    }
}

void matmul_backward_ref(float* dinp, float* dweight, const float* dout, const float* inp,
                         const float* weight, int N, int IC, int OC) {
  if (dinp)
    for (int n = 0; n < N; n++)
      for (int i = 0; i < IC; i++) {
        double s = 0;
        for (int o = 0; o < OC; o++) s += (double)dout[(int64_t)n * OC + o] * weight[(int64_t)o * IC + i];
        dinp[(int64_t)n * IC + i] = (float)s;
      }
  for (int o = 0; o < OC; o++)
    for (int i = 0; i < IC; i++) {
      double s = 0;
      for (int n = 0; n < N; n++) s += (double)dout[(int64_t)n * OC + o] * inp[(int64_t)n * IC + i];
      dweight[(int64_t)o * IC + i] += (float)s;
    }
}

}  // namespace smelt
