// Causal grouped-query attention on the tensor cores for bf16 mixed precision, flash-style
// [Dao 2023, FlashAttention-2]: 64x64 query/key tiles of bf16 in shared memory, every product a
// wmma 16x16x16 bf16 product with fp32 sums, the online softmax and dS in fp32. No atomics: the
// backward is a dQ kernel per query tile and a dK/dV kernel per key tile. Not the fp32 kernel
// (attention.cu), not RoPE.
//
// Rounding points are those of the CPU bf16 kernel (cpu/attention_bf16.cpp): Q, K, V, dO rounded
// once (bf16_from_f32); S, dP fp32; P rounded to bf16 for P V and P^T dO, dS to bf16 for dS K and
// dS^T Q. One difference: the CPU rounds the normalised P = exp(s - m) / sum (m the row's max over
// all keys), the online softmax here rounds exp(s - m_run) (m_run the max so far) and divides by
// the sum after P V. Both round values in [0, 1] once; the results differ by bf16 roundings.
//
// Head columns are padded with zeros up to D (32, 64 or 128), a template parameter; HS is a
// multiple of 16. Accumulator fragments are never read element by element: they go through
// shared memory (store_matrix_sync), where the softmax and dS arithmetic reads them.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "smelt/kernels/cuda/cuda_kernels.hpp"

