// Causal grouped-query attention on the GPU, flash-style [Dao 2023, FlashAttention-2]: 64x64
// query/key tiles in shared memory, an online softmax, only the logsumexp saved; the backward
// recomputes P from it. fp32 on the CUDA cores, no atomics. Not RoPE, not the projections.
//
// Every kernel runs 256 threads as a 16x16 grid: thread (ty, tx) owns rows ty + 16 i (i < 4) of a
// tile and its columns tx + 16 j (score tiles, j < 4) or tx + 16 k (head columns, k < D/16). The
// 16 threads of a row are 16 lanes of one warp, so row reductions are warp shuffles. Head columns
// are padded with zeros up to D (16, 32, 64 or 128), a template parameter.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "smelt/kernels/cuda/cuda_kernels.hpp"

namespace smelt::cuda {

namespace {
constexpr int kTile = 64;      // query rows and key rows per tile
constexpr int kThreads = 256;  // 16 x 16
constexpr int kPS = 80;        // row stride of a score tile: rows ty, ty+1 fall in opposite bank halves
constexpr unsigned kFull = 0xffffffffu;

// Row stride of a (kTile, D) head tile: a multiple of 4 (float4 rows) whose 8 rows read by one
// quarter-warp land on distinct bank groups.
template <int D>
__host__ __device__ constexpr int ld_of() { return D + 4; }

__device__ __forceinline__ float row_max16(float x) {  // over the 16 lanes of a row
#pragma unroll
  for (int off = 8; off > 0; off >>= 1) x = fmaxf(x, __shfl_xor_sync(kFull, x, off));
  return x;
}
__device__ __forceinline__ float row_sum16(float x) {  // every lane gets the same bits
#pragma unroll
  for (int off = 8; off > 0; off >>= 1) x += __shfl_xor_sync(kFull, x, off);
  return x;
}

// dst (kTile, D+4) = rows [t0, t0+kTile) x columns [0, HS) of src (row stride ld), zero past T
// and past HS (so that products over D columns are products over HS).
template <int D>
__device__ __forceinline__ void load_rows(float* dst, const float* __restrict__ src, int64_t ld, int t0, int T,
                                          int HS) {
  constexpr int kLd = ld_of<D>();
  for (int idx = threadIdx.x; idx < kTile * D; idx += kThreads) {
    const int r = idx / D, d = idx % D;
    dst[r * kLd + d] = (t0 + r < T && d < HS) ? src[(int64_t)(t0 + r) * ld + d] : 0.0f;
  }
}

// Bit 4i+j: query row i0 + ty + 16i sees key j0 + tx + 16j (causal, same segment, inside T).
__device__ __forceinline__ unsigned visible_mask(int i0, int j0, int T, bool has_seg, const int32_t* seg_q,
                                                 const int32_t* seg_k, int ty, int tx) {
  unsigned mask = 0;
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const int r = ty + 16 * i, qi = i0 + r;
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const int c = tx + 16 * j, kj = j0 + c;
      const bool v = qi < T && kj <= qi && (!has_seg || seg_q[r] == seg_k[c]);
      mask |= (unsigned)v << (4 * i + j);
    }
  }
  return mask;
}

// acc[i][j] = A row (ty+16i) . B row (tx+16j) over D columns; A, B (kTile, D+4).
template <int D>
__device__ __forceinline__ void tile_dot(float (&acc)[4][4], const float* A, const float* Bm, int ty, int tx) {
  constexpr int kLd = ld_of<D>();
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
#pragma unroll 2
  for (int d = 0; d < D; d += 4) {
    float4 a[4], b[4];
#pragma unroll
    for (int i = 0; i < 4; i++) a[i] = *reinterpret_cast<const float4*>(A + (ty + 16 * i) * kLd + d);
#pragma unroll
    for (int j = 0; j < 4; j++) b[j] = *reinterpret_cast<const float4*>(Bm + (tx + 16 * j) * kLd + d);
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int j = 0; j < 4; j++) {
        float s = acc[i][j];
        s = fmaf(a[i].x, b[j].x, s);
        s = fmaf(a[i].y, b[j].y, s);
        s = fmaf(a[i].z, b[j].z, s);
        s = fmaf(a[i].w, b[j].w, s);
        acc[i][j] = s;
      }
  }
}

