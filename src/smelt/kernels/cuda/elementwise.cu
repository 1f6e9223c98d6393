// Row-wise and element-wise kernels of the CUDA backend (cuda_kernels.hpp): embedding, RMSNorm,
// RoPE, SwiGLU. Reductions use warp shuffles and shared-memory trees in a fixed order; the
// gradients of shared weights (the norm's weight, the embedding table) are summed over fixed row
// chunks and then over the chunks in order, so no floating-point atomic is used.
#include <cuda_runtime.h>

#include <cstdint>

#include "smelt/kernels/cuda/cuda_kernels.hpp"

namespace smelt::cuda {

namespace {
constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8;    // rmsnorm: one warp per row, 8 warps per block
constexpr int kNormChunk = 64;      // rmsnorm backward: rows per partial sum of dweight

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

int blocks_for(int64_t n, int threads) { return (int)((n + threads - 1) / threads); }

__global__ void embedding_forward_kernel(float* __restrict__ out, const int32_t* __restrict__ inp,
                                         const float* __restrict__ wte, int N, int C) {
  const int n = blockIdx.x;
  const float* row = wte + (int64_t)inp[n] * C;
  float* o = out + (int64_t)n * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) o[c] = row[c];
}

// One block per distinct token (run u of the sorted order), threads over channels; the token's
// rows are added in row order.
__global__ void embedding_backward_kernel(float* __restrict__ dwte, const float* __restrict__ dout,
                                          const int32_t* __restrict__ order, const int32_t* __restrict__ starts,
                                          const int32_t* __restrict__ tokens, int C) {
  const int u = blockIdx.x;
  const int r0 = starts[u], r1 = starts[u + 1];
  float* drow = dwte + (int64_t)tokens[u] * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = drow[c];
    for (int r = r0; r < r1; r++) acc += dout[(int64_t)order[r] * C + c];
    drow[c] = acc;
  }
}

__global__ void rmsnorm_forward_kernel(float* __restrict__ out, float* __restrict__ rstd,
                                       const float* __restrict__ inp, const float* __restrict__ weight, int N,
                                       int C, float eps) {
  const int lane = threadIdx.x % kWarp;
  const int n = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  if (n >= N) return;  // whole warps leave together: no block barrier below
  const float* x = inp + (int64_t)n * C;
  float ss = 0.0f;
  for (int c = lane; c < C; c += kWarp) ss += x[c] * x[c];
  ss = warp_sum(ss);
  const float r = rsqrtf(ss / (float)C + eps);
  if (lane == 0) rstd[n] = r;
  float* o = out + (int64_t)n * C;
  for (int c = lane; c < C; c += kWarp) o[c] = x[c] * r * weight[c];
}

__global__ void rmsnorm_backward_dinp_kernel(float* __restrict__ dinp, const float* __restrict__ dout,
                                             const float* __restrict__ inp, const float* __restrict__ weight,
                                             const float* __restrict__ rstd, int N, int C) {
  const int lane = threadIdx.x % kWarp;
  const int n = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  if (n >= N) return;
  const float* x = inp + (int64_t)n * C;
  const float* d = dout + (int64_t)n * C;
  float dr = 0.0f;
  for (int c = lane; c < C; c += kWarp) dr += d[c] * weight[c] * x[c];
  dr = warp_sum(dr);
  const float r = rstd[n];
  const float k = dr * r * r * r / (float)C;
  float* g = dinp + (int64_t)n * C;
  for (int c = lane; c < C; c += kWarp) g[c] += d[c] * weight[c] * r - k * x[c];
}

// partial[chunk][c] = sum over the chunk's rows of dout * inp * rstd; block (32 columns x 8 row
// lanes), the 8 lanes' sums added in lane order.
__global__ void rmsnorm_backward_partial_kernel(float* __restrict__ partial, const float* __restrict__ dout,
                                                const float* __restrict__ inp, const float* __restrict__ rstd,
                                                int N, int C) {
  __shared__ float part[kRowsPerBlock][kWarp];
  const int c = blockIdx.x * kWarp + threadIdx.x;
  const int n0 = blockIdx.y * kNormChunk, n1 = min(N, n0 + kNormChunk);
  float acc = 0.0f;
  if (c < C)
    for (int n = n0 + threadIdx.y; n < n1; n += kRowsPerBlock)
      acc += dout[(int64_t)n * C + c] * inp[(int64_t)n * C + c] * rstd[n];
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float s = 0.0f;
    for (int i = 0; i < kRowsPerBlock; i++) s += part[i][threadIdx.x];
    partial[(int64_t)blockIdx.y * C + c] = s;
  }
}

__global__ void column_sum_add_kernel(float* __restrict__ out, const float* __restrict__ partial, int chunks,
                                      int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float s = 0.0f;
  for (int k = 0; k < chunks; k++) s += partial[(int64_t)k * C + c];
  out[c] += s;
}

