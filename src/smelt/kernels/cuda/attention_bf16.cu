// Causal grouped-query attention on the tensor cores for bf16 mixed precision, flash-style
// [Dao 2023, FlashAttention-2]: 64x64 query/key tiles of bf16 in shared memory, every product an
// mma.sync m16n8k16 bf16 product with fp32 sums (PTX, operands loaded with ldmatrix), the scores,
// the online softmax, P, dP and dS in registers (fp32 accumulator fragments, converted in place
// to the bf16 A fragments of the next product). No atomics: the backward is a dQ kernel per query
// tile and a dK/dV kernel per key tile. Not the fp32 kernel (attention.cu), not RoPE.
//
// Rounding points are those of the CPU bf16 kernel (cpu/attention_bf16.cpp): Q, K, V, dO rounded
// once (bf16_from_f32); S, dP fp32; P rounded to bf16 for P V and P^T dO, dS to bf16 for dS K and
// dS^T Q. One difference: the CPU rounds the normalised P = exp(s - m) / sum (m the row's max over
// all keys), the online softmax here rounds exp(s - m_run) (m_run the max so far) and divides by
// the sum after P V. Both round values in [0, 1] once; the results differ by bf16 roundings.
// exp(x) is computed as exp2(x log2(e)) (the scores scaled by scale log2(e) once).
//
// Head columns are padded with zeros up to D (32, 64 or 128), a template parameter; HS is a
// multiple of 16. Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16"): lane = 4 g + t;
// an fp32 C fragment holds rows g, g+8 and columns 2t, 2t+1 of a 16x8 tile.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "smelt/kernels/cuda/cuda_kernels.hpp"

namespace smelt::cuda {

namespace {
using bf16 = __nv_bfloat16;

constexpr int kTile = 64;  // query rows and key rows per tile
constexpr unsigned kFull = 0xffffffffu;

// Row stride of a (kTile, D) bf16 head tile: D + 8 elements, rows 16 bytes apart in the banks.
template <int D>
__host__ __device__ constexpr int ld_of() { return D + 8; }

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

// ---- PTX wrappers (begin) ----
// ldmatrix x4 from shared memory: lanes 8i .. 8i+7 give the row addresses (16 bytes each) of 8x8
// bf16 matrix i; r[i] of lane l holds row l/4, columns 2(l%4), 2(l%4)+1 of matrix i (.trans: of its
// transpose), the lower column in the low half.
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const bf16* p) {
  const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a)
               : "memory");
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const bf16* p) {
  const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a)
               : "memory");
}
// d += A (16x16, row) . B (16x8, col): bf16 operands, fp32 accumulators (PTX fragment layouts).
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Two floats rounded to bf16 (nearest, ties to even), lo in the low half.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
// ---- PTX wrappers (end) ----

// Fragment loads from a row-major bf16 tile in shared memory (row stride ld elements), p at the
// 16x16 block's first element:
// - A (rows 0..15, k 0..15): matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7), (0-7, 8-15), (8-15, 8-15).
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const bf16* p, int ld, int lane) {
  ldsm_x4(a, p + (lane & 15) * ld + (lane >> 4) * 8);
}
// - B operands of two n-tiles whose columns n are the tile's rows (B = tile^T, k along the row):
//   b[0], b[1] for rows 0-7, b[2], b[3] for rows 8-15.
__device__ __forceinline__ void load_b_rows(uint32_t (&b)[4], const bf16* p, int ld, int lane) {
  ldsm_x4(b, p + ((lane & 7) + ((lane >> 4) << 3)) * ld + ((lane >> 3) & 1) * 8);
}
// - B operands of two n-tiles from a (k, n) row-major tile (.trans): b[0], b[1] for columns 0-7,
//   b[2], b[3] for columns 8-15.
__device__ __forceinline__ void load_b_trans(uint32_t (&b)[4], const bf16* p, int ld, int lane) {
  ldsm_x4_t(b, p + ((lane & 7) + (((lane >> 3) & 1) << 3)) * ld + (lane >> 4) * 8);
}