// acc[i][k] += sum_c L[ty+16i][c] * R[c][tx+16k]: L (kTile, kPS) a score tile, R (kTile, D+4).
template <int D>
__device__ __forceinline__ void tile_nn(float (&acc)[4][D / 16], const float* L, const float* R, int ty, int tx) {
  constexpr int kLd = ld_of<D>(), kCols = D / 16;
#pragma unroll 2
  for (int c = 0; c < kTile; c += 4) {
    float4 p[4];
#pragma unroll
    for (int i = 0; i < 4; i++) p[i] = *reinterpret_cast<const float4*>(L + (ty + 16 * i) * kPS + c);
#pragma unroll
    for (int k = 0; k < kCols; k++) {
      const float* r = R + c * kLd + tx + 16 * k;
      const float r0 = r[0], r1 = r[kLd], r2 = r[2 * kLd], r3 = r[3 * kLd];
#pragma unroll
      for (int i = 0; i < 4; i++) {
        float s = acc[i][k];
        s = fmaf(p[i].x, r0, s);
        s = fmaf(p[i].y, r1, s);
        s = fmaf(p[i].z, r2, s);
        s = fmaf(p[i].w, r3, s);
        acc[i][k] = s;
      }
    }
  }
}

// acc[i][k] += sum_r L[r][ty+16i] * R[r][tx+16k] (L transposed): L (kTile, kPS), R (kTile, D+4).
template <int D>
__device__ __forceinline__ void tile_tn(float (&acc)[4][D / 16], const float* L, const float* R, int ty, int tx) {
  constexpr int kLd = ld_of<D>(), kCols = D / 16;
#pragma unroll 4
  for (int r = 0; r < kTile; r++) {
    float p[4];
#pragma unroll
    for (int i = 0; i < 4; i++) p[i] = L[r * kPS + ty + 16 * i];
#pragma unroll
    for (int k = 0; k < kCols; k++) {
      const float v = R[r * kLd + tx + 16 * k];
#pragma unroll
      for (int i = 0; i < 4; i++) acc[i][k] = fmaf(p[i], v, acc[i][k]);
    }
  }
}

// One block per (query tile, head, batch); the heaviest (last) query tiles are launched first.
// Shared: Q (kTile, D+4), K then V of the key tile (kTile, D+4), P (kTile, kPS).
template <int D>
__global__ void __launch_bounds__(kThreads, 2)
    attention_forward_kernel(float* __restrict__ out, float* __restrict__ lse, const float* __restrict__ qkv,
                             const int32_t* __restrict__ seg, int T, int NH, int NKV, int HS, float scale) {
  constexpr int kLd = ld_of<D>(), kCols = D / 16;
  extern __shared__ float4 smem4[];
  float* Qs = reinterpret_cast<float*>(smem4);
  float* KVs = Qs + kTile * kLd;
  float* Ps = KVs + kTile * kLd;
  __shared__ int32_t seg_q[kTile], seg_k[kTile];

  const int tid = threadIdx.x, ty = tid >> 4, tx = tid & 15;
  const int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int kvh = h / (NH / NKV), QKV = (NH + 2 * NKV) * HS, OC = NH * HS;
  const int i0 = qt * kTile;
  const float* rows = qkv + (int64_t)b * T * QKV;
  const int32_t* sb = seg ? seg + (int64_t)b * T : nullptr;

  load_rows<D>(Qs, rows + h * HS, QKV, i0, T, HS);
  if (tid < kTile) seg_q[tid] = sb && i0 + tid < T ? sb[i0 + tid] : 0;
  float o[4][kCols], m[4], l[4];
#pragma unroll
  for (int i = 0; i < 4; i++) {
    m[i] = -INFINITY, l[i] = 0.0f;
#pragma unroll
    for (int k = 0; k < kCols; k++) o[i][k] = 0.0f;
  }

  const int j_end = min(T, i0 + kTile);  // keys at or before the tile's last query
  for (int j0 = 0; j0 < j_end; j0 += kTile) {
    __syncthreads();  // the last tile's reads of KVs, Ps and seg_k are done
    if (tid < kTile) seg_k[tid] = sb && j0 + tid < T ? sb[j0 + tid] : 0;
    __syncthreads();
    const unsigned vis = visible_mask(i0, j0, T, sb != nullptr, seg_q, seg_k, ty, tx);
    if (!__syncthreads_or(vis != 0)) continue;  // every pair masked: nothing to add
    load_rows<D>(KVs, rows + (NH + kvh) * HS, QKV, j0, T, HS);
    __syncthreads();
    float s[4][4];
    tile_dot<D>(s, Qs, KVs, ty, tx);
#pragma unroll
    for (int i = 0; i < 4; i++) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < 4; j++) {
        s[i][j] = (vis >> (4 * i + j)) & 1u ? s[i][j] * scale : -INFINITY;
        mx = fmaxf(mx, s[i][j]);
      }
      mx = row_max16(mx);
      const float m_new = fmaxf(m[i], mx);
      const float base = m_new == -INFINITY ? 0.0f : m_new;  // a row with nothing seen yet: no -inf - -inf
      const float alpha = expf(m[i] - base);
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 4; j++) {
        s[i][j] = expf(s[i][j] - base);
        sum += s[i][j];
      }
      sum = row_sum16(sum);
      l[i] = l[i] * alpha + sum;
      m[i] = m_new;
