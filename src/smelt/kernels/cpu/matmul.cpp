// Linear layers through BLAS: out = inp @ weight^T and its two backward GEMMs. OpenBLAS runs
// single-threaded; the OpenMP team splits the rows (one pool, see docs/model.md "Threads").
// Not a GEMM implementation of our own.
#include <algorithm>
#include <cstdint>

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
// GEMMs run on fixed blocks of kBlock rows, whatever the thread count: BLAS picks its kernel and
// summation order from the call's shape, so equal shapes give equal bits for 1 or 2 threads.
constexpr int kBlock = 256;  // 64 spent ~14% of a small-config step re-packing the weight per block
inline int nblocks(int rows) { return (rows + kBlock - 1) / kBlock; }
inline int block_rows(int rows, int b) { return rows - b * kBlock < kBlock ? rows - b * kBlock : kBlock; }
}  // namespace

void matmul_forward(float* out, const float* inp, const float* weight, int N, int IC, int OC,
                    float beta) {
#pragma omp parallel for schedule(static)
  for (int b = 0; b < nblocks(N); b++) {
    int64_t r0 = (int64_t)b * kBlock;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, block_rows(N, b), OC, IC, 1.0f,
                inp + r0 * IC, IC, weight, IC, beta, out + r0 * OC, OC);
  }
}

void matmul_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC) {
#pragma omp parallel
  {
    if (dinp) {
#pragma omp for schedule(static) nowait
      for (int b = 0; b < nblocks(N); b++) {
        int64_t r0 = (int64_t)b * kBlock;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, block_rows(N, b), IC, OC, 1.0f,
                    dout + r0 * OC, OC, weight, IC, 0.0f, dinp + r0 * IC, IC);
      }
    }
    // dweight rows [o0,o0+kBlock) = dout[:, o0:...]^T @ inp: each block owns whole rows of
    // dweight, summed over all N in one call.
#pragma omp for schedule(static)
    for (int b = 0; b < nblocks(OC); b++) {
      int64_t o0 = (int64_t)b * kBlock;
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, block_rows(OC, b), IC, N, 1.0f,
                  dout + o0, OC, inp, IC, 1.0f, dweight + o0 * IC, IC);
    }
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
