// Cross-entropy, AdamW and the gradient norm of the CUDA backend (cuda_kernels.hpp). The
// cross-entropy takes one block per row: each thread an online (max, sum) over a strided part of
// the vocabulary, combined in a fixed tree. The norm sums squares in double per 4Ki block and the
// host adds the blocks in order.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "smelt/kernels/cuda/cuda_kernels.hpp"

namespace smelt::cuda {

namespace {
constexpr int kCeThreads = 512;
constexpr int64_t kNormBlock = 1 << 12;  // kernels.hpp's kGradNormBlock
constexpr int kNormThreads = 256;

// (m, s) pairs: s = sum e^(x - m). Combining keeps the larger max; an empty side has m = -inf.
__device__ __forceinline__ void lse_merge(float& m, float& s, float m2, float s2) {
  if (m2 == -INFINITY) return;
  if (m == -INFINITY) {
    m = m2, s = s2;
    return;
  }
  if (m2 > m) {
    s = s * expf(m - m2) + s2;
    m = m2;
  } else {
    s += s2 * expf(m2 - m);
  }
}

__global__ void cross_entropy_forward_kernel(float* __restrict__ losses, float* __restrict__ lse,
                                             const float* __restrict__ logits, const int32_t* __restrict__ targets,
                                             int V) {
  __shared__ float sm[kCeThreads], ss[kCeThreads];
  const int n = blockIdx.x;
  const float* l = logits + (int64_t)n * V;
  float m = -INFINITY, s = 0.0f;
  for (int v = threadIdx.x; v < V; v += kCeThreads) {
    const float x = l[v];
    if (x > m) {
      s = s * expf(m - x) + 1.0f;  // expf(-inf) = 0 on the first element
      m = x;
    } else {
      s += expf(x - m);
    }
  }
  sm[threadIdx.x] = m, ss[threadIdx.x] = s;
  __syncthreads();
  for (int w = kCeThreads / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) {
      float a = sm[threadIdx.x], b = ss[threadIdx.x];
      lse_merge(a, b, sm[threadIdx.x + w], ss[threadIdx.x + w]);
      sm[threadIdx.x] = a, ss[threadIdx.x] = b;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const float z = sm[0] + logf(ss[0]);
    lse[n] = z;
    const int t = targets[n];
    losses[n] = t < 0 ? 0.0f : z - l[t];
  }
}

__global__ void cross_entropy_backward_kernel(float* __restrict__ logits, const float* __restrict__ lse,
                                              const int32_t* __restrict__ targets, float dloss, int V) {
  const int n = blockIdx.x;
  float* l = logits + (int64_t)n * V;
  const int t = targets[n];
  const float z = lse[n];
  for (int v = threadIdx.x; v < V; v += blockDim.x)
    l[v] = t < 0 ? 0.0f : dloss * (expf(l[v] - z) - (v == t ? 1.0f : 0.0f));
}

__global__ void softmax_entropy_kernel(float* __restrict__ out, const float* __restrict__ logits,
                                      const float* __restrict__ lse, const int32_t* __restrict__ rows, int V) {
  __shared__ float part[kCeThreads];
  const int row = rows[blockIdx.x];
  const float* l = logits + (int64_t)row * V;
  const float z = lse[row];
  float acc = 0.0f;
  for (int v = threadIdx.x; v < V; v += kCeThreads) acc += expf(l[v] - z) * l[v];
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int w = kCeThreads / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = z - part[0];
}

__global__ void adamw_kernel(float* __restrict__ param, float* __restrict__ m, float* __restrict__ v,
                             const float* __restrict__ grad, int64_t n, float beta1, float beta2, float eps,
                             float grad_scale, float step_size, float decay, float bc2_sqrt) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = grad[i] * grad_scale;
  const float mi = beta1 * m[i] + (1.0f - beta1) * g;
  const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
  m[i] = mi;
  v[i] = vi;
  const float p = param[i] * decay;
  param[i] = p - step_size * mi / (sqrtf(vi) / bc2_sqrt + eps);
}

__global__ void sum_squares_kernel(double* __restrict__ partials, const float* __restrict__ grad, int64_t n) {
  __shared__ double part[kNormThreads];
  const int64_t i0 = (int64_t)blockIdx.x * kNormBlock;
  const int64_t i1 = i0 + kNormBlock < n ? i0 + kNormBlock : n;
  double acc = 0.0;
  for (int64_t i = i0 + threadIdx.x; i < i1; i += kNormThreads) acc += (double)grad[i] * grad[i];
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int w = kNormThreads / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = part[0];
}
}  // namespace

void cross_entropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets, int N, int V,
                           Stream s) {
  if (N > 0) cross_entropy_forward_kernel<<<N, kCeThreads, 0, s>>>(losses, lse, logits, targets, V);
}

void cross_entropy_backward(float* logits, const float* lse, const int32_t* targets, float dloss, int N, int V,
                            Stream s) {
  if (N > 0) cross_entropy_backward_kernel<<<N, 256, 0, s>>>(logits, lse, targets, dloss, V);
}

void softmax_entropy_rows(float* out, const float* logits, const float* lse, const int32_t* rows, int K, int V,
                          Stream s) {
  if (K > 0) softmax_entropy_kernel<<<K, kCeThreads, 0, s>>>(out, logits, lse, rows, V);
}

void adamw_step(float* param, float* m, float* v, const float* grad, int64_t n, float lr, float beta1, float beta2,
                float eps, float weight_decay, float grad_scale, int64_t t, Stream s) {
  if (n <= 0) return;
  // The same scalars as the CPU kernel, computed the same way on the host.
  const float bc1 = 1.0f - (float)std::pow((double)beta1, (double)t);
  const float bc2_sqrt = (float)std::sqrt(1.0 - std::pow((double)beta2, (double)t));
  const float step_size = lr / bc1;
  const float decay = 1.0f - lr * weight_decay;
  const int threads = 256;
  adamw_kernel<<<(unsigned)((n + threads - 1) / threads), threads, 0, s>>>(param, m, v, grad, n, beta1, beta2, eps,
                                                                           grad_scale, step_size, decay, bc2_sqrt);
}

int64_t grad_norm_scratch_doubles(int64_t n) { return (n + kNormBlock - 1) / kNormBlock; }

double grad_norm_squared(const float* grad, int64_t n, double* partials, double* host_partials, Stream s) {
  if (n <= 0) return 0.0;
  const int64_t blocks = grad_norm_scratch_doubles(n);
  sum_squares_kernel<<<(unsigned)blocks, kNormThreads, 0, s>>>(partials, grad, n);
  copy_to_host(host_partials, partials, blocks * (int64_t)sizeof(double), s);
  (void)stream_sync(s);
  double total = 0.0;
  for (int64_t i = 0; i < blocks; i++) total += host_partials[i];
  return total;
}

}  // namespace smelt::cuda
