// Causal grouped-query attention for bf16 mixed precision: the same maths as attention.cpp with
// its matrix products on bf16 inputs and fp32 sums (AMX through gemm_bf16), the softmax and its
// gradient in fp32. Blocked by queries only: a block of kQB query rows meets every key it may see
// in one GEMM (qn x keys x HS), since each bf16 GEMM call has a fixed cost that 64x64 tiles would
// pay dozens of times per row block. Scores of one block live in per-thread scratch (kQB x T), not
// in the saved activations: what backward keeps is still only the logsumexp. Not the fp32 kernel.
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "smelt/kernels/cpu/vec_math.hpp"
#include "smelt/kernels/kernels.hpp"

namespace smelt {

namespace {
constexpr int kQB = 128;  // query rows per block

// Per-thread scratch: S/P (kQB x T) fp32, dP (kQB x T) fp32, P and dS in bf16 (kQB x T each).
struct Scratch {
  float *s, *dp;
  uint16_t *p16, *ds16;
};
Scratch scratch_for(float* base, int T) {
  const int64_t n = (int64_t)kQB * T;
  float* mine = base + (int64_t)omp_get_thread_num() * attention_bf16_scratch_floats(T, 1);
  return {mine, mine + n, (uint16_t*)(mine + 2 * n), (uint16_t*)(mine + 2 * n) + n};
}

// Query i's row of S (keys [0, kv)) scaled, masked, and turned into probabilities P: keys after
// i are 0 without being looked at (causal), segment masking only where segments are given. lse
// computed here (forward: P = exp(s - m) / sum, one exp per key) or given (backward: exp(s - lse)).
inline float softmax_row(float* s, int kv, float scale, const int32_t* seg, int64_t row0, int i, const float* lse_in) {
  const float kNegInf = -std::numeric_limits<float>::infinity();
  const int vis = i + 1;  // keys [0, vis) may be visible
#pragma omp simd
  for (int j = 0; j < vis; j++) s[j] *= scale;
  if (seg)
    for (int j = 0; j < vis; j++)
      if (seg[row0 + j] != seg[row0 + i]) s[j] = kNegInf;
  float lse;
  if (lse_in) {
    lse = *lse_in;
    vmath::exp_sub_sum(s, s, lse, vis);  // s = exp(s - lse); -inf -> 0
  } else {
    const float m = vmath::max_of(s, vis, kNegInf);  // finite: query i always sees itself
    const float sum = vmath::exp_sub_sum(s, s, m, vis);
    lse = m + std::log(sum);
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int j = 0; j < vis; j++) s[j] *= inv;
  }
  for (int j = vis; j < kv; j++) s[j] = 0.0f;
  return lse;
}
}  // namespace

int64_t attention_bf16_scratch_floats(int T, int threads) {
  // fp32 S and dP, bf16 P and dS: 3 floats' worth per (row, key)
  return (int64_t)threads * 3 * kQB * T;
}

void attention_forward_bf16(float* out, float* lse, uint16_t* qkv16, float* scratch, const float* qkv,
                            const int32_t* seg, int B, int T, int NH, int NKV, int HS) {
  const int QKV = (NH + 2 * NKV) * HS, group = NH / NKV, OC = NH * HS;
  const float scale = 1.0f / std::sqrt((float)HS);
  bf16_from_f32(qkv16, qkv, (int64_t)B * T * QKV);
  const int nb = (T + kQB - 1) / kQB;
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
  for (int bh = 0; bh < B * NH; bh++)
    for (int qb = nb - 1; qb >= 0; qb--) {  // the longest rows first
      const int b = bh / NH, h = bh % NH, kvh = h / group;
      const int64_t row0 = (int64_t)b * T;
      const int i0 = qb * kQB, qn = std::min(kQB, T - i0), kv = i0 + qn;  // keys [0, kv) are visible
      Scratch w = scratch_for(scratch, T);
      const uint16_t* Q = qkv16 + (row0 + i0) * QKV + h * HS;
      const uint16_t* K = qkv16 + row0 * QKV + (NH + kvh) * HS;
      const uint16_t* V = qkv16 + row0 * QKV + (NH + NKV + kvh) * HS;
      gemm_bf16(false, true, qn, kv, HS, Q, QKV, K, QKV, 0.0f, w.s, kv);  // S = Q K^T
      for (int r = 0; r < qn; r++) {
        float* s = w.s + (int64_t)r * kv;
        lse[((int64_t)b * NH + h) * T + i0 + r] = softmax_row(s, kv, scale, seg, row0, i0 + r, nullptr);
      }
      bf16_from_f32_serial(w.p16, w.s, (int64_t)qn * kv);
      gemm_bf16(false, false, qn, HS, kv, w.p16, kv, V, QKV, 0.0f, out + (row0 + i0) * OC + h * HS, OC);  // O = P V
    }
}