namespace smelt::cuda {

namespace {
namespace wmma = nvcuda::wmma;
using bf16 = __nv_bfloat16;

constexpr int kTile = 64;  // query rows and key rows per tile
constexpr int kLdS = 68;   // row stride of an fp32 score tile (floats): 8 rows' float4s hit distinct banks
constexpr int kLdP = 72;   // row stride of a bf16 score tile (elements): 8 rows' 16-byte chunks distinct
constexpr unsigned kFull = 0xffffffffu;

// Row stride of a (kTile, D) bf16 head tile: D + 8 elements, rows 16 bytes apart in the banks.
template <int D>
__host__ __device__ constexpr int ld_of() { return D + 8; }

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

template <int N>
__device__ __forceinline__ void zero(FragC (&acc)[N]) {
#pragma unroll
  for (int n = 0; n < N; n++) wmma::fill_fragment(acc[n], 0.0f);
}

// acc[n] += A (16, K) . Bm[16n .. 16n+16)^T: A row-major (lda), Bm row-major rows of K columns
// (ldb), read as a column-major (K, 16) operand. Sums over k in order.
template <int N, int K>
__device__ __forceinline__ void mma_abt(FragC (&acc)[N], const bf16* A, int lda, const bf16* Bm, int ldb) {
#pragma unroll 1
  for (int k = 0; k < K; k += 16) {
    FragA a;
    wmma::load_matrix_sync(a, A + k, lda);
#pragma unroll
    for (int n = 0; n < N; n++) {
      FragBCol bt;
      wmma::load_matrix_sync(bt, Bm + n * 16 * ldb + k, ldb);
      wmma::mma_sync(acc[n], a, bt, acc[n]);
    }
  }
}

// acc[n] += A (16, K) . Bm (K, columns [16n, 16n+16)): both row-major.
template <int N, int K>
__device__ __forceinline__ void mma_ab(FragC (&acc)[N], const bf16* A, int lda, const bf16* Bm, int ldb) {
#pragma unroll 1
  for (int k = 0; k < K; k += 16) {
    FragA a;
    wmma::load_matrix_sync(a, A + k, lda);
#pragma unroll
    for (int n = 0; n < N; n++) {
      FragBRow bm;
      wmma::load_matrix_sync(bm, Bm + k * ldb + n * 16, ldb);
      wmma::mma_sync(acc[n], a, bm, acc[n]);
    }
  }
}

// The bf16 bits of f, round to nearest, ties to even (cpu/vec_math.hpp's bf16_round).
__device__ __forceinline__ uint32_t bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;
  u += 0x7fffu + ((u >> 16) & 1u);
  return u >> 16;
}
// 8 floats -> 8 bf16 in order (element 0 in the low half of .x), one 16-byte store.
__device__ __forceinline__ uint4 bf16_pack8(const float (&v)[8]) {
  uint4 r;
  r.x = bf16_bits(v[0]) | (bf16_bits(v[1]) << 16);
  r.y = bf16_bits(v[2]) | (bf16_bits(v[3]) << 16);
  r.z = bf16_bits(v[4]) | (bf16_bits(v[5]) << 16);
  r.w = bf16_bits(v[6]) | (bf16_bits(v[7]) << 16);
  return r;
}

// dst (kTile, D+8) = rows [t0, t0+kTile) x columns [0, HS) of src (row stride ld elements), zero
// past T and past HS. 16-byte copies when src allows them (HS, ld multiples of 8, base aligned).
template <int D>
__device__ __forceinline__ void load_tile(bf16* dst, const uint16_t* __restrict__ src, int64_t ld, int t0, int T,
                                          int HS, int nthreads) {
  constexpr int kLd = ld_of<D>(), kChunks = D / 8;
  const bool vec = (reinterpret_cast<uintptr_t>(src) & 15) == 0 && (ld & 7) == 0;
  for (int idx = threadIdx.x; idx < kTile * kChunks; idx += nthreads) {
    const int r = idx / kChunks, c = (idx % kChunks) * 8;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (t0 + r < T && c < HS) {
      const uint16_t* p = src + (int64_t)(t0 + r) * ld + c;
      if (vec) {
        v = *reinterpret_cast<const uint4*>(p);
      } else {
        v.x = p[0] | ((uint32_t)p[1] << 16), v.y = p[2] | ((uint32_t)p[3] << 16);
        v.z = p[4] | ((uint32_t)p[5] << 16), v.w = p[6] | ((uint32_t)p[7] << 16);
      }
    }
    *reinterpret_cast<uint4*>(dst + r * kLd + c) = v;
  }
}

// Query qi (absolute) sees key kj: inside T, causal, same segment (seg_q, seg_k tile-local ids).
__device__ __forceinline__ bool visible(int qi, int kj, int T, bool has_seg, int32_t sq, int32_t sk) {
  return qi < T && kj <= qi && (!has_seg || sq == sk);
}

// Bit c: query qi sees key kj0 + c (c < n), its segment sq, the keys' segments sk[c] (tile-local).
__device__ __forceinline__ uint32_t visible_row(int qi, int kj0, int n, int T, bool has_seg, int32_t sq,
                                                const int32_t* sk) {
  uint32_t bits = 0;
  for (int c = 0; c < n; c++) bits |= (uint32_t)visible(qi, kj0 + c, T, has_seg, sq, sk[c]) << c;
  return bits;
}
// Bit c: query qi0 + c (segment sq[c]) sees key kj (segment sk), c < n.
__device__ __forceinline__ uint32_t visible_col(int qi0, int kj, int n, int T, bool has_seg, const int32_t* sq,
                                                int32_t sk) {
  uint32_t bits = 0;
  for (int c = 0; c < n; c++) bits |= (uint32_t)visible(qi0 + c, kj, T, has_seg, sq[c], sk) << c;
  return bits;
}

// One block per (query tile, head, batch), the heaviest (last) query tiles first; 4 warps, warp w
// owns query rows 16w..16w+15. Lane (r, half) = (lane & 15, lane >> 4) owns row 16w + r, score
// columns [32 half, 32 half + 32) and output columns [half D/2, half D/2 + D/2) (in registers).
// Shared: Q, K, V (kTile, D+8) bf16, P (kTile, kLdP) bf16, per warp 16 rows of fp32 (S, then the
// P V tile).
template <int D>
__global__ void __launch_bounds__(128, D == 128 ? 2 : 3)
    attention_forward_bf16_kernel(float* __restrict__ out, float* __restrict__ lse, const uint16_t* __restrict__ qkv16,
                                  const int32_t* __restrict__ seg, int T, int NH, int NKV, int HS, float scale) {
  constexpr int kLd = ld_of<D>(), kHalf = D / 2, kLdW = D + 4 > kLdS ? D + 4 : kLdS;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Qs = reinterpret_cast<bf16*>(smem);
  bf16* Ks = Qs + kTile * kLd;
  bf16* Vs = Ks + kTile * kLd;
  bf16* Ps = Vs + kTile * kLd;
  float* Ws = reinterpret_cast<float*>(Ps + kTile * kLdP);
  __shared__ int32_t seg_q[kTile], seg_k[kTile];

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, r = lane & 15, half = lane >> 4;
  const int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int kvh = h / (NH / NKV), QKV = (NH + 2 * NKV) * HS, OC = NH * HS;
  const int i0 = qt * kTile, row = warp * 16 + r, qi = i0 + row;
  const uint16_t* rows = qkv16 + (int64_t)b * T * QKV;
  const int32_t* sb = seg ? seg + (int64_t)b * T : nullptr;
  float* W = Ws + warp * 16 * kLdW;

  load_tile<D>(Qs, rows + h * HS, QKV, i0, T, HS, 128);
  if (tid < kTile) seg_q[tid] = sb && i0 + tid < T ? sb[i0 + tid] : 0;
  float o[kHalf];
#pragma unroll
  for (int k = 0; k < kHalf; k++) o[k] = 0.0f;
  float m = -INFINITY, l = 0.0f;

  const int j_end = min(T, i0 + kTile);  // keys at or before the tile's last query
  for (int j0 = 0; j0 < j_end; j0 += kTile) {
    __syncthreads();  // the last tile's reads of Ks, Vs and seg_k are done
    if (tid < kTile) seg_k[tid] = sb && j0 + tid < T ? sb[j0 + tid] : 0;
    __syncthreads();
    const int kc = 32 * half;  // first score column of this lane; the 128 lanes cover the tile
    const uint32_t vis = visible_row(qi, j0 + kc, 32, T, sb != nullptr, seg_q[row], seg_k + kc);
    if (!__syncthreads_or(vis != 0)) continue;  // every pair masked: nothing to add
    load_tile<D>(Ks, rows + (NH + kvh) * HS, QKV, j0, T, HS, 128);
    load_tile<D>(Vs, rows + (NH + NKV + kvh) * HS, QKV, j0, T, HS, 128);
    __syncthreads();
    if (j0 > i0 + warp * 16 + 15) continue;  // (warp-uniform) the warp's rows are all before the tile

    FragC s[4];
    zero(s);
    mma_abt<4, D>(s, Qs + warp * 16 * kLd, kLd, Ks, kLd);  // S = Q K^T, 16 rows x 64 keys
#pragma unroll
    for (int n = 0; n < 4; n++) wmma::store_matrix_sync(W + 16 * n, s[n], kLdS, wmma::mem_row_major);
    __syncwarp();

    const float* srow = W + r * kLdS + kc;
    float mx = -INFINITY;
#pragma unroll
    for (int c = 0; c < 32; c += 4) {
      const float4 v = *reinterpret_cast<const float4*>(srow + c);
      const float e[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int u = 0; u < 4; u++)
        if ((vis >> (c + u)) & 1u) mx = fmaxf(mx, e[u] * scale);
    }
    mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 16));
    const float m_new = fmaxf(m, mx);
    const float base = m_new == -INFINITY ? 0.0f : m_new;  // a row with nothing seen yet: no -inf - -inf
    const float alpha = expf(m - base);
    float sum = 0.0f;
#pragma unroll
    for (int c = 0; c < 32; c += 8) {
      float p[8];
#pragma unroll
      for (int u = 0; u < 8; u++) {
        p[u] = (vis >> (c + u)) & 1u ? expf(srow[c + u] * scale - base) : 0.0f;
        sum += p[u];
      }
      *reinterpret_cast<uint4*>(Ps + row * kLdP + kc + c) = bf16_pack8(p);
    }
    sum += __shfl_xor_sync(kFull, sum, 16);  // a + b = b + a: both lanes of the row hold the same bits
    l = l * alpha + sum;
    m = m_new;
#pragma unroll
    for (int k = 0; k < kHalf; k++) o[k] *= alpha;
    __syncwarp();  // P rows written; S read