// s (16 x 8NS, NS n-tiles of 8 columns) = A (16 x D) . Bm^T, Bm the (8NS, D) row-major tile at
// Bs; A's fragments in registers (a[k] for columns 16k .. 16k+15). Sums over k in order.
template <int D, int NS>
__device__ __forceinline__ void mma_rows(float (&s)[NS][4], const uint32_t (&a)[D / 16][4], const bf16* Bs, int ld,
                                         int lane) {
#pragma unroll
  for (int n = 0; n < NS; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
  for (int k = 0; k < D / 16; k++) {
#pragma unroll
    for (int n = 0; n < NS; n += 2) {
      uint32_t b[4];
      load_b_rows(b, Bs + n * 8 * ld + k * 16, ld, lane);
      mma_bf16(s[n], a[k], b[0], b[1]);
      mma_bf16(s[n + 1], a[k], b[2], b[3]);
    }
  }
}
// The same with A read from shared memory (the 16 rows at As).
template <int D, int NS>
__device__ __forceinline__ void mma_rows_smem(float (&s)[NS][4], const bf16* As, const bf16* Bs, int ld, int lane) {
#pragma unroll
  for (int n = 0; n < NS; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
  for (int k = 0; k < D / 16; k++) {
    uint32_t a[4];
    load_a(a, As + k * 16, ld, lane);
#pragma unroll
    for (int n = 0; n < NS; n += 2) {
      uint32_t b[4];
      load_b_rows(b, Bs + n * 8 * ld + k * 16, ld, lane);
      mma_bf16(s[n], a, b[0], b[1]);
      mma_bf16(s[n + 1], a, b[2], b[3]);
    }
  }
}
// acc (16 x D, D/8 n-tiles) += P (16 x 8NS, the fp32 fragments of mma_rows, rounded to bf16
// here) . Vm, Vm the (8NS, D) row-major tile at Vs. The C fragments of n-tiles 2k, 2k+1 are the A
// fragment of k-step k (rows g, g+8; columns 2t, 2t+1 and 8 + 2t, 8 + 2t + 1). Sums over k in order.
template <int D, int NS>
__device__ __forceinline__ void mma_pv(float (&acc)[D / 8][4], const float (&p)[NS][4], const bf16* Vs, int ld,
                                       int lane) {
#pragma unroll
  for (int k = 0; k < NS / 2; k++) {
    const uint32_t a[4] = {pack_bf16(p[2 * k][0], p[2 * k][1]), pack_bf16(p[2 * k][2], p[2 * k][3]),
                           pack_bf16(p[2 * k + 1][0], p[2 * k + 1][1]), pack_bf16(p[2 * k + 1][2], p[2 * k + 1][3])};
#pragma unroll
    for (int n = 0; n < D / 8; n += 2) {
      uint32_t b[4];
      load_b_trans(b, Vs + k * 16 * ld + n * 8, ld, lane);
      mma_bf16(acc[n], a, b[0], b[1]);
      mma_bf16(acc[n + 1], a, b[2], b[3]);
    }
  }
}

// Fragment element (n, e) of lane (g, t) = (lane / 4, lane % 4): row g + 8 (e >> 1), column
// 8n + 2t + (e & 1); bit 4n + e of a 32-bit mask.
// Bit 4n + e: query i0 + row sees key j0 + column (rows/columns of the tile, segments tile-local).
__device__ __forceinline__ uint32_t visible_frag(int qi0, int kj0, int g, int t, int T, bool has_seg,
                                                 const int32_t* seg_q, const int32_t* seg_k) {
  uint32_t bits = 0;
#pragma unroll
  for (int n = 0; n < 8; n++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const int r = g + 8 * (e >> 1), c = 8 * n + 2 * t + (e & 1);
      bits |= (uint32_t)visible(qi0 + r, kj0 + c, T, has_seg, has_seg ? seg_q[r] : 0, has_seg ? seg_k[c] : 0)
              << (4 * n + e);
    }
  return bits;
}
// The same with rows keys and columns queries (the transposed tiles of the dK/dV kernel).
__device__ __forceinline__ uint32_t visible_frag_t(int kj0, int qi0, int g, int t, int T, bool has_seg,
                                                   const int32_t* seg_k, const int32_t* seg_q) {
  uint32_t bits = 0;
#pragma unroll
  for (int n = 0; n < 8; n++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const int r = g + 8 * (e >> 1), c = 8 * n + 2 * t + (e & 1);
      bits |= (uint32_t)visible(qi0 + c, kj0 + r, T, has_seg, has_seg ? seg_q[c] : 0, has_seg ? seg_k[r] : 0)
              << (4 * n + e);
    }
  return bits;
}

constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

// One block per (head, batch, query tile), the heaviest (last) query tiles first; 4 warps, warp w
// owns query rows 16w .. 16w+15 of the tile: its Q fragments, S = Q K^T (16 x 64) and the output
// accumulator (16 x D) stay in registers, the softmax works on the fragments (row max and sum over
// the 4 lanes of a quad). Shared: Q, K, V (kTile, D+8) bf16.
template <int D>
__global__ void __launch_bounds__(128)
    attention_forward_bf16_kernel(float* __restrict__ out, float* __restrict__ lse, const uint16_t* __restrict__ qkv16,
                                  const int32_t* __restrict__ seg, int T, int NH, int NKV, int HS, float scale) {
  constexpr int kLd = ld_of<D>();
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Qs = reinterpret_cast<bf16*>(smem);
  bf16* Ks = Qs + kTile * kLd;
  bf16* Vs = Ks + kTile * kLd;
  __shared__ int32_t seg_q[kTile], seg_k[kTile];

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int qt = gridDim.z - 1 - blockIdx.z, h = blockIdx.x, b = blockIdx.y;  // heaviest tiles first
  const int kvh = h / (NH / NKV), QKV = (NH + 2 * NKV) * HS, OC = NH * HS;
  const int i0 = qt * kTile;
  const uint16_t* rows = qkv16 + (int64_t)b * T * QKV;
  const int32_t* sb = seg ? seg + (int64_t)b * T : nullptr;
  const float c2 = scale * kLog2e;  // scores in log2 units: exp(s scale - m) = exp2(s c2 - m c2)

  load_tile<D>(Qs, rows + h * HS, QKV, i0, T, HS, 128);
  if (tid < kTile) seg_q[tid] = sb && i0 + tid < T ? sb[i0 + tid] : 0;
  __syncthreads();
  uint32_t qa[D / 16][4];
#pragma unroll
  for (int k = 0; k < D / 16; k++) load_a(qa[k], Qs + warp * 16 * kLd + k * 16, kLd, lane);
  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows g, g+8 (log2 units; l this lane's part)

  const int j_end = min(T, i0 + kTile);  // keys at or before the tile's last query
  for (int j0 = 0; j0 < j_end; j0 += kTile) {
    __syncthreads();  // the last tile's reads of Ks, Vs and seg_k are done
    if (sb) {
      if (tid < kTile) seg_k[tid] = j0 + tid < T ? sb[j0 + tid] : 0;
      __syncthreads();
    }
    const bool full = !sb && j0 < i0 && i0 + kTile <= T;  // every pair of the tiles visible
    const uint32_t vis =
        full ? ~0u : visible_frag(i0 + warp * 16, j0, g, t, T, sb != nullptr, seg_q + warp * 16, seg_k);
    if (sb && !__syncthreads_or(vis != 0)) continue;  // every pair masked: nothing to add
    load_tile<D>(Ks, rows + (NH + kvh) * HS, QKV, j0, T, HS, 128);
    load_tile<D>(Vs, rows + (NH + NKV + kvh) * HS, QKV, j0, T, HS, 128);
    __syncthreads();

    float s[8][4];
    mma_rows<D, 8>(s, qa, Ks, kLd, lane);  // S = Q K^T
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        s[n][e] = (vis >> (4 * n + e)) & 1u ? s[n][e] * c2 : -INFINITY;
        mx[e >> 1] = fmaxf(mx[e >> 1], s[n][e]);
      }
    float alpha[2], base[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(kFull, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(kFull, mx[r], 2));
      const float m_new = fmaxf(m[r], mx[r]);
      base[r] = m_new == -INFINITY ? 0.0f : m_new;  // nothing seen yet: no -inf - -inf
      alpha[r] = exp2f(m[r] - base[r]);
      m[r] = m_new;
    }
    float sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        s[n][e] = exp2f(s[n][e] - base[e >> 1]);  // masked: exp2(-inf) = 0
        sum[e >> 1] += s[n][e];
      }
#pragma unroll
    for (int r = 0; r < 2; r++) l[r] = l[r] * alpha[r] + sum[r];
#pragma unroll
    for (int n = 0; n < D / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) o[n][e] *= alpha[e >> 1];
    mma_pv<D, 8>(o, s, Vs, kLd, lane);  // O += bf16(P) V
  }

#pragma unroll
  for (int r = 0; r < 2; r++) {  // a + b = b + a: the 4 lanes of a quad end with the same bits
    l[r] += __shfl_xor_sync(kFull, l[r], 1);
    l[r] += __shfl_xor_sync(kFull, l[r], 2);
  }
#pragma unroll
  for (int r = 0; r < 2; r++) {
    const int qi = i0 + warp * 16 + g + 8 * r;
    if (qi >= T) continue;
    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    float* orow = out + ((int64_t)b * T + qi) * OC + h * HS;
#pragma unroll
    for (int n = 0; n < D / 8; n++) {
      const int c = 8 * n + 2 * t;
      if (c < HS) *reinterpret_cast<float2*>(orow + c) = make_float2(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
    }
    if (t == 0) lse[((int64_t)b * NH + h) * T + qi] = (m[r] + log2f(l[r])) * kLn2;
  }
}

// Q and dO fragments (16 x D each) stay in registers up to D = 64, above it they are read from
// shared memory at every use (registers: D/8 accumulators and 2 score tiles already).
template <int D>
constexpr bool kHoldRows = D <= 64;

// dQ by query tiles: one block per (head, batch, query tile), heaviest first, looping over the key
// tiles in order. 4 warps, warp w owns query rows 16w .. 16w+15: S = Q K^T and dP = dO V^T
// (16 x 64) in registers, P = exp(S scale - lse), dS = P (dP - delta) scale on the fragments, dQ
// += bf16(dS) K accumulated in registers. Shared: Q, dO, K, V (kTile, D+8) bf16.
template <int D>
__global__ void __launch_bounds__(128)
    attention_backward_dq_bf16_kernel(float* __restrict__ dqkv, const uint16_t* __restrict__ qkv16,
                                      const uint16_t* __restrict__ dout16, const float* __restrict__ lse,
                                      const float* __restrict__ delta, const int32_t* __restrict__ seg, int T, int NH,
                                      int NKV, int HS, float scale) {
  constexpr int kLd = ld_of<D>(), kA = kHoldRows<D> ? D / 16 : 1;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Qs = reinterpret_cast<bf16*>(smem);
  bf16* dOs = Qs + kTile * kLd;
  bf16* Ks = dOs + kTile * kLd;
  bf16* Vs = Ks + kTile * kLd;
  __shared__ int32_t seg_q[kTile], seg_k[kTile];

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int qt = gridDim.z - 1 - blockIdx.z, h = blockIdx.x, b = blockIdx.y;  // heaviest tiles first
  const int kvh = h / (NH / NKV), QKV = (NH + 2 * NKV) * HS, OC = NH * HS;
  const int i0 = qt * kTile;
  const uint16_t* rows = qkv16 + (int64_t)b * T * QKV;
  const int32_t* sb = seg ? seg + (int64_t)b * T : nullptr;
  const float c2 = scale * kLog2e;

  load_tile<D>(Qs, rows + h * HS, QKV, i0, T, HS, 128);
  load_tile<D>(dOs, dout16 + (int64_t)b * T * OC + h * HS, OC, i0, T, HS, 128);
  if (tid < kTile) seg_q[tid] = sb && i0 + tid < T ? sb[i0 + tid] : 0;
  float lse2[2], del[2];  // rows g, g+8: lse in log2 units, delta
#pragma unroll
  for (int r = 0; r < 2; r++) {
    const int qi = i0 + warp * 16 + g + 8 * r;
    const int64_t at = ((int64_t)b * NH + h) * T + qi;
    lse2[r] = qi < T ? lse[at] * kLog2e : 0.0f;
    del[r] = qi < T ? delta[at] : 0.0f;
  }
  __syncthreads();
  uint32_t qa[kA][4], da[kA][4];
  if constexpr (kHoldRows<D>) {
#pragma unroll
    for (int k = 0; k < D / 16; k++) {
      load_a(qa[k], Qs + warp * 16 * kLd + k * 16, kLd, lane);
      load_a(da[k], dOs + warp * 16 * kLd + k * 16, kLd, lane);
    }
  }
  float dq[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; n++) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;

  const int j_end = min(T, i0 + kTile);
  for (int j0 = 0; j0 < j_end; j0 += kTile) {
    __syncthreads();  // the last tile's reads of Ks, Vs and seg_k are done
    if (sb) {
      if (tid < kTile) seg_k[tid] = j0 + tid < T ? sb[j0 + tid] : 0;
      __syncthreads();
    }
    const bool full = !sb && j0 < i0 && i0 + kTile <= T;
    const uint32_t vis =
        full ? ~0u : visible_frag(i0 + warp * 16, j0, g, t, T, sb != nullptr, seg_q + warp * 16, seg_k);
    if (sb && !__syncthreads_or(vis != 0)) continue;
    load_tile<D>(Ks, rows + (NH + kvh) * HS, QKV, j0, T, HS, 128);
    load_tile<D>(Vs, rows + (NH + NKV + kvh) * HS, QKV, j0, T, HS, 128);
    __syncthreads();

    float s[8][4], dp[8][4];
    if constexpr (kHoldRows<D>) {
      mma_rows<D, 8>(s, qa, Ks, kLd, lane);   // S = Q K^T
      mma_rows<D, 8>(dp, da, Vs, kLd, lane);  // dP = dO V^T
    } else {
      mma_rows_smem<D, 8>(s, Qs + warp * 16 * kLd, Ks, kLd, lane);
      mma_rows_smem<D, 8>(dp, dOs + warp * 16 * kLd, Vs, kLd, lane);
    }
#pragma unroll
    for (int n = 0; n < 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const float p = (vis >> (4 * n + e)) & 1u ? exp2f(s[n][e] * c2 - lse2[e >> 1]) : 0.0f;
        s[n][e] = p * (dp[n][e] - del[e >> 1]) * scale;  // dS
      }
    mma_pv<D, 8>(dq, s, Ks, kLd, lane);  // dQ += bf16(dS) K
  }

#pragma unroll
  for (int r = 0; r < 2; r++) {
    const int qi = i0 + warp * 16 + g + 8 * r;
    if (qi >= T) continue;
    float* drow = dqkv + ((int64_t)b * T + qi) * QKV + h * HS;
#pragma unroll
    for (int n = 0; n < D / 8; n++) {
      const int c = 8 * n + 2 * t;
      if (c < HS) *reinterpret_cast<float2*>(drow + c) = make_float2(dq[n][2 * r], dq[n][2 * r + 1]);
    }
  }
}

// dK, dV by key tiles: one block per (kv head, batch, key tile), heaviest (first) key tiles first,
// looping over the group's query heads, then the query tiles at or after the key tile, in order. 4
// warps, warp w owns key rows 16w .. 16w+15: S^T = K Q^T and dP^T = V dO^T (16 x kQN, the query
// tile in passes) in registers, P^T and dS^T on the fragments, dV += bf16(P^T) dO and dK +=
// bf16(dS^T) Q accumulated in registers. Shared: K, V, Q, dO (kTile, D+8) bf16; per query of the
// tile its segment, lse (log2 units) and delta.
template <int D>
__global__ void __launch_bounds__(128)
    attention_backward_dkdv_bf16_kernel(float* __restrict__ dqkv, const uint16_t* __restrict__ qkv16,
                                        const uint16_t* __restrict__ dout16, const float* __restrict__ lse,
                                        const float* __restrict__ delta, const int32_t* __restrict__ seg, int T,
                                        int NH, int NKV, int HS, float scale) {
  // queries per pass (kNS n-tiles of scores): 32 above D = 32, for the registers of dK and dV
  constexpr int kLd = ld_of<D>(), kA = kHoldRows<D> ? D / 16 : 1, kQN = D <= 32 ? 64 : 32, kNS = kQN / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Ks = reinterpret_cast<bf16*>(smem);
  bf16* Vs = Ks + kTile * kLd;
  bf16* Qs = Vs + kTile * kLd;
  bf16* dOs = Qs + kTile * kLd;
  __shared__ int32_t seg_q[kTile], seg_k[kTile];
  __shared__ float lse_q[kTile], del_q[kTile];

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int kt = blockIdx.z, kvh = blockIdx.x, b = blockIdx.y;  // heaviest (first) key tiles first
  const int group = NH / NKV, QKV = (NH + 2 * NKV) * HS, OC = NH * HS;
  const int j0 = kt * kTile;
  const uint16_t* rows = qkv16 + (int64_t)b * T * QKV;
  const uint16_t* drows = dout16 + (int64_t)b * T * OC;
  const int32_t* sb = seg ? seg + (int64_t)b * T : nullptr;
  const float c2 = scale * kLog2e;

  load_tile<D>(Ks, rows + (NH + kvh) * HS, QKV, j0, T, HS, 128);
  load_tile<D>(Vs, rows + (NH + NKV + kvh) * HS, QKV, j0, T, HS, 128);
  if (tid < kTile) seg_k[tid] = sb && j0 + tid < T ? sb[j0 + tid] : 0;
  __syncthreads();
  uint32_t ka[kA][4], va[kA][4];
  if constexpr (kHoldRows<D>) {
#pragma unroll
    for (int k = 0; k < D / 16; k++) {
      load_a(ka[k], Ks + warp * 16 * kLd + k * 16, kLd, lane);
      load_a(va[k], Vs + warp * 16 * kLd + k * 16, kLd, lane);
    }
  }
  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; n++)
#pragma unroll
    for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.0f;

  for (int h = kvh * group; h < (kvh + 1) * group; h++) {
    for (int i0 = j0; i0 < T; i0 += kTile) {  // query tiles that reach the key tile
      __syncthreads();  // the last query tile's reads of Qs, dOs and the row data are done
      if (tid < kTile) {
        const bool in = i0 + tid < T;
        const int64_t at = ((int64_t)b * NH + h) * T + i0 + tid;
        seg_q[tid] = sb && in ? sb[i0 + tid] : 0;
        lse_q[tid] = in ? lse[at] * kLog2e : 0.0f;
        del_q[tid] = in ? delta[at] : 0.0f;
      }
      __syncthreads();
      const bool full = !sb && j0 < i0 && i0 + kTile <= T;
      const uint32_t vis =
          full ? ~0u : visible_frag_t(j0 + warp * 16, i0, g, t, T, sb != nullptr, seg_k + warp * 16, seg_q);
      if (sb && !__syncthreads_or(vis != 0)) continue;
      load_tile<D>(Qs, rows + h * HS, QKV, i0, T, HS, 128);
      load_tile<D>(dOs, drows + h * HS, OC, i0, T, HS, 128);
      __syncthreads();

#pragma unroll 1
      for (int q0 = 0; q0 < kTile; q0 += kQN) {  // the query tile in passes of kQN columns
        const bf16* Qp = Qs + q0 * kLd;
        const bf16* dOp = dOs + q0 * kLd;
        const uint32_t vp = vis >> (q0 / 2);  // bits 4n + e of the pass's n-tiles
        float st[kNS][4], dpt[kNS][4];
        if constexpr (kHoldRows<D>) {
          mma_rows<D, kNS>(st, ka, Qp, kLd, lane);    // S^T = K Q^T
          mma_rows<D, kNS>(dpt, va, dOp, kLd, lane);  // dP^T = V dO^T
        } else {
          mma_rows_smem<D, kNS>(st, Ks + warp * 16 * kLd, Qp, kLd, lane);
          mma_rows_smem<D, kNS>(dpt, Vs + warp * 16 * kLd, dOp, kLd, lane);
        }
#pragma unroll
        for (int n = 0; n < kNS; n++)
#pragma unroll
          for (int e = 0; e < 4; e++) {
            const int c = q0 + 8 * n + 2 * t + (e & 1);
            const float p = (vp >> (4 * n + e)) & 1u ? exp2f(st[n][e] * c2 - lse_q[c]) : 0.0f;
            st[n][e] = p;
            dpt[n][e] = p * (dpt[n][e] - del_q[c]) * scale;  // dS^T
          }
        mma_pv<D, kNS>(dv, st, dOp, kLd, lane);  // dV += bf16(P^T) dO
        mma_pv<D, kNS>(dk, dpt, Qp, kLd, lane);  // dK += bf16(dS^T) Q
      }
    }
  }

#pragma unroll
  for (int r = 0; r < 2; r++) {
    const int kj = j0 + warp * 16 + g + 8 * r;
    if (kj >= T) continue;
    float* krow = dqkv + ((int64_t)b * T + kj) * QKV + (NH + kvh) * HS;
    float* vrow = dqkv + ((int64_t)b * T + kj) * QKV + (NH + NKV + kvh) * HS;
#pragma unroll
    for (int n = 0; n < D / 8; n++) {
      const int c = 8 * n + 2 * t;
      if (c < HS) {
        *reinterpret_cast<float2*>(krow + c) = make_float2(dk[n][2 * r], dk[n][2 * r + 1]);
        *reinterpret_cast<float2*>(vrow + c) = make_float2(dv[n][2 * r], dv[n][2 * r + 1]);
      }
    }
  }
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
constexpr int forward_smem() { return 2 * 3 * kTile * ld_of<D>(); }  // Q, K, V
template <int D>
constexpr int backward_smem() { return 2 * 4 * kTile * ld_of<D>(); }  // Q, dO, K, V

template <int D>
void forward_launch(float* out, float* lse, const uint16_t* qkv16, const int32_t* seg, int B, int T, int NH,
                    int NKV, int HS, float scale, Stream s) {
  constexpr int smem = forward_smem<D>();
  (void)cudaFuncSetAttribute(attention_forward_bf16_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  attention_forward_bf16_kernel<D><<<dim3(NH, B, tiles(T)), 128, smem, s>>>(out, lse, qkv16, seg, T, NH, NKV, HS,
                                                                          scale);
}

template <int D>
void backward_launch(float* dqkv, const float* delta, const uint16_t* qkv16, const uint16_t* dout16,
                     const float* lse, const int32_t* seg, int B, int T, int NH, int NKV, int HS, float scale,
                     Stream s) {
  constexpr int smem_dq = backward_smem<D>(), smem_kv = backward_smem<D>();
  (void)cudaFuncSetAttribute(attention_backward_dq_bf16_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             smem_dq);
  attention_backward_dq_bf16_kernel<D><<<dim3(NH, B, tiles(T)), 128, smem_dq, s>>>(dqkv, qkv16, dout16, lse, delta,
                                                                                  seg, T, NH, NKV, HS, scale);
  (void)cudaFuncSetAttribute(attention_backward_dkdv_bf16_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             smem_kv);
  attention_backward_dkdv_bf16_kernel<D><<<dim3(NKV, B, tiles(T)), 128, smem_kv, s>>>(dqkv, qkv16, dout16, lse,
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
  attention_delta(delta, dout, out, B, T, NH, HS, s);  // (attention.cu; fp32, the CPU's D)
  if (HS <= 32) backward_launch<32>(dqkv, delta, qkv16, dout16, lse, seg, B, T, NH, NKV, HS, scale, s);
  else if (HS <= 64) backward_launch<64>(dqkv, delta, qkv16, dout16, lse, seg, B, T, NH, NKV, HS, scale, s);
  else backward_launch<128>(dqkv, delta, qkv16, dout16, lse, seg, B, T, NH, NKV, HS, scale, s);
}

}  // namespace smelt::cuda