// One task per (batch, kv head): it owns the dK, dV rows of its kv head and the dQ rows of its
// query heads, so sums need no atomics and run in a fixed order (any thread count, same bits).
// For each query head of the group and each query block: S and P again from lse, dP = dO V^T,
// dS = P * (dP - D) * scale with D_i = dO_i . O_i, then dV += P^T dO, dK += dS^T Q, dQ = dS K.
void attention_backward_bf16(float* dqkv, uint16_t* qkv16, uint16_t* dout16, float* scratch, const float* dout,
                             const float* qkv, const float* out, const float* lse, const int32_t* seg, int B, int T,
                             int NH, int NKV, int HS) {
  const int QKV = (NH + 2 * NKV) * HS, group = NH / NKV, OC = NH * HS;
  const float scale = 1.0f / std::sqrt((float)HS);
  bf16_from_f32(qkv16, qkv, (int64_t)B * T * QKV);
  bf16_from_f32(dout16, dout, (int64_t)B * T * OC);
  const int nb = (T + kQB - 1) / kQB;
#pragma omp parallel for schedule(dynamic, 1)
  for (int bk = 0; bk < B * NKV; bk++) {
    const int b = bk / NKV, kvh = bk % NKV;
    const int64_t row0 = (int64_t)b * T;
    for (int t = 0; t < T; t++) {
      float* r = dqkv + (row0 + t) * QKV;
      std::memset(r + (NH + kvh) * HS, 0, sizeof(float) * HS);
      std::memset(r + (NH + NKV + kvh) * HS, 0, sizeof(float) * HS);
    }
    Scratch w = scratch_for(scratch, T);
    const uint16_t* K = qkv16 + row0 * QKV + (NH + kvh) * HS;
    const uint16_t* V = qkv16 + row0 * QKV + (NH + NKV + kvh) * HS;
    float* dK = dqkv + row0 * QKV + (NH + kvh) * HS;
    float* dV = dqkv + row0 * QKV + (NH + NKV + kvh) * HS;
    for (int h = kvh * group; h < (kvh + 1) * group; h++)
      for (int qb = 0; qb < nb; qb++) {
        const int i0 = qb * kQB, qn = std::min(kQB, T - i0), kv = i0 + qn;
        const uint16_t* Q = qkv16 + (row0 + i0) * QKV + h * HS;
        const uint16_t* dO = dout16 + (row0 + i0) * OC + h * HS;
        const float* lse_h = lse + ((int64_t)b * NH + h) * T + i0;
        gemm_bf16(false, true, qn, kv, HS, Q, QKV, K, QKV, 0.0f, w.s, kv);    // S = Q K^T
        gemm_bf16(false, true, qn, kv, HS, dO, OC, V, QKV, 0.0f, w.dp, kv);  // dP = dO V^T
        for (int r = 0; r < qn; r++) {
          float* p = w.s + (int64_t)r * kv;
          float* dp = w.dp + (int64_t)r * kv;
          softmax_row(p, kv, scale, seg, row0, i0 + r, lse_h + r);
          const float* o = out + (row0 + i0 + r) * OC + h * HS;
          const float* g = dout + (row0 + i0 + r) * OC + h * HS;
          float D = 0.0f;
#pragma omp simd reduction(+ : D)
          for (int d = 0; d < HS; d++) D += g[d] * o[d];
          const int vis = i0 + r + 1;  // P is 0 after the query's own key
#pragma omp simd
          for (int j = 0; j < vis; j++) dp[j] = p[j] * (dp[j] - D) * scale;
          for (int j = vis; j < kv; j++) dp[j] = 0.0f;
        }
        bf16_from_f32_serial(w.p16, w.s, (int64_t)qn * kv);
        bf16_from_f32_serial(w.ds16, w.dp, (int64_t)qn * kv);
        gemm_bf16(true, false, kv, HS, qn, w.p16, kv, dO, OC, 1.0f, dV, QKV);                 // dV += P^T dO
        gemm_bf16(true, false, kv, HS, qn, w.ds16, kv, Q, QKV, 1.0f, dK, QKV);                // dK += dS^T Q
        gemm_bf16(false, false, qn, HS, kv, w.ds16, kv, K, QKV, 0.0f, dqkv + (row0 + i0) * QKV + h * HS, QKV);  // dQ
      }
  }
}

}  // namespace smelt