#pragma unroll
      for (int k = 0; k < kCols; k++) o[i][k] *= alpha;
#pragma unroll
      for (int j = 0; j < 4; j++) Ps[(ty + 16 * i) * kPS + tx + 16 * j] = s[i][j];
    }
    __syncthreads();  // K read; P complete
    load_rows<D>(KVs, rows + (NH + NKV + kvh) * HS, QKV, j0, T, HS);
    __syncthreads();
    tile_nn<D>(o, Ps, KVs, ty, tx);
  }

#pragma unroll
  for (int i = 0; i < 4; i++) {
    const int qi = i0 + ty + 16 * i;
    if (qi >= T) continue;
    const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
    float* orow = out + ((int64_t)b * T + qi) * OC + h * HS;
#pragma unroll
    for (int k = 0; k < kCols; k++)
      if (tx + 16 * k < HS) orow[tx + 16 * k] = o[i][k] * inv;
    if (tx == 0) lse[((int64_t)b * NH + h) * T + qi] = m[i] + logf(l[i]);
  }
}

// delta (B,NH,T) = rowsum(dout * out) per head: one warp per (b, t, head).
__global__ void attention_delta_kernel(float* __restrict__ delta, const float* __restrict__ dout,
                                       const float* __restrict__ out, int B, int T, int NH, int HS) {
  const int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (w >= (int64_t)B * T * NH) return;  // whole warps leave together
  const int h = (int)(w % NH);
  const int64_t bt = w / NH;
  const float* a = dout + bt * NH * HS + h * HS;
  const float* o = out + bt * NH * HS + h * HS;
  float sum = 0.0f;
  for (int d = lane; d < HS; d += 32) sum = fmaf(a[d], o[d], sum);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(kFull, sum, off);
  if (lane == 0) delta[((bt / T) * NH + h) * T + bt % T] = sum;
}

