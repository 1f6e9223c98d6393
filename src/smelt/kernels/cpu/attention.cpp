// Causal grouped-query self-attention, flash-style [Dao et al. 2022, FlashAttention]: keys in
// tiles with an online softmax, only the logsumexp saved, so memory is linear in T per head in
// both passes. Optional segment mask (document masking). Not RoPE, not the projections.
#include <cmath>
#include <cstring>
#include <limits>

#include "smelt/kernels/kernels.hpp"

namespace smelt {

namespace {
constexpr int kTile = 64;      // keys per tile
constexpr int kMaxHS = 512;    // head size bound for the stack accumulators (checked in model/)

inline float dot(const float* a, const float* b, int n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}
inline bool visible(const int32_t* seg, int64_t row0, int i, int j) {
  return j <= i && (!seg || seg[row0 + i] == seg[row0 + j]);
}
}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, const int32_t* seg, int B, int T,
                       int NH, int NKV, int HS) {
  const int QKV = (NH + 2 * NKV) * HS, group = NH / NKV;
  const float scale = 1.0f / std::sqrt((float)HS);
  const float kNegInf = -std::numeric_limits<float>::infinity();
#pragma omp parallel for collapse(2) schedule(dynamic, 8)
  for (int bh = 0; bh < B * NH; bh++) {
    for (int i = 0; i < T; i++) {
      int b = bh / NH, h = bh % NH, kvh = h / group;
      int64_t row0 = (int64_t)b * T;
      const float* q = qkv + (row0 + i) * QKV + h * HS;
      float acc[kMaxHS] = {0};
      float s[kTile];
      float m = kNegInf, l = 0.0f;
      for (int j0 = 0; j0 <= i; j0 += kTile) {
        int j1 = j0 + kTile <= i + 1 ? j0 + kTile : i + 1;
        float cm = m;
        for (int j = j0; j < j1; j++) {
          float x = kNegInf;
          if (visible(seg, row0, i, j)) x = dot(q, qkv + (row0 + j) * QKV + (NH + kvh) * HS, HS) * scale;
          s[j - j0] = x;
          cm = x > cm ? x : cm;
        }
        if (cm == kNegInf) continue;  // the whole tile is masked
        float r = std::exp(m - cm);
        l *= r;
        for (int d = 0; d < HS; d++) acc[d] *= r;
        for (int j = j0; j < j1; j++) {
          if (s[j - j0] == kNegInf) continue;
          float p = std::exp(s[j - j0] - cm);
          l += p;
          const float* v = qkv + (row0 + j) * QKV + (NH + NKV + kvh) * HS;
#pragma omp simd
          for (int d = 0; d < HS; d++) acc[d] += p * v[d];
        }
        m = cm;
      }
      float* o = out + (row0 + i) * NH * HS + h * HS;
      for (int d = 0; d < HS; d++) o[d] = acc[d] / l;
      lse[(int64_t)bh * T + i] = m + std::log(l);
    }
  }
}

// With P = softmax(S), dS = P * (dP - D), D_i = sum_j P_ij dP_ij = dout_i . out_i.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, const int32_t* seg, int B, int T, int NH, int NKV,
                        int HS) {
  const int QKV = (NH + 2 * NKV) * HS, group = NH / NKV, OC = NH * HS;
  const float scale = 1.0f / std::sqrt((float)HS);
  // Pass 1: dq, one query row at a time.
#pragma omp parallel for collapse(2) schedule(dynamic, 8)
  for (int bh = 0; bh < B * NH; bh++) {
    for (int i = 0; i < T; i++) {
      int b = bh / NH, h = bh % NH, kvh = h / group;
      int64_t row0 = (int64_t)b * T;
      const float* q = qkv + (row0 + i) * QKV + h * HS;
      const float* dy = dout + (row0 + i) * OC + h * HS;
      float Di = dot(dy, out + (row0 + i) * OC + h * HS, HS);
      float z = lse[(int64_t)bh * T + i];
      float dq[kMaxHS] = {0};
      for (int j = 0; j <= i; j++) {
        if (!visible(seg, row0, i, j)) continue;
        const float* k = qkv + (row0 + j) * QKV + (NH + kvh) * HS;
        const float* v = qkv + (row0 + j) * QKV + (NH + NKV + kvh) * HS;
        float p = std::exp(dot(q, k, HS) * scale - z);
        float ds = p * (dot(dy, v, HS) - Di) * scale;
#pragma omp simd
        for (int d = 0; d < HS; d++) dq[d] += ds * k[d];
      }
      std::memcpy(dqkv + (row0 + i) * QKV + h * HS, dq, sizeof(float) * HS);
    }
  }
  // Pass 2: dk and dv, one key row at a time, its group's query heads in order.
#pragma omp parallel for collapse(2) schedule(dynamic, 8)
  for (int bk = 0; bk < B * NKV; bk++) {
    for (int j = 0; j < T; j++) {
      int b = bk / NKV, kvh = bk % NKV;
      int64_t row0 = (int64_t)b * T;
      const float* k = qkv + (row0 + j) * QKV + (NH + kvh) * HS;
      const float* v = qkv + (row0 + j) * QKV + (NH + NKV + kvh) * HS;
      float dk[kMaxHS] = {0}, dv[kMaxHS] = {0};
      for (int h = kvh * group; h < (kvh + 1) * group; h++) {
        for (int i = j; i < T; i++) {
          if (!visible(seg, row0, i, j)) continue;
          const float* q = qkv + (row0 + i) * QKV + h * HS;
          const float* dy = dout + (row0 + i) * OC + h * HS;
          float Di = dot(dy, out + (row0 + i) * OC + h * HS, HS);
          float p = std::exp(dot(q, k, HS) * scale - lse[((int64_t)b * NH + h) * T + i]);
          float ds = p * (dot(dy, v, HS) - Di) * scale;
#pragma omp simd
          for (int d = 0; d < HS; d++) {
            dv[d] += p * dy[d];
            dk[d] += ds * q[d];
          }
        }
      }
      std::memcpy(dqkv + (row0 + j) * QKV + (NH + kvh) * HS, dk, sizeof(float) * HS);
      std::memcpy(dqkv + (row0 + j) * QKV + (NH + NKV + kvh) * HS, dv, sizeof(float) * HS);
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
