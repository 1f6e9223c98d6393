// Linear layers: out = inp @ weight^T and its two backward GEMMs, in fp32 or with bf16 inputs
// (fp32 accumulation). Each tile is one single-threaded call into the chosen back end (gemm.cpp);
// the OpenMP team takes shape-fixed tiles (one pool, docs/model.md "Threads"). Not a GEMM
// implementation of our own.
#include <algorithm>
#include <cstdint>

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

// Tile k of C (M,N) = alpha op(A) op(B) + beta C, row-major; T float (fp32 GEMM) or uint16_t
// (bf16 inputs, fp32 C).
template <typename T>
inline void gemm_tile(const Cut& c, int k, bool ta, bool tb, int M, int N, int K, const T* A, int lda,
                      const T* B, int ldb, float beta, float* C, int ldc) {
  int x0 = k * c.step, len = c.rows ? M : N, n = len - x0 < c.step ? len - x0 : c.step;
  auto gemm = [&](int m, int nn, const T* a, const T* b, float* cc) {
    if constexpr (sizeof(T) == 4) gemm_f32(ta, tb, m, nn, K, 1.0f, a, lda, b, ldb, beta, cc, ldc);
    else gemm_bf16(ta, tb, m, nn, K, a, lda, b, ldb, beta, cc, ldc);
  };
  if (c.rows) gemm(n, N, ta ? A + x0 : A + (int64_t)x0 * lda, B, C + (int64_t)x0 * ldc);
  else gemm(M, n, A, tb ? B + (int64_t)x0 * ldb : B + x0, C + x0);
}

template <typename T>
void forward_tiles(float* out, const T* inp, const T* weight, int N, int IC, int OC, float beta) {
  const Cut c = cut(N, OC, IC);
#pragma omp parallel for schedule(dynamic, 1)
  for (int k = 0; k < c.count; k++)
    gemm_tile(c, k, false, true, N, OC, IC, inp, IC, weight, IC, beta, out, OC);
}

template <typename T>
void backward_tiles(float* dinp, float* dweight, const T* dout, const T* inp, const T* weight, int N, int IC,
                    int OC) {
  // dweight (OC,IC) += dout^T @ inp and dinp (N,IC) = dout (N,OC) @ weight (OC,IC): one task
  // list, largest tiles first, so 2 threads balance across both GEMMs (a 1-tile GEMM against
  // the other's 2 half tiles). Tiles write disjoint outputs: the order never changes the bits.
  const Cut cw = cut(OC, IC, N), ci = cut(N, IC, OC);
  const int nw = dweight ? cw.count : 0, ni = dinp ? ci.count : 0, nt = nw + ni;
  const double fw = 1.0 / (nw ? nw : 1), fi = 1.0 / (ni ? ni : 1);  // work per tile: both GEMMs are N*IC*OC
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
}  // namespace

void matmul_forward(float* out, const float* inp, const float* weight, int N, int IC, int OC,
                    float beta) {
  forward_tiles(out, inp, weight, N, IC, OC, beta);
}

void matmul_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC) {
  backward_tiles(dinp, dweight, dout, inp, weight, N, IC, OC);
}

void matmul_forward_bf16(float* out, uint16_t* inp16, const float* inp, const uint16_t* weight16,
                         int N, int IC, int OC, float beta) {
  bf16_from_f32(inp16, inp, (int64_t)N * IC);
  if (gemm_bf16_native()) {
    // One call that oneDNN threads itself: cutting it in tiles costs up to a quarter of the rate
    // on AMX (the LM head: 370 vs 273 GFLOP/s on one core), and its blocking over M and N keeps
    // each output's sum on one thread, so thread counts still give the same bits (tested).
    gemm_bf16_on(gemm_bf16_engine_for(N, IC, OC, LinearProduct::kForward), false, true, N, OC, IC, inp16, IC, weight16,
                 IC, beta, out, OC);
    return;
  }
  forward_tiles(out, inp16, weight16, N, IC, OC, beta);
}

void matmul_backward_bf16(float* dinp, float* dweight, uint16_t* dout16, uint16_t* inp16,
                          const float* dout, const float* inp, const uint16_t* weight16, int N,
                          int IC, int OC) {
  if (dout) bf16_from_f32(dout16, dout, (int64_t)N * OC);
  if (dweight) bf16_from_f32(inp16, inp, (int64_t)N * IC);
  if (gemm_bf16_native()) {  // as in the forward: whole GEMMs, each engine threading itself
    if (dweight)
      gemm_bf16_on(gemm_bf16_engine_for(N, IC, OC, LinearProduct::kDweight), true, false, OC, IC, N, dout16, OC, inp16, IC,
                   1.0f, dweight, IC);
    if (dinp)
      gemm_bf16_on(gemm_bf16_engine_for(N, IC, OC, LinearProduct::kDinp), false, false, N, IC, OC, dout16, OC, weight16, IC,
                   0.0f, dinp, IC);
    return;
  }
  backward_tiles(dinp, dweight, dout16, inp16, weight16, N, IC, OC);
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
  if (dweight)
    for (int o = 0; o < OC; o++)
      for (int i = 0; i < IC; i++) {
        double s = 0;
        for (int n = 0; n < N; n++) s += (double)dout[(int64_t)n * OC + o] * inp[(int64_t)n * IC + i];
        dweight[(int64_t)o * IC + i] += (float)s;
      }
}

void matmul_forward_bf16_ref(float* out, const float* inp, const uint16_t* weight16, int N, int IC,
                             int OC, float beta) {
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      double s = 0;
      for (int i = 0; i < IC; i++) {
        float w;
        f32_from_bf16(&w, weight16 + (int64_t)o * IC + i, 1);
        s += (double)bf16_round_f32(inp[(int64_t)n * IC + i]) * w;
      }
      float prev = beta != 0.0f ? beta * out[(int64_t)n * OC + o] : 0.0f;
      out[(int64_t)n * OC + o] = prev + (float)s;
    }
}

void matmul_backward_bf16_ref(float* dinp, float* dweight, const float* dout, const float* inp,
                              const uint16_t* weight16, int N, int IC, int OC) {
  auto w = [&](int o, int i) {
    float x;
    f32_from_bf16(&x, weight16 + (int64_t)o * IC + i, 1);
    return (double)x;
  };
  auto g = [&](int n, int o) { return (double)bf16_round_f32(dout[(int64_t)n * OC + o]); };
  if (dinp)
    for (int n = 0; n < N; n++)
      for (int i = 0; i < IC; i++) {
        double s = 0;
        for (int o = 0; o < OC; o++) s += g(n, o) * w(o, i);
        dinp[(int64_t)n * IC + i] = (float)s;
      }
  if (dweight)
    for (int o = 0; o < OC; o++)
      for (int i = 0; i < IC; i++) {
        double s = 0;
        for (int n = 0; n < N; n++) s += g(n, o) * bf16_round_f32(inp[(int64_t)n * IC + i]);
        dweight[(int64_t)o * IC + i] += (float)s;
      }
}

}  // namespace smelt