    FragC pv[D / 16];
    zero(pv);
    mma_ab<D / 16, kTile>(pv, Ps + warp * 16 * kLdP, kLdP, Vs, kLd);  // P V, 16 rows x D
#pragma unroll
    for (int n = 0; n < D / 16; n++) wmma::store_matrix_sync(W + 16 * n, pv[n], kLdW, wmma::mem_row_major);
    __syncwarp();
    const float* orow = W + r * kLdW + half * kHalf;
#pragma unroll
    for (int k = 0; k < kHalf; k += 4) {
      const float4 v = *reinterpret_cast<const float4*>(orow + k);
      o[k] += v.x, o[k + 1] += v.y, o[k + 2] += v.z, o[k + 3] += v.w;
    }
    __syncwarp();  // W read before the next tile's S overwrites it
  }

  if (qi < T) {
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    float* orow = out + ((int64_t)b * T + qi) * OC + h * HS + half * kHalf;
#pragma unroll
    for (int k = 0; k < kHalf; k++)
      if (half * kHalf + k < HS) orow[k] = o[k] * inv;
    if (half == 0) lse[((int64_t)b * NH + h) * T + qi] = m + logf(l);
  }
}

// delta (B,NH,T) = rowsum(dout * out) per head in fp32 (the CPU's D): one warp per (b, t, head).
__global__ void attention_delta_bf16_kernel(float* __restrict__ delta, const float* __restrict__ dout,
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

// Rows [t0, t0 + kTile) x columns [col0, col0 + HS) of dqkv (b's rows, stride QKV) = the (kTile,
// D) tile whose 16-row block rg, columns cg D/2 .. + D/2 are acc of warp (rg, cg), through st
// ((kTile, D+4) fp32 of shared memory, free when called).
template <int D, int N>
__device__ __forceinline__ void store_rows(float* __restrict__ dqkv, float* st, FragC (&acc)[N], int rg, int cg,
                                           int t0, int T, int QKV, int col0, int HS, int b) {
  __syncthreads();  // st free: every warp is past its last read of it
#pragma unroll
  for (int n = 0; n < N; n++)
    wmma::store_matrix_sync(st + 16 * rg * (D + 4) + cg * (D / 2) + 16 * n, acc[n], D + 4, wmma::mem_row_major);
  __syncthreads();
  for (int idx = threadIdx.x; idx < kTile * D; idx += blockDim.x) {
    const int r = idx / D, d = idx % D;
    if (t0 + r < T && d < HS) dqkv[((int64_t)b * T + t0 + r) * QKV + col0 + d] = st[r * (D + 4) + d];
  }
}

// dQ by query tiles: one block per (query tile, head, batch), heaviest first, looping over the key
// tiles in order. 8 warps: warp w computes S, dP for rows 16 (w & 3) and keys 32 (w >> 2) .. + 32,
// and dQ for the same rows and head columns (w >> 2) D/2 .. + D/2 (fragments held across tiles).
// Shared: Q, dO, K, V (kTile, D+8) bf16; S, dP (kTile, kLdS) fp32; dS (kTile, kLdP) bf16.
template <int D>
__global__ void __launch_bounds__(256, 2)
    attention_backward_dq_bf16_kernel(float* __restrict__ dqkv, const uint16_t* __restrict__ qkv16,
                                      const uint16_t* __restrict__ dout16, const float* __restrict__ lse,
                                      const float* __restrict__ delta, const int32_t* __restrict__ seg, int T, int NH,
                                      int NKV, int HS, float scale) {
  constexpr int kLd = ld_of<D>(), kN = D / 32;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Qs = reinterpret_cast<bf16*>(smem);
  bf16* dOs = Qs + kTile * kLd;
  bf16* Ks = dOs + kTile * kLd;
  bf16* Vs = Ks + kTile * kLd;
  float* Ss = reinterpret_cast<float*>(Vs + kTile * kLd);
  float* dPs = Ss + kTile * kLdS;
  bf16* dSs = reinterpret_cast<bf16*>(dPs + kTile * kLdS);
  __shared__ int32_t seg_q[kTile], seg_k[kTile];
  __shared__ float lse_q[kTile], del_q[kTile];

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, rg = warp & 3, cg = warp >> 2;
  const int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int kvh = h / (NH / NKV), QKV = (NH + 2 * NKV) * HS, OC = NH * HS;
  const int i0 = qt * kTile;
  const uint16_t* rows = qkv16 + (int64_t)b * T * QKV;
  const int32_t* sb = seg ? seg + (int64_t)b * T : nullptr;

  load_tile<D>(Qs, rows + h * HS, QKV, i0, T, HS, 256);
  load_tile<D>(dOs, dout16 + (int64_t)b * T * OC + h * HS, OC, i0, T, HS, 256);
  if (tid < kTile) {
    const bool in = i0 + tid < T;
    const int64_t at = ((int64_t)b * NH + h) * T + i0 + tid;
    seg_q[tid] = sb && in ? sb[i0 + tid] : 0;
    lse_q[tid] = in ? lse[at] : 0.0f;
    del_q[tid] = in ? delta[at] : 0.0f;
  }
  FragC dq[kN];
  zero(dq);

  // The element-wise lane: tile row 16 rg + (lane & 15), columns c0 .. c0 + 16.
  const int row = 16 * rg + (lane & 15), qi = i0 + row, c0 = 32 * cg + 16 * (lane >> 4);
  const int j_end = min(T, i0 + kTile);
  for (int j0 = 0; j0 < j_end; j0 += kTile) {
    __syncthreads();  // the last tile's reads of Ks, Vs, dSs and seg_k are done
    if (tid < kTile) seg_k[tid] = sb && j0 + tid < T ? sb[j0 + tid] : 0;
    __syncthreads();
    // this lane's 16 pairs; the 256 lanes cover the tile
    const uint32_t vis = visible_row(qi, j0 + c0, 16, T, sb != nullptr, seg_q[row], seg_k + c0);
    if (!__syncthreads_or(vis != 0)) continue;
    load_tile<D>(Ks, rows + (NH + kvh) * HS, QKV, j0, T, HS, 256);
    load_tile<D>(Vs, rows + (NH + NKV + kvh) * HS, QKV, j0, T, HS, 256);
    __syncthreads();
    {
      FragC s[2];
      zero(s);
      mma_abt<2, D>(s, Qs + 16 * rg * kLd, kLd, Ks + 32 * cg * kLd, kLd);  // S = Q K^T
#pragma unroll
      for (int n = 0; n < 2; n++)
        wmma::store_matrix_sync(Ss + 16 * rg * kLdS + 32 * cg + 16 * n, s[n], kLdS, wmma::mem_row_major);
    }
    {
      FragC dp[2];
      zero(dp);
      mma_abt<2, D>(dp, dOs + 16 * rg * kLd, kLd, Vs + 32 * cg * kLd, kLd);  // dP = dO V^T
#pragma unroll
      for (int n = 0; n < 2; n++)
        wmma::store_matrix_sync(dPs + 16 * rg * kLdS + 32 * cg + 16 * n, dp[n], kLdS, wmma::mem_row_major);
    }
    __syncwarp();
    const float lse_r = lse_q[row], del_r = del_q[row];
#pragma unroll
    for (int c = 0; c < 16; c += 8) {
      float ds[8];
#pragma unroll
      for (int u = 0; u < 8; u++) {
        const int col = c0 + c + u;
        ds[u] = 0.0f;
        if ((vis >> (c + u)) & 1u) {
          const float p = expf(Ss[row * kLdS + col] * scale - lse_r);
          ds[u] = p * (dPs[row * kLdS + col] - del_r) * scale;
        }
      }
      *reinterpret_cast<uint4*>(dSs + row * kLdP + c0 + c) = bf16_pack8(ds);
    }
    __syncthreads();  // dS rows complete (two warps write each)
    mma_ab<kN, kTile>(dq, dSs + 16 * rg * kLdP, kLdP, Ks + cg * (D / 2), kLd);  // dQ += dS K
  }

  // Through shared memory (S and dP's space, (kTile, D+4) fp32) to coalesced rows of dqkv.
  store_rows<D, kN>(dqkv, Ss, dq, rg, cg, i0, T, QKV, h * HS, HS, b);
}

// dK, dV by key tiles: one block per (key tile, kv head, batch), looping over the group's query
// heads, then the query tiles at or after the key tile, in order. 8 warps: warp w computes S^T,
// dP^T for keys 16 (w & 3) and queries 32 (w >> 2) .. + 32, and dK, dV for the same keys and head
// columns (w >> 2) D/2 .. + D/2. Shared: K, V, Q, dO (kTile, D+8) bf16; S^T, dP^T (kTile, kLdS)
// fp32; P^T, dS^T (kTile, kLdP) bf16.
template <int D>
__global__ void __launch_bounds__(256, D == 128 ? 1 : 2)
    attention_backward_dkdv_bf16_kernel(float* __restrict__ dqkv, const uint16_t* __restrict__ qkv16,
                                        const uint16_t* __restrict__ dout16, const float* __restrict__ lse,
                                        const float* __restrict__ delta, const int32_t* __restrict__ seg, int T,
                                        int NH, int NKV, int HS, float scale) {
  constexpr int kLd = ld_of<D>(), kN = D / 32;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Ks = reinterpret_cast<bf16*>(smem);
  bf16* Vs = Ks + kTile * kLd;
  bf16* Qs = Vs + kTile * kLd;
  bf16* dOs = Qs + kTile * kLd;
  float* STs = reinterpret_cast<float*>(dOs + kTile * kLd);
  float* dPTs = STs + kTile * kLdS;
  bf16* PTs = reinterpret_cast<bf16*>(dPTs + kTile * kLdS);
  bf16* dSTs = PTs + kTile * kLdP;
  __shared__ int32_t seg_q[kTile], seg_k[kTile];
  __shared__ float lse_q[kTile], del_q[kTile];

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, rg = warp & 3, cg = warp >> 2;
  const int kt = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
  const int group = NH / NKV, QKV = (NH + 2 * NKV) * HS, OC = NH * HS;
  const int j0 = kt * kTile;
  const uint16_t* rows = qkv16 + (int64_t)b * T * QKV;
  const uint16_t* drows = dout16 + (int64_t)b * T * OC;
  const int32_t* sb = seg ? seg + (int64_t)b * T : nullptr;

  load_tile<D>(Ks, rows + (NH + kvh) * HS, QKV, j0, T, HS, 256);
  load_tile<D>(Vs, rows + (NH + NKV + kvh) * HS, QKV, j0, T, HS, 256);
  if (tid < kTile) seg_k[tid] = sb && j0 + tid < T ? sb[j0 + tid] : 0;
  FragC dk[kN], dv[kN];
  zero(dk);
  zero(dv);

  // The element-wise lane: key row 16 rg + (lane & 15), query columns c0 .. c0 + 16.
  const int krow = 16 * rg + (lane & 15), kj = j0 + krow, c0 = 32 * cg + 16 * (lane >> 4);
  for (int h = kvh * group; h < (kvh + 1) * group; h++) {
    for (int i0 = j0; i0 < T; i0 += kTile) {  // query tiles that reach the key tile
      __syncthreads();  // the last query tile's reads of Qs, dOs, PTs, dSTs and row data are done
      if (tid < kTile) {
        const bool in = i0 + tid < T;
        const int64_t at = ((int64_t)b * NH + h) * T + i0 + tid;
        seg_q[tid] = sb && in ? sb[i0 + tid] : 0;
        lse_q[tid] = in ? lse[at] : 0.0f;
        del_q[tid] = in ? delta[at] : 0.0f;
      }
      __syncthreads();
      const uint32_t vis = visible_col(i0 + c0, kj, 16, T, sb != nullptr, seg_q + c0, seg_k[krow]);
      if (!__syncthreads_or(vis != 0)) continue;
      load_tile<D>(Qs, rows + h * HS, QKV, i0, T, HS, 256);
      load_tile<D>(dOs, drows + h * HS, OC, i0, T, HS, 256);
      __syncthreads();
      {
        FragC st[2];
        zero(st);
        mma_abt<2, D>(st, Ks + 16 * rg * kLd, kLd, Qs + 32 * cg * kLd, kLd);  // S^T = K Q^T
#pragma unroll
        for (int n = 0; n < 2; n++)
          wmma::store_matrix_sync(STs + 16 * rg * kLdS + 32 * cg + 16 * n, st[n], kLdS, wmma::mem_row_major);
      }
      {
        FragC dpt[2];
        zero(dpt);
        mma_abt<2, D>(dpt, Vs + 16 * rg * kLd, kLd, dOs + 32 * cg * kLd, kLd);  // dP^T = V dO^T
#pragma unroll
        for (int n = 0; n < 2; n++)
          wmma::store_matrix_sync(dPTs + 16 * rg * kLdS + 32 * cg + 16 * n, dpt[n], kLdS, wmma::mem_row_major);
      }
      __syncwarp();
#pragma unroll 1
      for (int c = 0; c < 16; c += 8) {
        float p[8], ds[8];
#pragma unroll
        for (int u = 0; u < 8; u++) {
          const int col = c0 + c + u;
          p[u] = 0.0f, ds[u] = 0.0f;
          if ((vis >> (c + u)) & 1u) {
            p[u] = expf(STs[krow * kLdS + col] * scale - lse_q[col]);
            ds[u] = p[u] * (dPTs[krow * kLdS + col] - del_q[col]) * scale;
          }
        }
        *reinterpret_cast<uint4*>(PTs + krow * kLdP + c0 + c) = bf16_pack8(p);
        *reinterpret_cast<uint4*>(dSTs + krow * kLdP + c0 + c) = bf16_pack8(ds);
      }
      __syncthreads();  // P^T, dS^T rows complete (two warps write each)
      mma_ab<kN, kTile>(dv, PTs + 16 * rg * kLdP, kLdP, dOs + cg * (D / 2), kLd);  // dV += P^T dO
      mma_ab<kN, kTile>(dk, dSTs + 16 * rg * kLdP, kLdP, Qs + cg * (D / 2), kLd);  // dK += dS^T Q
    }
  }

  // dK then dV through shared memory (S^T and dP^T's space, (kTile, D+4) fp32) to rows of dqkv.
  store_rows<D, kN>(dqkv, STs, dk, rg, cg, j0, T, QKV, (NH + kvh) * HS, HS, b);
  store_rows<D, kN>(dqkv, STs, dv, rg, cg, j0, T, QKV, (NH + NKV + kvh) * HS, HS, b);
}

void check_shape(const char* op, int NH, int NKV, int HS) {
  if (attention_bf16_supported(HS) && NKV >= 1 && NH >= NKV && NH % NKV == 0) return;
  std::fprintf(stderr,
               "smelt: cuda::%s: NH %d, NKV %d, HS %d unsupported (needs HS a multiple of 16 in [16, 128], NH a "
               "multiple of NKV); use the fp32 attention for this shape\n",
               op, NH, NKV, HS);
  std::abort();
}

int tiles(int T) { return (T + kTile - 1) / kTile; }

template <int D>
constexpr int forward_smem() {
  constexpr int kLdW = D + 4 > kLdS ? D + 4 : kLdS;
  return 2 * (3 * kTile * ld_of<D>() + kTile * kLdP) + 4 * (4 * 16 * kLdW);
}
template <int D>
constexpr int backward_smem(int score_tiles16) {  // 4 head tiles, 2 fp32 score tiles, bf16 ones
  return 2 * 4 * kTile * ld_of<D>() + 4 * 2 * kTile * kLdS + 2 * score_tiles16 * kTile * kLdP;
}

template <int D>
void forward_launch(float* out, float* lse, const uint16_t* qkv16, const int32_t* seg, int B, int T, int NH,
                    int NKV, int HS, float scale, Stream s) {
  constexpr int smem = forward_smem<D>();
  (void)cudaFuncSetAttribute(attention_forward_bf16_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  attention_forward_bf16_kernel<D><<<dim3(tiles(T), NH, B), 128, smem, s>>>(out, lse, qkv16, seg, T, NH, NKV, HS,
                                                                          scale);
}

template <int D>
void backward_launch(float* dqkv, const float* delta, const uint16_t* qkv16, const uint16_t* dout16,
                     const float* lse, const int32_t* seg, int B, int T, int NH, int NKV, int HS, float scale,
                     Stream s) {
  constexpr int smem_dq = backward_smem<D>(1), smem_kv = backward_smem<D>(2);
  (void)cudaFuncSetAttribute(attention_backward_dq_bf16_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             smem_dq);
  attention_backward_dq_bf16_kernel<D><<<dim3(tiles(T), NH, B), 256, smem_dq, s>>>(dqkv, qkv16, dout16, lse, delta,
                                                                                  seg, T, NH, NKV, HS, scale);
  (void)cudaFuncSetAttribute(attention_backward_dkdv_bf16_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             smem_kv);
  attention_backward_dkdv_bf16_kernel<D><<<dim3(tiles(T), NKV, B), 256, smem_kv, s>>>(dqkv, qkv16, dout16, lse,
                                                                                      delta, seg, T, NH, NKV, HS,
                                                                                      scale);
}
}  // namespace

bool attention_bf16_supported(int HS) { return HS >= 16 && HS <= 128 && HS % 16 == 0; }

void attention_forward_bf16(float* out, float* lse, uint16_t* qkv16, const float* qkv, const int32_t* seg, int B,
                            int T, int NH, int NKV, int HS, Stream s) {
  check_shape("attention_forward_bf16", NH, NKV, HS);
  if (B <= 0 || T <= 0) return;
  const float scale = 1.0f / std::sqrt((float)HS);  // as the CPU kernel
  bf16_from_f32(qkv16, qkv, (int64_t)B * T * (NH + 2 * NKV) * HS, s);
  if (HS <= 32) forward_launch<32>(out, lse, qkv16, seg, B, T, NH, NKV, HS, scale, s);
  else if (HS <= 64) forward_launch<64>(out, lse, qkv16, seg, B, T, NH, NKV, HS, scale, s);
  else forward_launch<128>(out, lse, qkv16, seg, B, T, NH, NKV, HS, scale, s);
}

void attention_backward_bf16(float* dqkv, float* delta, uint16_t* qkv16, uint16_t* dout16, const float* dout,
                             const float* qkv, const float* out, const float* lse, const int32_t* seg, int B, int T,
                             int NH, int NKV, int HS, Stream s) {
  check_shape("attention_backward_bf16", NH, NKV, HS);
  if (B <= 0 || T <= 0) return;
  const float scale = 1.0f / std::sqrt((float)HS);
  bf16_from_f32(qkv16, qkv, (int64_t)B * T * (NH + 2 * NKV) * HS, s);
  bf16_from_f32(dout16, dout, (int64_t)B * T * NH * HS, s);
  const int64_t warps = (int64_t)B * T * NH;
  attention_delta_bf16_kernel<<<(unsigned)((warps * 32 + 255) / 256), 256, 0, s>>>(delta, dout, out, B, T, NH, HS);
  if (HS <= 32) backward_launch<32>(dqkv, delta, qkv16, dout16, lse, seg, B, T, NH, NKV, HS, scale, s);
  else if (HS <= 64) backward_launch<64>(dqkv, delta, qkv16, dout16, lse, seg, B, T, NH, NKV, HS, scale, s);
  else backward_launch<128>(dqkv, delta, qkv16, dout16, lse, seg, B, T, NH, NKV, HS, scale, s);
}

}  // namespace smelt::cuda