// dQ by query tiles: one block per (query tile, head, batch), looping over the key tiles in order.
// Shared: Q, dO (kTile, D+4), V then K of the key tile (kTile, D+4), dS (kTile, kPS).
template <int D>
__global__ void __launch_bounds__(kThreads, D == 128 ? 1 : 2)  // two blocks per SM fit below D 128
    attention_backward_dq_kernel(float* __restrict__ dqkv, const float* __restrict__ dout,
                                 const float* __restrict__ qkv, const float* __restrict__ lse,
                                 const float* __restrict__ delta, const int32_t* __restrict__ seg, int T, int NH,
                                 int NKV, int HS, float scale) {
  constexpr int kLd = ld_of<D>(), kCols = D / 16;
  extern __shared__ float4 smem4[];
  float* Qs = reinterpret_cast<float*>(smem4);
  float* dOs = Qs + kTile * kLd;
  float* KVs = dOs + kTile * kLd;
  float* dSs = KVs + kTile * kLd;
  __shared__ int32_t seg_q[kTile], seg_k[kTile];
  __shared__ float lse_q[kTile], del_q[kTile];

  const int tid = threadIdx.x, ty = tid >> 4, tx = tid & 15;
  const int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int kvh = h / (NH / NKV), QKV = (NH + 2 * NKV) * HS, OC = NH * HS;
  const int i0 = qt * kTile;
  const float* rows = qkv + (int64_t)b * T * QKV;
  const int32_t* sb = seg ? seg + (int64_t)b * T : nullptr;

  load_rows<D>(Qs, rows + h * HS, QKV, i0, T, HS);
  load_rows<D>(dOs, dout + (int64_t)b * T * OC + h * HS, OC, i0, T, HS);
  if (tid < kTile) {
    const bool in = i0 + tid < T;
    const int64_t at = ((int64_t)b * NH + h) * T + i0 + tid;
    seg_q[tid] = sb && in ? sb[i0 + tid] : 0;
    lse_q[tid] = in ? lse[at] : 0.0f;
    del_q[tid] = in ? delta[at] : 0.0f;
  }
  float dq[4][kCols];
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int k = 0; k < kCols; k++) dq[i][k] = 0.0f;

  const int j_end = min(T, i0 + kTile);
  for (int j0 = 0; j0 < j_end; j0 += kTile) {
    __syncthreads();  // the last tile's reads of KVs, dSs and seg_k are done
    if (tid < kTile) seg_k[tid] = sb && j0 + tid < T ? sb[j0 + tid] : 0;
    __syncthreads();
    const unsigned vis = visible_mask(i0, j0, T, sb != nullptr, seg_q, seg_k, ty, tx);
    if (!__syncthreads_or(vis != 0)) continue;
    load_rows<D>(KVs, rows + (NH + NKV + kvh) * HS, QKV, j0, T, HS);
    __syncthreads();
    float dp[4][4];
    tile_dot<D>(dp, dOs, KVs, ty, tx);  // dP = dO V^T
    __syncthreads();                    // V read
    load_rows<D>(KVs, rows + (NH + kvh) * HS, QKV, j0, T, HS);
    __syncthreads();
    float s[4][4];
    tile_dot<D>(s, Qs, KVs, ty, tx);
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const int r = ty + 16 * i;
#pragma unroll
      for (int j = 0; j < 4; j++) {
        float ds = 0.0f;
        if ((vis >> (4 * i + j)) & 1u) {
          const float p = expf(s[i][j] * scale - lse_q[r]);
          ds = p * ((dp[i][j] - del_q[r]) * scale);
        }
        dSs[r * kPS + tx + 16 * j] = ds;
      }
    }
    __syncthreads();  // dS complete
    tile_nn<D>(dq, dSs, KVs, ty, tx);  // dQ += dS K
  }

#pragma unroll
  for (int i = 0; i < 4; i++) {
    const int qi = i0 + ty + 16 * i;
    if (qi >= T) continue;
    float* row = dqkv + ((int64_t)b * T + qi) * QKV + h * HS;
#pragma unroll
    for (int k = 0; k < kCols; k++)
      if (tx + 16 * k < HS) row[tx + 16 * k] = dq[i][k];
  }
}

