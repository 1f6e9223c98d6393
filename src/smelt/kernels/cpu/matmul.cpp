// Linear layers through BLAS: out = inp @ weight^T and its two backward GEMMs. OpenBLAS runs
// single-threaded; the OpenMP team takes shape-fixed tiles (one pool, docs/model.md "Threads").
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
// A GEMM's output is cut into tiles along its longer side, chosen from the shape alone (never
// from the thread count), one single-threaded sgemm per tile; OpenMP threads take tiles
// dynamically. BLAS picks its kernel and summation order from the call's shape, so equal shapes
// give equal bits for any thread count. Every tile re-packs the whole other operand, so tiles are
// few and large (bench/train/sgemm_bench, small config, 1 thread: the step's linear layers run at
// 63 GFLOP/s as 1 tile each, 60 as 2, 56 as 4, 55 as 8): 2 tiles along a side of at least
// kMinSide, else 1, and 1 for a very deep K (the LM head's dinp, K = V) where 2 lost 25%.
constexpr int kMinSide = 1024, kDeepK = 8192;
constexpr int kAlign = 16;  // tile edges on multiples of the sgemm micro-kernel's 16 rows

struct Cut {
  bool rows;  // cut C's rows (else its columns)
  int step, count;
};
inline Cut cut(int M, int N, int K) {
  Cut c;
  c.rows = M >= N;
  int len = c.rows ? M : N, parts = len >= kMinSide && K < kDeepK ? 2 : 1;
  c.step = ((len + parts - 1) / parts + kAlign - 1) / kAlign * kAlign;
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
  const Cut c = cut(N, OC, IC);
#pragma omp parallel for schedule(dynamic, 1)
  for (int k = 0; k < c.count; k++)
    gemm_tile(c, k, false, true, N, OC, IC, inp, IC, weight, IC, beta, out, OC);
}

void matmul_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC) {
  // dweight (OC,IC) += dout^T @ inp and dinp (N,IC) = dout (N,OC) @ weight (OC,IC): one task
  // list, largest tiles first, so 2 threads balance across both GEMMs (a 1-tile GEMM against
  // the other's 2 half tiles). Tiles write disjoint outputs: the order never changes the bits.
  const Cut cw = cut(OC, IC, N), ci = cut(N, IC, OC);
  const int nw = cw.count, ni = dinp ? ci.count : 0, nt = nw + ni;
  const double fw = 1.0 / nw, fi = 1.0 / (ni ? ni : 1);  // work per tile: both GEMMs are N*IC*OC
  int order[8];
  for (int k = 0; k < nt; k++) order[k] = k;  // nt <= 4
  std::stable_sort(order, order + nt, [&](int a, int b) { return (a < nw ? fw : fi) > (b < nw ? fw : fi); });
#pragma omp parallel for schedule(dynamic, 1)
  for (int t = 0; t < nt; t++) {
    int k = order[t];
    if (k < nw) gemm_tile(cw, k, true, false, OC, IC, N, dout, OC, inp, IC, 1.0f, dweight, IC);
    else gemm_tile(ci, k - nw, false, false, N, IC, OC, dout, OC, weight, IC, 0.0f, dinp, IC);
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
