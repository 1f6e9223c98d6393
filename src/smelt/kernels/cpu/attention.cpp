// Causal grouped-query self-attention, flash-style [Dao et al. 2022, FlashAttention]: 64x64
// query/key tiles, each product one small sgemm, an online softmax, only the logsumexp saved, so
// memory is linear in T per head in both passes. Optional segment mask (document masking).
// Not RoPE, not the projections.
#include <cmath>
#include <cstring>
#include <limits>

#include "smelt/kernels/cpu/vec_math.hpp"
#include "smelt/kernels/kernels.hpp"

namespace smelt {

namespace {
#ifndef SMELT_ATTN_TILE
#define SMELT_ATTN_TILE 64
#endif
constexpr int kTile = SMELT_ATTN_TILE;  // queries and keys per tile; each tile product is one sgemm

inline float dot(const float* a, const float* b, int n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}
inline bool visible(const int32_t* seg, int64_t row0, int i, int j) {
  return j <= i && (!seg || seg[row0 + i] == seg[row0 + j]);
}
inline int tiles(int T) { return (T + kTile - 1) / kTile; }

// S (qn,kn) = scale * Q K^T for query rows [i0,i0+qn), key rows [j0,j0+kn); masked entries -inf.
// Returns false when every entry is masked.
bool scores(float* S, const float* Q, const float* K, int ld, const int32_t* seg, int64_t row0,
            int i0, int qn, int j0, int kn, int HS, float scale) {
  gemm_f32(false, true, qn, kn, HS, scale, Q, ld, K, ld, 0.0f, S, kTile);
  if (!seg && j0 + kn - 1 <= i0) return true;  // wholly below the diagonal: nothing masked
  bool any = false;
  for (int r = 0; r < qn; r++)
    for (int c = 0; c < kn; c++) {
      if (visible(seg, row0, i0 + r, j0 + c)) any = true;
      else S[r * kTile + c] = -std::numeric_limits<float>::infinity();
    }
  return any;
}
}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, const int32_t* seg, int B, int T,
                       int NH, int NKV, int HS) {
  const int QKV = (NH + 2 * NKV) * HS, group = NH / NKV, OC = NH * HS;
  const float scale = 1.0f / std::sqrt((float)HS);
  const float kNegInf = -std::numeric_limits<float>::infinity();
  const int nt = tiles(T);
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
  for (int bh = 0; bh < B * NH; bh++) {
    for (int qt = 0; qt < nt; qt++) {
      int b = bh / NH, h = bh % NH, kvh = h / group;
      int64_t row0 = (int64_t)b * T;
      int i0 = qt * kTile, qn = T - i0 < kTile ? T - i0 : kTile;
      const float* Q = qkv + (row0 + i0) * QKV + h * HS;
      float* O = out + (row0 + i0) * OC + h * HS;  // the accumulator, rescaled in place
      float S[kTile * kTile], m[kTile], l[kTile];
      for (int r = 0; r < qn; r++) {
        m[r] = kNegInf;
        l[r] = 0.0f;
        std::memset(O + (int64_t)r * OC, 0, sizeof(float) * HS);
      }
      for (int j0 = 0; j0 < i0 + qn; j0 += kTile) {
        int kn = T - j0 < kTile ? T - j0 : kTile;
        const float* K = qkv + (row0 + j0) * QKV + (NH + kvh) * HS;
        const float* V = qkv + (row0 + j0) * QKV + (NH + NKV + kvh) * HS;
        if (!scores(S, Q, K, QKV, seg, row0, i0, qn, j0, kn, HS, scale)) continue;
        for (int r = 0; r < qn; r++) {
          float* Sr = S + r * kTile;
          float cm = vmath::max_of(Sr, kn, m[r]);
          if (cm == kNegInf) {  // nothing visible for this row in this tile
            for (int c = 0; c < kn; c++) Sr[c] = 0.0f;
            continue;
          }
          float alpha = vmath::exp1(m[r] - cm);
          float sum = vmath::exp_sub_sum(Sr, Sr, cm, kn);
          l[r] = l[r] * alpha + sum;
          m[r] = cm;
          if (alpha != 1.0f) {
            float* o = O + (int64_t)r * OC;
            for (int d = 0; d < HS; d++) o[d] *= alpha;
          }
        }
        gemm_f32(false, false, qn, HS, kn, 1.0f, S, kTile, V, QKV, 1.0f, O, OC);
      }
      for (int r = 0; r < qn; r++) {
        float inv = 1.0f / l[r];
        float* o = O + (int64_t)r * OC;
        for (int d = 0; d < HS; d++) o[d] *= inv;
        lse[(int64_t)bh * T + i0 + r] = m[r] + std::log(l[r]);
      }
    }
  }
}

