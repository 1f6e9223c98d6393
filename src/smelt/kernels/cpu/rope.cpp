// Rotary position embedding [Su et al. 2021], Hugging Face Llama layout (rotate_half: element i
// pairs with i + HS/2). In place on the q and k heads of the fused qkv rows. Not attention.
#include <cmath>

#include "smelt/kernels/kernels.hpp"

namespace smelt {

std::vector<double> rope_theta_freq(int HS, double theta) {
  std::vector<double> f(HS / 2);
  for (int i = 0; i < HS / 2; i++) f[i] = std::pow(theta, -2.0 * i / HS);
  return f;
}

void rope_table(float* table, int max_pos, int HS, const double* inv_freq) {
  int half = HS / 2;
  for (int p = 0; p < max_pos; p++)
    for (int i = 0; i < half; i++) {
      // angle in double so the table matches an fp64 reference to fp32 rounding
      double a = p * inv_freq[i];
      table[((int64_t)p * half + i) * 2] = (float)std::cos(a);
      table[((int64_t)p * half + i) * 2 + 1] = (float)std::sin(a);
    }
}

namespace {
// sign +1: forward rotation; -1: inverse (the backward of an orthogonal map is its transpose).
void rope_apply(float* x, const int32_t* pos, const float* table, int N, int T, int row_stride,
                int col0, int nheads, int HS, float sign) {
  int half = HS / 2;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    int p = pos ? pos[n] : n % T;
    const float* cs = table + (int64_t)p * half * 2;
    for (int h = 0; h < nheads; h++) {
      float* v = x + (int64_t)n * row_stride + col0 + h * HS;
      for (int i = 0; i < half; i++) {
        float c = cs[2 * i], s = sign * cs[2 * i + 1];
        float a = v[i], b = v[i + half];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
      }
    }
  }
}
}  // namespace

void rope_forward(float* x, const int32_t* pos, const float* table, int N, int T, int row_stride,
                  int col0, int nheads, int HS) {
  rope_apply(x, pos, table, N, T, row_stride, col0, nheads, HS, 1.0f);
}

void rope_backward(float* dx, const int32_t* pos, const float* table, int N, int T,
                   int row_stride, int col0, int nheads, int HS) {
  rope_apply(dx, pos, table, N, T, row_stride, col0, nheads, HS, -1.0f);
}

namespace {
// The textbook form: x*cos + sign*rotate_half(x)*sin, angles computed directly.
void rope_ref(float* x, const int32_t* pos, int N, int T, int row_stride, int col0, int nheads,
              int HS, const double* inv_freq, double sign) {
  int half = HS / 2;
  for (int n = 0; n < N; n++) {
    int p = pos ? pos[n] : n % T;
    for (int h = 0; h < nheads; h++) {
      float* v = x + (int64_t)n * row_stride + col0 + h * HS;
      double tmp[1024];
      for (int i = 0; i < HS; i++) {
        double a = p * inv_freq[i % half];
        double rot = i < half ? -v[i + half] : v[i - half];
        tmp[i] = v[i] * std::cos(a) + sign * rot * std::sin(a);
      }
      for (int i = 0; i < HS; i++) v[i] = (float)tmp[i];
    }
  }
}

}  // namespace

void rope_forward_ref(float* x, const int32_t* pos, int N, int T, int row_stride, int col0,
                      int nheads, int HS, const double* inv_freq) {
  rope_ref(x, pos, N, T, row_stride, col0, nheads, HS, inv_freq, 1.0);
}

void rope_backward_ref(float* dx, const int32_t* pos, int N, int T, int row_stride, int col0,
                       int nheads, int HS, const double* inv_freq) {
  rope_ref(dx, pos, N, T, row_stride, col0, nheads, HS, inv_freq, -1.0);
}

}  // namespace smelt