// dK, dV by key tiles: one block per (key tile, kv head, batch), looping over the group's query
// heads, then the query tiles at or after the key tile, in order. Thread (ty, tx) owns key rows
// ty + 16 i of dK and dV. Shared: K, V, Q, dO (kTile, D+4), P, dS (kTile, kPS).
template <int D>
__global__ void __launch_bounds__(kThreads, 1)
    attention_backward_dkdv_kernel(float* __restrict__ dqkv, const float* __restrict__ dout,
                                   const float* __restrict__ qkv, const float* __restrict__ lse,
                                   const float* __restrict__ delta, const int32_t* __restrict__ seg, int T,
                                   int NH, int NKV, int HS, float scale) {
  constexpr int kLd = ld_of<D>(), kCols = D / 16;
  extern __shared__ float4 smem4[];
  float* Ks = reinterpret_cast<float*>(smem4);
  float* Vs = Ks + kTile * kLd;
  float* Qs = Vs + kTile * kLd;
  float* dOs = Qs + kTile * kLd;
  float* Ps = dOs + kTile * kLd;
  float* dSs = Ps + kTile * kPS;
  __shared__ int32_t seg_q[kTile], seg_k[kTile];
  __shared__ float lse_q[kTile], del_q[kTile];

  const int tid = threadIdx.x, ty = tid >> 4, tx = tid & 15;
  const int kt = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
  const int group = NH / NKV, QKV = (NH + 2 * NKV) * HS, OC = NH * HS;
  const int j0 = kt * kTile;
  const float* rows = qkv + (int64_t)b * T * QKV;
  const float* drows = dout + (int64_t)b * T * OC;
  const int32_t* sb = seg ? seg + (int64_t)b * T : nullptr;

  load_rows<D>(Ks, rows + (NH + kvh) * HS, QKV, j0, T, HS);
  load_rows<D>(Vs, rows + (NH + NKV + kvh) * HS, QKV, j0, T, HS);
  if (tid < kTile) seg_k[tid] = sb && j0 + tid < T ? sb[j0 + tid] : 0;
  float dk[4][kCols], dv[4][kCols];
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int k = 0; k < kCols; k++) dk[i][k] = 0.0f, dv[i][k] = 0.0f;

  for (int h = kvh * group; h < (kvh + 1) * group; h++) {
    for (int i0 = j0; i0 < T; i0 += kTile) {  // query tiles that reach the key tile
      __syncthreads();  // the last query tile's reads of Qs, dOs, Ps, dSs and row data are done
      if (tid < kTile) {
        const bool in = i0 + tid < T;
        const int64_t at = ((int64_t)b * NH + h) * T + i0 + tid;
        seg_q[tid] = sb && in ? sb[i0 + tid] : 0;
        lse_q[tid] = in ? lse[at] : 0.0f;
        del_q[tid] = in ? delta[at] : 0.0f;
      }
      __syncthreads();
      const unsigned vis = visible_mask(i0, j0, T, sb != nullptr, seg_q, seg_k, ty, tx);
      if (!__syncthreads_or(vis != 0)) continue;
      load_rows<D>(Qs, rows + h * HS, QKV, i0, T, HS);
      load_rows<D>(dOs, drows + h * HS, OC, i0, T, HS);
      __syncthreads();
      float s[4][4], dp[4][4];
      tile_dot<D>(s, Qs, Ks, ty, tx);    // rows: queries ty + 16i, columns: keys tx + 16j
      tile_dot<D>(dp, dOs, Vs, ty, tx);  // dP = dO V^T
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const int r = ty + 16 * i;
#pragma unroll
        for (int j = 0; j < 4; j++) {
          float p = 0.0f, ds = 0.0f;
          if ((vis >> (4 * i + j)) & 1u) {
            p = expf(s[i][j] * scale - lse_q[r]);
            ds = p * ((dp[i][j] - del_q[r]) * scale);
          }
          Ps[r * kPS + tx + 16 * j] = p;
          dSs[r * kPS + tx + 16 * j] = ds;
        }
      }
      __syncthreads();  // P, dS complete
      tile_tn<D>(dv, Ps, dOs, ty, tx);  // dV += P^T dO
      tile_tn<D>(dk, dSs, Qs, ty, tx);  // dK += dS^T Q
    }
  }

#pragma unroll
  for (int i = 0; i < 4; i++) {
    const int kj = j0 + ty + 16 * i;
    if (kj >= T) continue;
    float* row = dqkv + ((int64_t)b * T + kj) * QKV;
#pragma unroll
    for (int k = 0; k < kCols; k++) {
      const int d = tx + 16 * k;
      if (d < HS) {
        row[(NH + kvh) * HS + d] = dk[i][k];
        row[(NH + NKV + kvh) * HS + d] = dv[i][k];
      }
    }
  }
}

void check_shape(const char* op, int NH, int NKV, int HS) {
  if (HS >= 1 && HS <= 128 && NKV >= 1 && NH >= NKV && NH % NKV == 0) return;
  std::fprintf(stderr, "smelt: cuda::%s: NH %d, NKV %d, HS %d unsupported (needs 1 <= HS <= 128, NH a multiple of NKV)\n",
               op, NH, NKV, HS);
  std::abort();
}