namespace {
// P = exp(S - lse) (masked entries 0), then dS = P * (dP - D) * scale in dP. Rows of the tile.
void softmax_grad(float* P, float* dP, const float* lse_rows, const float* D, int qn, int kn,
                  float scale) {
  const __m256 vscale = _mm256_set1_ps(scale);
  for (int r = 0; r < qn; r++) {
    float* Pr = P + r * kTile;
    float* dPr = dP + r * kTile;
    const __m256 vl = _mm256_set1_ps(lse_rows[r]), vD = _mm256_set1_ps(D[r]);
    int c = 0;
    for (; c + 8 <= kn; c += 8) {
      __m256 p = vmath::exp8(_mm256_sub_ps(_mm256_loadu_ps(Pr + c), vl));
      _mm256_storeu_ps(Pr + c, p);
      __m256 d = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(dPr + c), vD), vscale);
      _mm256_storeu_ps(dPr + c, _mm256_mul_ps(p, d));
    }
    for (; c < kn; c++) {
      float p = vmath::exp1(Pr[c] - lse_rows[r]);
      Pr[c] = p;
      dPr[c] = p * ((dPr[c] - D[r]) * scale);
    }
  }
}
}  // namespace

// With P = softmax(S), dS = P * (dP - D), D_i = sum_j P_ij dP_ij = dout_i . out_i. One pass per
// (batch, kv head) task, which owns the dq rows of its group's query heads and its own dk, dv
// rows: for each key tile, for each query head of the group, for each query tile at or after it,
// five tile products (S, dP, dV += P^T dO, dK += dS^T Q, dQ += dS K). No atomics and no
// recomputation of S and dP for a second pass; every sum runs in a fixed order, so results do
// not depend on the thread count. P is recomputed from the saved logsumexp (FlashAttention-2).
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, const int32_t* seg, int B, int T, int NH, int NKV,
                        int HS) {
  const int QKV = (NH + 2 * NKV) * HS, group = NH / NKV, OC = NH * HS;
  const float scale = 1.0f / std::sqrt((float)HS);
  const int nt = tiles(T);
#pragma omp parallel for schedule(dynamic, 1)
  for (int bk = 0; bk < B * NKV; bk++) {
    int b = bk / NKV, kvh = bk % NKV;
    int64_t row0 = (int64_t)b * T;
    for (int t = 0; t < T; t++) {
      float* r = dqkv + (row0 + t) * QKV;
      std::memset(r + (NH + kvh) * HS, 0, sizeof(float) * HS);
      std::memset(r + (NH + NKV + kvh) * HS, 0, sizeof(float) * HS);
      for (int h = kvh * group; h < (kvh + 1) * group; h++) std::memset(r + h * HS, 0, sizeof(float) * HS);
    }
    float P[kTile * kTile], dP[kTile * kTile], D[kTile];
    for (int kt = 0; kt < nt; kt++) {
      int j0 = kt * kTile, kn = T - j0 < kTile ? T - j0 : kTile;
      const float* K = qkv + (row0 + j0) * QKV + (NH + kvh) * HS;
      const float* V = qkv + (row0 + j0) * QKV + (NH + NKV + kvh) * HS;
      float* dK = dqkv + (row0 + j0) * QKV + (NH + kvh) * HS;
      float* dV = dqkv + (row0 + j0) * QKV + (NH + NKV + kvh) * HS;
      for (int h = kvh * group; h < (kvh + 1) * group; h++) {
        for (int i0 = j0; i0 < T; i0 += kTile) {
          int qn = T - i0 < kTile ? T - i0 : kTile;
          const float* Q = qkv + (row0 + i0) * QKV + h * HS;
          const float* dO = dout + (row0 + i0) * OC + h * HS;
          float* dQ = dqkv + (row0 + i0) * QKV + h * HS;
          if (!scores(P, Q, K, QKV, seg, row0, i0, qn, j0, kn, HS, scale)) continue;
          for (int r = 0; r < qn; r++)
            D[r] = dot(dO + (int64_t)r * OC, out + (row0 + i0 + r) * OC + h * HS, HS);
          gemm_f32(false, true, qn, kn, HS, 1.0f, dO, OC, V, QKV, 0.0f, dP, kTile);
          softmax_grad(P, dP, lse + ((int64_t)b * NH + h) * T + i0, D, qn, kn, scale);
          gemm_f32(true, false, kn, HS, qn, 1.0f, P, kTile, dO, OC, 1.0f, dV, QKV);
          gemm_f32(true, false, kn, HS, qn, 1.0f, dP, kTile, Q, QKV, 1.0f, dK, QKV);
          gemm_f32(false, false, qn, HS, kn, 1.0f, dP, kTile, K, QKV, 1.0f, dQ, QKV);
        }
      }
    }
  }
}