// sign +1 forward rotation, -1 its inverse (the backward). One thread per (row, head, pair i).
__global__ void rope_kernel(float* __restrict__ x, const int32_t* __restrict__ pos, const float* __restrict__ table,
                            int N, int T, int row_stride, int col0, int nheads, int HS, float sign) {
  const int half = HS / 2;
  const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t total = (int64_t)N * nheads * half;
  if (idx >= total) return;
  const int i = (int)(idx % half);
  const int h = (int)((idx / half) % nheads);
  const int n = (int)(idx / ((int64_t)half * nheads));
  const int p = pos ? pos[n] : n % T;
  const float c = table[((int64_t)p * half + i) * 2], s = sign * table[((int64_t)p * half + i) * 2 + 1];
  float* v = x + (int64_t)n * row_stride + col0 + (int64_t)h * HS;
  const float a = v[i], b = v[i + half];
  v[i] = a * c - b * s;
  v[i + half] = b * c + a * s;
}

__global__ void swiglu_forward_kernel(float* __restrict__ out, const float* __restrict__ gu, int N, int H) {
  const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (int64_t)N * H) return;
  const int64_t n = idx / H, i = idx % H;
  const float g = gu[n * 2 * H + i], u = gu[n * 2 * H + H + i];
  out[idx] = g / (1.0f + expf(-g)) * u;
}

__global__ void swiglu_backward_kernel(float* __restrict__ dgu, const float* __restrict__ dout,
                                       const float* __restrict__ gu, int N, int H) {
  const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (int64_t)N * H) return;
  const int64_t n = idx / H, i = idx % H;
  const float g = gu[n * 2 * H + i], u = gu[n * 2 * H + H + i], d = dout[idx];
  const float s = 1.0f / (1.0f + expf(-g));
  dgu[n * 2 * H + H + i] = d * g * s;
  dgu[n * 2 * H + i] = d * u * (s * (1.0f - s) * g + s);
}
}  // namespace

void embedding_forward(float* out, const int32_t* inp, const float* wte, int N, int C, int V, Stream s) {
  if (N > 0) embedding_forward_kernel<<<N, 256, 0, s>>>(out, inp, wte, N, C);
}

void embedding_backward(float* dwte, const float* dout, const int32_t* order, const int32_t* starts,
                        const int32_t* tokens, int U, int C, Stream s) {
  if (U > 0) embedding_backward_kernel<<<U, 256, 0, s>>>(dwte, dout, order, starts, tokens, C);
}

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps,
                     Stream s) {
  if (N > 0)
    rmsnorm_forward_kernel<<<blocks_for(N, kRowsPerBlock), kRowsPerBlock * kWarp, 0, s>>>(out, rstd, inp, weight, N,
                                                                                          C, eps);
}

int64_t rmsnorm_backward_scratch_floats(int N, int C) { return (int64_t)((N + kNormChunk - 1) / kNormChunk) * C; }

void rmsnorm_backward(float* dinp, float* dweight, float* scratch, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int N, int C, Stream s) {
  if (N <= 0) return;
  rmsnorm_backward_dinp_kernel<<<blocks_for(N, kRowsPerBlock), kRowsPerBlock * kWarp, 0, s>>>(dinp, dout, inp, weight,
                                                                                              rstd, N, C);
  const int chunks = (N + kNormChunk - 1) / kNormChunk;
  rmsnorm_backward_partial_kernel<<<dim3(blocks_for(C, kWarp), chunks), dim3(kWarp, kRowsPerBlock), 0, s>>>(
      scratch, dout, inp, rstd, N, C);
  column_sum_add_kernel<<<blocks_for(C, 256), 256, 0, s>>>(dweight, scratch, chunks, C);
}

void rope_forward(float* x, const int32_t* pos, const float* table, int N, int T, int row_stride, int col0,
                  int nheads, int HS, Stream s) {
  const int64_t total = (int64_t)N * nheads * (HS / 2);
  if (total > 0)
    rope_kernel<<<blocks_for(total, 256), 256, 0, s>>>(x, pos, table, N, T, row_stride, col0, nheads, HS, 1.0f);
}

void rope_backward(float* dx, const int32_t* pos, const float* table, int N, int T, int row_stride, int col0,
                   int nheads, int HS, Stream s) {
  const int64_t total = (int64_t)N * nheads * (HS / 2);
  if (total > 0)
    rope_kernel<<<blocks_for(total, 256), 256, 0, s>>>(dx, pos, table, N, T, row_stride, col0, nheads, HS, -1.0f);
}

void swiglu_forward(float* out, const float* gu, int N, int H, Stream s) {
  const int64_t total = (int64_t)N * H;
  if (total > 0) swiglu_forward_kernel<<<blocks_for(total, 256), 256, 0, s>>>(out, gu, N, H);
}

void swiglu_backward(float* dgu, const float* dout, const float* gu, int N, int H, Stream s) {
  const int64_t total = (int64_t)N * H;
  if (total > 0) swiglu_backward_kernel<<<blocks_for(total, 256), 256, 0, s>>>(dgu, dout, gu, N, H);
}

}  // namespace smelt::cuda
