// AdamW with decoupled weight decay [Loshchilov & Hutter 2019], in torch.optim.AdamW's order of
// operations. One fused pass over param, m, v, grad. Not the schedule or the parameter groups.
#include <cmath>

#include "smelt/kernels/kernels.hpp"

namespace smelt {

void adamw_step(float* param, float* m, float* v, const float* grad, int64_t n, float lr,
                float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                int64_t t) {
  float bc1 = 1.0f - (float)std::pow((double)beta1, (double)t);
  float bc2_sqrt = (float)std::sqrt(1.0 - std::pow((double)beta2, (double)t));
  float step_size = lr / bc1;
  float decay = 1.0f - lr * weight_decay;
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; i++) {
    float g = grad[i] * grad_scale;
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float p = param[i] * decay;
    param[i] = p - step_size * mi / (std::sqrt(vi) / bc2_sqrt + eps);
  }
}

void adamw_step_ref(float* param, float* m, float* v, const float* grad, int64_t n, float lr,
                    float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                    int64_t t) {
  for (int64_t i = 0; i < n; i++) {
    double g = (double)grad[i] * grad_scale;
    double mi = beta1 * (double)m[i] + (1.0 - beta1) * g;
    double vi = beta2 * (double)v[i] + (1.0 - beta2) * g * g;
    m[i] = (float)mi;
    v[i] = (float)vi;
    double mhat = mi / (1.0 - std::pow((double)beta1, (double)t));
    double vhat = vi / (1.0 - std::pow((double)beta2, (double)t));
    double p = param[i] * (1.0 - (double)lr * weight_decay);
    param[i] = (float)(p - lr * mhat / (std::sqrt(vhat) + eps));
  }
}

}  // namespace smelt