// Reference: the (T,T) probability matrix per head, in double accumulators.
void attention_forward_ref(float* out, const float* qkv, const int32_t* seg, float* scratch, int B,
                           int T, int NH, int NKV, int HS) {
  const int QKV = (NH + 2 * NKV) * HS, group = NH / NKV;
  const double scale = 1.0 / std::sqrt((double)HS);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) {
      int kvh = h / group;
      int64_t row0 = (int64_t)b * T;
      for (int i = 0; i < T; i++) {
        double m = -1e300;
        for (int j = 0; j < T; j++) {
          double s = -1e300;
          if (visible(seg, row0, i, j)) {
            s = 0;
            for (int d = 0; d < HS; d++)
              s += (double)qkv[(row0 + i) * QKV + h * HS + d] * qkv[(row0 + j) * QKV + (NH + kvh) * HS + d];
            s *= scale;
          }
          scratch[(int64_t)i * T + j] = (float)s;
          m = s > m ? s : m;
        }
        double sum = 0;
        for (int j = 0; j < T; j++) sum += visible(seg, row0, i, j) ? std::exp(scratch[i * T + j] - m) : 0.0;
        for (int d = 0; d < HS; d++) {
          double o = 0;
          for (int j = 0; j < T; j++)
            if (visible(seg, row0, i, j))
              o += std::exp(scratch[i * T + j] - m) / sum * qkv[(row0 + j) * QKV + (NH + NKV + kvh) * HS + d];
          out[(row0 + i) * NH * HS + h * HS + d] = (float)o;
        }
      }
    }
}

void attention_backward_ref(float* dqkv, const float* dout, const float* qkv, const int32_t* seg,
                            float* scratch, int B, int T, int NH, int NKV, int HS) {
  const int QKV = (NH + 2 * NKV) * HS, group = NH / NKV, OC = NH * HS;
  const double scale = 1.0 / std::sqrt((double)HS);
  std::memset(dqkv, 0, sizeof(float) * (size_t)B * T * QKV);
  auto Q = [&](int64_t r, int h, int d) { return (double)qkv[r * QKV + h * HS + d]; };
  auto K = [&](int64_t r, int kh, int d) { return (double)qkv[r * QKV + (NH + kh) * HS + d]; };
  auto Vv = [&](int64_t r, int kh, int d) { return (double)qkv[r * QKV + (NH + NKV + kh) * HS + d]; };
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) {
      int kvh = h / group;
      int64_t row0 = (int64_t)b * T;
      // P into scratch
      for (int i = 0; i < T; i++) {
        double m = -1e300;
        for (int j = 0; j <= i; j++) {
          if (!visible(seg, row0, i, j)) continue;
          double s = 0;
          for (int d = 0; d < HS; d++) s += Q(row0 + i, h, d) * K(row0 + j, kvh, d);
          scratch[i * T + j] = (float)(s * scale);
          m = s * scale > m ? s * scale : m;
        }
        double sum = 0;
        for (int j = 0; j <= i; j++) if (visible(seg, row0, i, j)) sum += std::exp(scratch[i * T + j] - m);
        for (int j = 0; j < T; j++)
          scratch[i * T + j] = visible(seg, row0, i, j) ? (float)(std::exp(scratch[i * T + j] - m) / sum) : 0.0f;
      }
      for (int i = 0; i < T; i++) {
        const float* dy = dout + (row0 + i) * OC + h * HS;
        double dP[4096], D = 0;  // T <= 4096 in tests
        for (int j = 0; j < T; j++) {
          double s = 0;
          for (int d = 0; d < HS; d++) s += dy[d] * Vv(row0 + j, kvh, d);
          dP[j] = s;
          D += scratch[i * T + j] * s;
        }
        for (int j = 0; j < T; j++) {
          double p = scratch[i * T + j];
          if (p == 0.0) continue;
          double ds = p * (dP[j] - D) * scale;
          for (int d = 0; d < HS; d++) {
            dqkv[(row0 + i) * QKV + h * HS + d] += (float)(ds * K(row0 + j, kvh, d));
            dqkv[(row0 + j) * QKV + (NH + kvh) * HS + d] += (float)(ds * Q(row0 + i, h, d));
            dqkv[(row0 + j) * QKV + (NH + NKV + kvh) * HS + d] += (float)(p * dy[d]);
          }
        }
      }
    }
}

}  // namespace smelt
