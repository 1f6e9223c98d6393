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
// A GEMM's output is cut into a fixed number of tiles along its longer side, chosen from the
// shape alone (never from the thread count), one single-threaded sgemm per tile; OpenMP threads
// take tiles dynamically. BLAS picks its kernel and summation order from the call's shape, so
// equal shapes give equal bits for any thread count. Fewer, larger tiles re-pack the other operand
// less often (256-row blocks cost ~6% of the small config's GEMM time in packing; measured with
// bench/train/sgemm_bench); 4 tiles still let 2 threads balance under load.
#ifndef SMELT_MATMUL_TILES
#define SMELT_MATMUL_TILES 4
#endif
constexpr int kTiles = SMELT_MATMUL_TILES;
constexpr int kAlign = 16;  // tile edges on multiples of the sgemm micro-kernel's 16 rows

struct Cut {
  bool rows;  // cut C's rows (else its columns)
  int step, count;
};
inline Cut cut(int M, int N) {
  Cut c;
  c.rows = M >= N;
  int len = c.rows ? M : N;
  c.step = ((len + kTiles - 1) / kTiles + kAlign - 1) / kAlign * kAlign;
  c.count = (len + c.step - 1) / c.step;
  return c;
}

// Tile k of C (M,N) = alpha op(A) op(B) + beta C, row-major.
inline void gemm_tile(const Cut& c, int k, bool ta, bool tb, int M, int N, int K, const float* A,
                      int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  int x0 = k * c.step, len = c.rows ? M : N, n = len - x0 < c.step ? len - x0 : c.step;
  CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
  if (c.rows) {
    const float* a = ta ? A + x0 : A + (int64_t)x0 * lda;
    cblas_sgemm(CblasRowMajor, TA, TB, n, N, K, 1.0f, a, lda, B, ldb, beta, C + (int64_t)x0 * ldc, ldc);
  } else {
    const float* b = tb ? B + (int64_t)x0 * ldb : B + x0;
    cblas_sgemm(CblasRowMajor, TA, TB, M, n, K, 1.0f, A, lda, b, ldb, beta, C + x0, ldc);
  }
}
}  // namespace

void matmul_forward(float* out, const float* inp, const float* weight, int N, int IC, int OC,
                    float beta) {
  const Cut c = cut(N, OC);
#pragma omp parallel for schedule(dynamic, 1)
  for (int k = 0; k < c.count; k++)
    gemm_tile(c, k, false, true, N, OC, IC, inp, IC, weight, IC, beta, out, OC);
}

void matmul_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC) {
  // dinp (N,IC) = dout (N,OC) @ weight (OC,IC); dweight (OC,IC) += dout^T @ inp: one task list,
  // dinp tiles first, so threads balance across both GEMMs.
  const Cut ci = cut(N, IC), cw = cut(OC, IC);
  const int ni = dinp ? ci.count : 0;
#pragma omp parallel for schedule(dynamic, 1)
  for (int k = 0; k < ni + cw.count; k++) {
    if (k < ni) gemm_tile(ci, k, false, false, N, IC, OC, dout, OC, weight, IC, 0.0f, dinp, IC);
    else gemm_tile(cw, k - ni, true, false, OC, IC, N, dout, OC, inp, IC, 1.0f, dweight, IC);
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
