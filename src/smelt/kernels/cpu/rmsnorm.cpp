// RMSNorm forward/backward [Zhang & Sennrich 2019], the Llama pre-norm. Not LayerNorm (no mean,
// no bias). Backward adds into dinp: the norm's input is always the residual stream.
#include <algorithm>
#include <cmath>
#include <vector>

#include <omp.h>

#include "smelt/kernels/kernels.hpp"

namespace smelt {

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                     float eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* x = inp + (int64_t)n * C;
    float* o = out + (int64_t)n * C;
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int c = 0; c < C; c++) ss += x[c] * x[c];
    float r = 1.0f / std::sqrt(ss / C + eps);
    rstd[n] = r;
#pragma omp simd
    for (int c = 0; c < C; c++) o[c] = x[c] * r * weight[c];
  }
}

// y = x*r*w, r = (mean(x^2)+eps)^-1/2:  dx = r*(dy*w) - x * r^3/C * sum(dy*w*x).
// dweight: each block of kRows rows sums its dy*x*r per channel in the same pass as dx (the rows
// are in cache once), then the blocks' sums are added in block order: the same bits for any
// thread count.
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int N, int C) {
  constexpr int kRows = 64;
  const int blocks = (N + kRows - 1) / kRows;
  thread_local std::vector<float> part;
  part.assign((size_t)blocks * C, 0.0f);
  float* pw = part.data();
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int blk = 0; blk < blocks; blk++) {
      float* acc = pw + (size_t)blk * C;
      for (int n = blk * kRows; n < std::min(N, (blk + 1) * kRows); n++) {
        const float* x = inp + (int64_t)n * C;
        const float* dy = dout + (int64_t)n * C;
        float* dx = dinp + (int64_t)n * C;
        float r = rstd[n];
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int c = 0; c < C; c++) dot += dy[c] * weight[c] * x[c];
        float k = dot * r * r * r / C;
#pragma omp simd
        for (int c = 0; c < C; c++) {
          dx[c] += r * dy[c] * weight[c] - k * x[c];
          acc[c] += dy[c] * x[c] * r;
        }
      }
    }
#pragma omp for schedule(static)
    for (int c = 0; c < C; c++) {
      float s = 0.0f;
      for (int blk = 0; blk < blocks; blk++) s += pw[(size_t)blk * C + c];
      dweight[c] += s;
    }
  }
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

// QK-norm: the same y = x*r*w over each head's HS values, in place on the qkv rows.
void head_rmsnorm_forward(float* x, float* raw, float* rstd, const float* weight, int N, int row_stride,
                          int col0, int nheads, int HS, float eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++)
    for (int h = 0; h < nheads; h++) {
      float* v = x + (int64_t)n * row_stride + col0 + (int64_t)h * HS;
      float* keep = raw + ((int64_t)n * nheads + h) * HS;
      float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
      for (int i = 0; i < HS; i++) ss += v[i] * v[i];
      const float r = 1.0f / std::sqrt(ss / HS + eps);
      rstd[(int64_t)n * nheads + h] = r;
#pragma omp simd
      for (int i = 0; i < HS; i++) {
        keep[i] = v[i];
        v[i] = v[i] * r * weight[i];
      }
    }
}

// As rmsnorm_backward, per head, with dweight summed per block of rows then over blocks in order.
void head_rmsnorm_backward(float* dx, float* dweight, const float* raw, const float* weight, const float* rstd,
                           int N, int row_stride, int col0, int nheads, int HS) {
  constexpr int kRows = 64;
  const int blocks = (N + kRows - 1) / kRows;
  thread_local std::vector<float> part;
  part.assign((size_t)blocks * HS, 0.0f);
  float* pw = part.data();
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int blk = 0; blk < blocks; blk++) {
      float* acc = pw + (size_t)blk * HS;
      for (int n = blk * kRows; n < std::min(N, (blk + 1) * kRows); n++)
        for (int h = 0; h < nheads; h++) {
          const float* x = raw + ((int64_t)n * nheads + h) * HS;
          float* dy = dx + (int64_t)n * row_stride + col0 + (int64_t)h * HS;
          const float r = rstd[(int64_t)n * nheads + h];
          float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
          for (int i = 0; i < HS; i++) dot += dy[i] * weight[i] * x[i];
          const float k = dot * r * r * r / HS;
#pragma omp simd
          for (int i = 0; i < HS; i++) {
            acc[i] += dy[i] * x[i] * r;
            dy[i] = r * dy[i] * weight[i] - k * x[i];
          }
        }
    }
#pragma omp for schedule(static)
    for (int i = 0; i < HS; i++) {
      float s = 0.0f;
      for (int blk = 0; blk < blocks; blk++) s += pw[(size_t)blk * HS + i];
      dweight[i] += s;
    }
  }
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