int tiles(int T) { return (T + kTile - 1) / kTile; }

template <int D>
void forward_launch(float* out, float* lse, const float* qkv, const int32_t* seg, int B, int T, int NH, int NKV,
                    int HS, float scale, Stream s) {
  const int smem = (int)sizeof(float) * (2 * kTile * ld_of<D>() + kTile * kPS);
  (void)cudaFuncSetAttribute(attention_forward_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  attention_forward_kernel<D><<<dim3(tiles(T), NH, B), kThreads, smem, s>>>(out, lse, qkv, seg, T, NH, NKV, HS,
                                                                           scale);
}

template <int D>
void backward_launch(float* dqkv, const float* delta, const float* dout, const float* qkv, const float* lse,
                     const int32_t* seg, int B, int T, int NH, int NKV, int HS, float scale, Stream s) {
  const int smem_dq = (int)sizeof(float) * (3 * kTile * ld_of<D>() + kTile * kPS);
  (void)cudaFuncSetAttribute(attention_backward_dq_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_dq);
  attention_backward_dq_kernel<D><<<dim3(tiles(T), NH, B), kThreads, smem_dq, s>>>(dqkv, dout, qkv, lse, delta, seg,
                                                                                  T, NH, NKV, HS, scale);
  const int smem_kv = (int)sizeof(float) * (4 * kTile * ld_of<D>() + 2 * kTile * kPS);
  (void)cudaFuncSetAttribute(attention_backward_dkdv_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             smem_kv);
  attention_backward_dkdv_kernel<D><<<dim3(tiles(T), NKV, B), kThreads, smem_kv, s>>>(dqkv, dout, qkv, lse, delta,
                                                                                     seg, T, NH, NKV, HS, scale);
}
}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, const int32_t* seg, int B, int T, int NH,
                       int NKV, int HS, Stream s) {
  check_shape("attention_forward", NH, NKV, HS);
  if (B <= 0 || T <= 0) return;
  const float scale = 1.0f / std::sqrt((float)HS);  // as the CPU kernel
  if (HS <= 16) forward_launch<16>(out, lse, qkv, seg, B, T, NH, NKV, HS, scale, s);
  else if (HS <= 32) forward_launch<32>(out, lse, qkv, seg, B, T, NH, NKV, HS, scale, s);
  else if (HS <= 64) forward_launch<64>(out, lse, qkv, seg, B, T, NH, NKV, HS, scale, s);
  else forward_launch<128>(out, lse, qkv, seg, B, T, NH, NKV, HS, scale, s);
}

void attention_delta(float* delta, const float* dout, const float* out, int B, int T, int NH, int HS, Stream s) {
  const int64_t warps = (int64_t)B * T * NH;
  attention_delta_kernel<<<(unsigned)((warps * 32 + kThreads - 1) / kThreads), kThreads, 0, s>>>(delta, dout, out, B,
                                                                                               T, NH, HS);
}

void attention_backward(float* dqkv, float* delta, const float* dout, const float* qkv, const float* out,
                        const float* lse, const int32_t* seg, int B, int T, int NH, int NKV, int HS, Stream s) {
  check_shape("attention_backward", NH, NKV, HS);
  if (B <= 0 || T <= 0) return;
  const float scale = 1.0f / std::sqrt((float)HS);
  attention_delta(delta, dout, out, B, T, NH, HS, s);
  if (HS <= 16) backward_launch<16>(dqkv, delta, dout, qkv, lse, seg, B, T, NH, NKV, HS, scale, s);
  else if (HS <= 32) backward_launch<32>(dqkv, delta, dout, qkv, lse, seg, B, T, NH, NKV, HS, scale, s);
  else if (HS <= 64) backward_launch<64>(dqkv, delta, dout, qkv, lse, seg, B, T, NH, NKV, HS, scale, s);
  else backward_launch<128>(dqkv, delta, dout, qkv, lse, seg, B, T, NH, NKV, HS, scale, s);
}

}  // namespace smelt::cuda
