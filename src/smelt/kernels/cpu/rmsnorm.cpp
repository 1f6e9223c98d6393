// RMSNorm forward/backward [Zhang & Sennrich 2019], the Llama pre-norm. Not LayerNorm (no mean,
// no bias). Backward adds into dinp: the norm's input is always the residual stream.
#include <algorithm>
#include <cmath>
#include <vector>

#include <omp.h>

#include "smelt/kernels/kernels.hpp"

namespace smelt {

namespace {

// One row of y = x*r*w, r = (mean(x^2)+eps)^-1/2; returns r. out may not alias x.
inline float rms_row(float* out, const float* x, const float* weight, int C, float eps) {
  float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
  for (int c = 0; c < C; c++) ss += x[c] * x[c];
  const float r = 1.0f / std::sqrt(ss / C + eps);
#pragma omp simd
  for (int c = 0; c < C; c++) out[c] = x[c] * r * weight[c];
  return r;
}

// One row's backward: dx (+)= r*(dy*w) - x * r^3/C * sum(dy*w*x) (kAdd: added, else written; dx may
// be dy itself), and acc += dy*x*r, dweight's share.
template <bool kAdd>
inline void rms_row_backward(float* dx, float* acc, const float* dy, const float* x, const float* weight, float r,
                             int C) {
  float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
  for (int c = 0; c < C; c++) dot += dy[c] * weight[c] * x[c];
  const float k = dot * r * r * r / C;
#pragma omp simd
  for (int c = 0; c < C; c++) {
    const float g = r * dy[c] * weight[c] - k * x[c];
    acc[c] += dy[c] * x[c] * r;
    if constexpr (kAdd) dx[c] += g;
    else dx[c] = g;
  }
}

// dweight (C) += the rows' shares: each block of kRows rows sums its own (row(n, acc) for its rows,
// in the same pass as their dx while they are in cache), then the blocks' sums are added in block
// order: the same bits for any thread count.
template <class Row>
void blocked_rows(float* dweight, int N, int C, Row row) {
  constexpr int kRows = 64;
  const int blocks = (N + kRows - 1) / kRows;
  thread_local std::vector<float> part;
  part.assign((size_t)blocks * C, 0.0f);
  float* pw = part.data();
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int blk = 0; blk < blocks; blk++)
      for (int n = blk * kRows; n < std::min(N, (blk + 1) * kRows); n++) row(n, pw + (size_t)blk * C);
#pragma omp for schedule(static)
    for (int c = 0; c < C; c++) {
      float s = 0.0f;
      for (int blk = 0; blk < blocks; blk++) s += pw[(size_t)blk * C + c];
      dweight[c] += s;
    }
  }
}

}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                     float eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) rstd[n] = rms_row(out + (int64_t)n * C, inp + (int64_t)n * C, weight, C, eps);
}

// y = x*r*w, r = (mean(x^2)+eps)^-1/2:  dx = r*(dy*w) - x * r^3/C * sum(dy*w*x).
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int N, int C) {
  blocked_rows(dweight, N, C, [&](int n, float* acc) {
    const int64_t o = (int64_t)n * C;
    rms_row_backward<true>(dinp + o, acc, dout + o, inp + o, weight, rstd[n], C);
  });
}

void rmsnorm_forward_ref(float* out, float* rstd, const float* inp, const float* weight, int N,
                         int C, float eps) {
  for (int n = 0; n < N; n++) {
    double ss = 0;
    for (int c = 0; c < C; c++) ss += (double)inp[n * C + c] * inp[n * C + c];
    double r = 1.0 / std::sqrt(ss / C + eps);
    rstd[n] = (float)r;
    for (int c = 0; c < C; c++) out[n * C + c] = (float)(inp[n * C + c] * r * weight[c]);
  }
}

// Composed from the chain rule term by term: y_c = w_c x_c r, dr/dx_j = -r^3 x_j / C.
void rmsnorm_backward_ref(float* dinp, float* dweight, const float* dout, const float* inp,
                          const float* weight, const float* rstd, int N, int C) {
  for (int n = 0; n < N; n++) {
    double r = rstd[n], dr = 0;
    for (int c = 0; c < C; c++) {
      dweight[c] += (float)((double)dout[n * C + c] * inp[n * C + c] * r);
      dr += (double)dout[n * C + c] * weight[c] * inp[n * C + c];
    }
    for (int j = 0; j < C; j++) {
      double x = inp[n * C + j];
      dinp[n * C + j] += (float)(dout[n * C + j] * weight[j] * r - dr * r * r * r * x / C);
    }
  }
}

// QK-norm: the same y = x*r*w over each head's HS values, in place on the qkv rows (the input
// kept in raw for the backward).
void head_rmsnorm_forward(float* x, float* raw, float* rstd, const float* weight, int N, int row_stride,
                          int col0, int nheads, int HS, float eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++)
    for (int h = 0; h < nheads; h++) {
      float* v = x + (int64_t)n * row_stride + col0 + (int64_t)h * HS;
      float* keep = raw + ((int64_t)n * nheads + h) * HS;
      std::copy(v, v + HS, keep);
      rstd[(int64_t)n * nheads + h] = rms_row(v, keep, weight, HS, eps);
    }
}

// As rmsnorm_backward, per head, the gradient written over dy in place.
void head_rmsnorm_backward(float* dx, float* dweight, const float* raw, const float* weight, const float* rstd,
                           int N, int row_stride, int col0, int nheads, int HS) {
  blocked_rows(dweight, N, HS, [&](int n, float* acc) {
    for (int h = 0; h < nheads; h++) {
      float* dy = dx + (int64_t)n * row_stride + col0 + (int64_t)h * HS;
      rms_row_backward<false>(dy, acc, dy, raw + ((int64_t)n * nheads + h) * HS, weight,
                              rstd[(int64_t)n * nheads + h], HS);
    }
  });
}

void head_rmsnorm_forward_ref(float* x, float* raw, float* rstd, const float* weight, int N, int row_stride,
                              int col0, int nheads, int HS, float eps) {
  for (int n = 0; n < N; n++)
    for (int h = 0; h < nheads; h++) {
      float* v = x + (int64_t)n * row_stride + col0 + (int64_t)h * HS;
      float* keep = raw + ((int64_t)n * nheads + h) * HS;
      double ss = 0;
      for (int i = 0; i < HS; i++) ss += (double)v[i] * v[i];
      const double r = 1.0 / std::sqrt(ss / HS + eps);
      rstd[(int64_t)n * nheads + h] = (float)r;
      for (int i = 0; i < HS; i++) {
        keep[i] = v[i];
        v[i] = (float)(keep[i] * r * weight[i]);
      }
    }
}

void head_rmsnorm_backward_ref(float* dx, float* dweight, const float* raw, const float* weight,
                               const float* rstd, int N, int row_stride, int col0, int nheads, int HS) {
  for (int n = 0; n < N; n++)
    for (int h = 0; h < nheads; h++) {
      const float* x = raw + ((int64_t)n * nheads + h) * HS;
      float* dy = dx + (int64_t)n * row_stride + col0 + (int64_t)h * HS;
      const double r = rstd[(int64_t)n * nheads + h];
      double dr = 0;
      for (int i = 0; i < HS; i++) {
        dweight[i] += (float)((double)dy[i] * x[i] * r);
        dr += (double)dy[i] * weight[i] * x[i];
      }
      for (int i = 0; i < HS; i++) dy[i] = (float)(dy[i] * weight[i] * r - dr * r * r * r * x[i] / HS);
    }
}

}  // namespace smelt
