// Decode-time linear layers (decode_linear.hpp): fp16 <-> fp32 in software, Q8_0 quantization
// (ggml's reference rounding), and fp32 / f16 / bf16 / Q8_0 matrix-vector products for a few rows
// at a time (f16, bf16: the fp32 formula on weights widened exactly as they are loaded).
// Not the training GEMMs (gemm.cpp, matmul.cpp).
//
// Batch invariance is a property of the arithmetic, not of the schedule: each output element has
// one formula, and every path (AVX-512, AVX2, portable, _ref) evaluates exactly it, whatever tile
// the element falls in, whatever n or the thread count:
//
//  fp32, K16 = IC - IC % 16:
//    p[j] = 0, then for k = j, j+16, ... < K16:   p[j] = fma(x[k], w[k], p[j])     (j = 0..15)
//    s = ((p0+p8 + p4+p12) + (p2+p10 + p6+p14)) + ((p1+p9 + p5+p13) + (p3+p11 + p7+p15)),
//        i.e. q[j] = p[j] + p[j+8], then q[j] + q[j+4], then + [j+2], then + [j+1]
//    for k = K16 .. IC-1:                         s = fma(x[k], w[k], s)
//  Q8_0, blocks b = 0 .. IC/32 - 1 in order:
//    isum = sum of the 32 products x.qs[i] * w.qs[i] (exact int32)
//    acc  = fma(fp32(w.d) * fp32(x.d), (float)isum, acc)    (acc = 0 first; the product of two
//           halves is exact in fp32, and |isum| <= 32*128*127 < 2^24 converts exactly)
//  out = beta == 0 ? s : fma(beta, out, s)   (beta 1: out + s; out is not read when beta is 0)
//
// AVX-512 keeps the 16 lanes of p in one register, AVX2 in two (lanes 0-7, 8-15); the tree is
// the usual halving reduction. Tiles of rows x output columns share each weight load among the
// rows (weights stream from memory once per call for n <= the row tile); OpenMP threads take
// fixed blocks of output columns dynamically (a block's bits do not depend on the thread that
// runs it, and a core busy with other work does not hold the whole call back).
#include "smelt/kernels/decode_linear.hpp"

// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized on their own _mm512_undefined_*()
// (GCC bug 105593, fixed in 13); the warning is placed in the header, so it is silenced for it.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <utility>

#include "smelt/hw/cpu_info.hpp"
#include "smelt/kernels/cpu/vec_math.hpp"
#include "smelt/kernels/kernels.hpp"

namespace smelt {

// ---- fp16 -----------------------------------------------------------------------------------
// Round to nearest, ties to even, on the bits; NaN keeps its sign and top 10 payload bits and
// comes out quiet, as F16C's vcvtps2ph does (the test compares with it).
uint16_t fp16_from_f32(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u | (uint16_t)((a >> 13) & 0x3ffu);  // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to infinity (and infinity)
  if (a >= 0x38800000u) {                       // >= 2^-14: a normal half
    const uint32_t r = a - 0x38000000u;         // exponent rebiased from 127 to 15
    uint32_t h = r >> 13;
    const uint32_t rem = r & 0x1fffu;
    h += (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ? 1u : 0u;  // a carry bumps the exponent
    return sign | (uint16_t)h;
  }
  // A subnormal half (or zero): value / 2^-24 rounded to an integer. Below 2^-25 it is 0.
  const uint32_t e = a >> 23;
  if (e < 102) return sign;
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const uint32_t s = 126 - e;  // 14..24
  uint32_t h = m >> s;
  const uint32_t rem = m & ((1u << s) - 1), half = 1u << (s - 1);
  h += (rem > half || (rem == half && (h & 1u))) ? 1u : 0u;  // 0x400 is the smallest normal
  return sign | (uint16_t)h;
}

// Exact (every half is a float); NaN comes out quiet with its payload, as F16C's vcvtph2ps.
float f32_from_fp16(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u));
  if (e == 0) return std::bit_cast<float>(sign | std::bit_cast<uint32_t>((float)m * 0x1p-24f));
  return std::bit_cast<float>(sign | ((e + 112) << 23) | (m << 13));
}

// ---- Q8_0 -----------------------------------------------------------------------------------
// ggml's quantize_row_q8_0_ref, operation for operation (so GGUF files we write hold the same
// bytes llama.cpp would): amax by (a > b ? a : b), d = amax / 127, id = d ? 1/d : 0,
// q = roundf(x * id) (half away from zero), d stored as fp16(d).
void quantize_row_q8_0(BlockQ8_0* out, const float* x, int64_t n) {
  for (int64_t b = 0; b < n / kQ8Block; b++) {
    const float* xb = x + b * kQ8Block;
    float amax = 0.0f;
    for (int j = 0; j < kQ8Block; j++) {
      const float v = std::fabs(xb[j]);
      amax = amax > v ? amax : v;
    }
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].d = fp16_from_f32(d);
    for (int j = 0; j < kQ8Block; j++) out[b].qs[j] = (int8_t)std::roundf(xb[j] * id);
  }
}

void dequantize_row_q8_0(float* out, const BlockQ8_0* in, int64_t n) {
  for (int64_t b = 0; b < n / kQ8Block; b++) {
    const float d = f32_from_fp16(in[b].d);
    for (int j = 0; j < kQ8Block; j++) out[b * kQ8Block + j] = (float)in[b].qs[j] * d;
  }
}

// ---- dispatch -------------------------------------------------------------------------------
namespace {

std::atomic<int> g_isa{-1};  // DecodeIsa, -1 until first use

bool cpu_has(DecodeIsa isa) {
  const CpuInfo& c = cpu_info();
  switch (isa) {
    case DecodeIsa::kPortable: return true;
    case DecodeIsa::kAvx2: return c.avx2 && c.fma && __builtin_cpu_supports("f16c");
    case DecodeIsa::kAvx512Vnni:
      return c.avx512f && c.avx512bw && c.avx512vl && c.avx512_vnni && cpu_has(DecodeIsa::kAvx2);
  }
  return false;
}

DecodeIsa best_isa() {
  if (cpu_has(DecodeIsa::kAvx512Vnni)) return DecodeIsa::kAvx512Vnni;
  if (cpu_has(DecodeIsa::kAvx2)) return DecodeIsa::kAvx2;
  return DecodeIsa::kPortable;
}

DecodeIsa current_isa() {
  int v = g_isa.load(std::memory_order_relaxed);
  if (v < 0) g_isa.store(v = (int)best_isa(), std::memory_order_relaxed);
  return (DecodeIsa)v;
}

inline float finish(float s, const float* o, float beta) { return beta == 0.0f ? s : std::fma(beta, *o, s); }

// The L1 data cache's size (32 KiB where the system does not say): how many weight rows a
// batch-1 tile reads side by side.
int64_t l1d_bytes() {
  static const int64_t l1 = [] {
    const long v = sysconf(_SC_LEVEL1_DCACHE_SIZE);
    return v > 0 ? (int64_t)v : int64_t(32) << 10;
  }();
  return l1;
}

// ---- fp32 -----------------------------------------------------------------------------------
constexpr int kLanes = 16;
// Output columns per OpenMP task: a multiple of every tile width (AVX-512 16, 12, 8, 6, 4, AVX2 6, 4, 3, 1).
constexpr int kColBlockF32 = 48;

inline float tree16(const float* p) {
  float q[8];
  for (int j = 0; j < 8; j++) q[j] = p[j] + p[j + 8];
  for (int j = 0; j < 4; j++) q[j] = q[j] + q[j + 4];
  for (int j = 0; j < 2; j++) q[j] = q[j] + q[j + 2];
  return q[0] + q[1];
}

// bf16 weights: the upper half of an fp32 (a type of its own, so the overloads below tell it from
// IEEE half bits).
struct Bf16 {
  uint16_t bits;
};
static_assert(sizeof(Bf16) == 2);

// A weight element as fp32: f16 weights (IEEE half bits) and bf16 weights widen exactly, so their
// kernels are the fp32 ones on the widened weights, bit for bit.
inline float wval(const float* w, int k) { return w[k]; }
inline float wval(const uint16_t* w, int k) { return f32_from_fp16(w[k]); }
inline float wval(const Bf16* w, int k) { return vmath::bf16_widen(w[k].bits); }

template <typename WT>
inline float tail_f32(float s, const float* x, const WT* w, int k0, int IC) {
  for (int k = k0; k < IC; k++) s = std::fma(x[k], wval(w, k), s);
  return s;
}

template <typename WT>
float dot_f32_portable(const float* x, const WT* w, int IC) {
  float p[kLanes] = {};
  const int K16 = IC - IC % kLanes;
  for (int k = 0; k < K16; k += kLanes)
    for (int j = 0; j < kLanes; j++) p[j] = std::fma(x[k + j], wval(w, k + j), p[j]);
  return tail_f32(tree16(p), x, w, K16, IC);
}

// 16 (8) weights as fp32 lanes: fp32 loaded, IEEE half widened by F16C (exact).
__attribute__((target("avx512f"))) inline __m512 load16(const float* w) { return _mm512_loadu_ps(w); }
__attribute__((target("avx512f"))) inline __m512 load16(const uint16_t* w) {
  return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)w));
}
__attribute__((target("avx512f"))) inline __m512 load16(const Bf16* w) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)w)), 16));
}
__attribute__((target("avx2,f16c"))) inline __m256 load8(const float* w) { return _mm256_loadu_ps(w); }
__attribute__((target("avx2"))) inline __m256 load8(const Bf16* w) {
  return vmath::bf16_widen8(_mm_loadu_si128((const __m128i*)w));
}
__attribute__((target("avx2,f16c"))) inline __m256 load8(const uint16_t* w) {
  return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)w));
}

// One tile: rows [r0, r0+R) x columns [c0, c0+C). Each weight vector is loaded once for R rows.
// While it runs, a tile prefetches its share (row tile rt of nrt) of the next column tile's
// weights, so that memory stays busy through all the row tiles (n = 16, cold weights, 1 thread:
// 7.2 GB/s without prefetch, 8.0 fetching the next tile all in the first row tile, 9.6 spread).
template <typename WT>
using TileOf = void (*)(float* out, int ldo, const float* inp, const WT* W, int IC, int r0, int c0, float beta,
                        int rt, int nrt);

template <int R, int C, typename WT = float>
__attribute__((target("avx512f"))) void tile_f32_avx512(float* out, int ldo, const float* inp, const WT* W,
                                                        int IC, int r0, int c0, float beta, int rt, int nrt) {
  const float* x[R];
  const WT* w[C];
#pragma GCC unroll 16
  for (int r = 0; r < R; r++) x[r] = inp + (int64_t)(r0 + r) * IC;
#pragma GCC unroll 16
  for (int c = 0; c < C; c++) w[c] = W + (int64_t)(c0 + c) * IC;
  __m512 acc[R][C];
#pragma GCC unroll 16
  for (int r = 0; r < R; r++)
#pragma GCC unroll 16
    for (int c = 0; c < C; c++) acc[r][c] = _mm512_setzero_ps();
  const int K16 = IC - IC % kLanes;
  auto pf = [&](int k) { return (int64_t)(rt * K16 + k) / nrt; };
  for (int k = 0; k < K16; k += kLanes) {
    __m512 wv[C];
#pragma GCC unroll 16
    for (int c = 0; c < C; c++) wv[c] = load16(w[c] + k);
#pragma GCC unroll 16
    for (int c = 0; c < C; c++) _mm_prefetch((const char*)(w[c] + (int64_t)C * IC + pf(k)), _MM_HINT_T0);
#pragma GCC unroll 16
    for (int r = 0; r < R; r++) {
      const __m512 xv = _mm512_loadu_ps(x[r] + k);
#pragma GCC unroll 16
      for (int c = 0; c < C; c++) acc[r][c] = _mm512_fmadd_ps(xv, wv[c], acc[r][c]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; r++)
#pragma GCC unroll 16
    for (int c = 0; c < C; c++) {
      const __m512 v = acc[r][c];
      const __m256 h8 = _mm256_add_ps(_mm512_castps512_ps256(v),
                                      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
      const __m128 h4 = _mm_add_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps(h8, 1));
      const __m128 h2 = _mm_add_ps(h4, _mm_movehl_ps(h4, h4));
      const float s = _mm_cvtss_f32(_mm_add_ss(h2, _mm_shuffle_ps(h2, h2, 1)));
      float* o = out + (int64_t)(r0 + r) * ldo + c0 + c;
      *o = finish(tail_f32(s, x[r], w[c], K16, IC), o, beta);
    }
}

template <int R, int C, typename WT = float>
__attribute__((target("avx2,fma,f16c"))) void tile_f32_avx2(float* out, int ldo, const float* inp, const WT* W,
                                                           int IC, int r0, int c0, float beta, int rt, int nrt) {
  const float* x[R];
  const WT* w[C];
#pragma GCC unroll 16
  for (int r = 0; r < R; r++) x[r] = inp + (int64_t)(r0 + r) * IC;
#pragma GCC unroll 16
  for (int c = 0; c < C; c++) w[c] = W + (int64_t)(c0 + c) * IC;
  __m256 lo[R][C], hi[R][C];  // lanes 0-7 and 8-15
#pragma GCC unroll 16
  for (int r = 0; r < R; r++)
#pragma GCC unroll 16
    for (int c = 0; c < C; c++) lo[r][c] = hi[r][c] = _mm256_setzero_ps();
  const int K16 = IC - IC % kLanes;
  auto pf = [&](int k) { return (int64_t)(rt * K16 + k) / nrt; };
  for (int k = 0; k < K16; k += kLanes) {
    __m256 wv[C];
#pragma GCC unroll 16
    for (int c = 0; c < C; c++) wv[c] = load8(w[c] + k);
#pragma GCC unroll 16
    for (int c = 0; c < C; c++) _mm_prefetch((const char*)(w[c] + (int64_t)C * IC + pf(k)), _MM_HINT_T0);
#pragma GCC unroll 16
    for (int r = 0; r < R; r++) {
      const __m256 xv = _mm256_loadu_ps(x[r] + k);
#pragma GCC unroll 16
      for (int c = 0; c < C; c++) lo[r][c] = _mm256_fmadd_ps(xv, wv[c], lo[r][c]);
    }
#pragma GCC unroll 16
    for (int c = 0; c < C; c++) wv[c] = load8(w[c] + k + 8);
#pragma GCC unroll 16
    for (int r = 0; r < R; r++) {
      const __m256 xv = _mm256_loadu_ps(x[r] + k + 8);
#pragma GCC unroll 16
      for (int c = 0; c < C; c++) hi[r][c] = _mm256_fmadd_ps(xv, wv[c], hi[r][c]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; r++)
#pragma GCC unroll 16
    for (int c = 0; c < C; c++) {
      const __m256 h8 = _mm256_add_ps(lo[r][c], hi[r][c]);
      const __m128 h4 = _mm_add_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps(h8, 1));
      const __m128 h2 = _mm_add_ps(h4, _mm_movehl_ps(h4, h4));
      const float s = _mm_cvtss_f32(_mm_add_ss(h2, _mm_shuffle_ps(h2, h2, 1)));
      float* o = out + (int64_t)(r0 + r) * ldo + c0 + c;
      *o = finish(tail_f32(s, x[r], w[c], K16, IC), o, beta);
    }
}

template <typename WT = float>
void tile_f32_portable(float* out, int ldo, const float* inp, const WT* W, int IC, int r0, int c0, float beta,
                       int, int) {
  const float* x = inp + (int64_t)r0 * IC;
  const WT* w = W + (int64_t)c0 * IC;
  float* o = out + (int64_t)r0 * ldo + c0;
  *o = finish(dot_f32_portable(x, w, IC), o, beta);
}

// Tile tables [R-1][C-1].
constexpr int kAvx512RowsF32 = 4, kAvx512ColsF32 = 4;
template <typename WT>
constexpr TileOf<WT> kTilesAvx512[4][4] = {
    {tile_f32_avx512<1, 1, WT>, tile_f32_avx512<1, 2, WT>, tile_f32_avx512<1, 3, WT>, tile_f32_avx512<1, 4, WT>},
    {tile_f32_avx512<2, 1, WT>, tile_f32_avx512<2, 2, WT>, tile_f32_avx512<2, 3, WT>, tile_f32_avx512<2, 4, WT>},
    {tile_f32_avx512<3, 1, WT>, tile_f32_avx512<3, 2, WT>, tile_f32_avx512<3, 3, WT>, tile_f32_avx512<3, 4, WT>},
    {tile_f32_avx512<4, 1, WT>, tile_f32_avx512<4, 2, WT>, tile_f32_avx512<4, 3, WT>, tile_f32_avx512<4, 4, WT>}};
// One or two rows (batch-1 decode) read more weight rows side by side: more loads in flight, and
// the memory keeps up, as long as one tile's weights fit the L1 data cache (a tile prefetches the
// next one's while it runs). Batch 1, cold weights, 1 thread, Zen 5 (48 KiB L1D), GB/s by columns:
//   768 -> 32000:  4: 27, 8: 31.5, 16 (48 KiB a tile): 33          (the streaming probe: 38)
//   2048 -> 768:   4: 29.4, 6 (48 KiB): 30.8, 8: 26.5, 16: 22.2
template <typename WT, int R, int... C>
constexpr std::array<TileOf<WT>, sizeof...(C)> avx512_row_tiles(std::integer_sequence<int, C...>) {
  return {tile_f32_avx512<R, C + 1, WT>...};
}
constexpr int kAvx512Cols1F32 = 16, kAvx512Cols2F32 = 8;
template <typename WT>
constexpr auto kTilesAvx512Row1 = avx512_row_tiles<WT, 1>(std::make_integer_sequence<int, kAvx512Cols1F32>{});
template <typename WT>
constexpr std::array<TileOf<WT>, kAvx512Cols2F32> kTilesAvx512Rows2[2] = {
    avx512_row_tiles<WT, 1>(std::make_integer_sequence<int, kAvx512Cols2F32>{}),
    avx512_row_tiles<WT, 2>(std::make_integer_sequence<int, kAvx512Cols2F32>{})};
// Two rows and more: 12 accumulators of the 16 ymm registers; 2 x 3 beat 3 x 2 (16 = 5 x 3 + 1
// rows, and 13.4 -> 14.9 GB/s at batch 1, before one row had the tiles below)
constexpr int kAvx2RowsF32 = 2, kAvx2ColsF32 = 3;
template <typename WT>
constexpr TileOf<WT> kTilesAvx2[2][3] = {
    {tile_f32_avx2<1, 1, WT>, tile_f32_avx2<1, 2, WT>, tile_f32_avx2<1, 3, WT>},
    {tile_f32_avx2<2, 1, WT>, tile_f32_avx2<2, 2, WT>, tile_f32_avx2<2, 3, WT>}};
// One row (batch-1 decode) reads up to 6 weight rows side by side (12 accumulators), as many as
// fit the L1 data cache, as the AVX-512 row tiles do: more loads in flight than the 2 x 3 tiles.
template <typename WT, int... C>
constexpr std::array<TileOf<WT>, sizeof...(C)> avx2_row_tiles(std::integer_sequence<int, C...>) {
  return {tile_f32_avx2<1, C + 1, WT>...};
}
constexpr int kAvx2Cols1F32 = 6;
template <typename WT>
constexpr auto kTilesAvx2Row1 = avx2_row_tiles<WT>(std::make_integer_sequence<int, kAvx2Cols1F32>{});

// The columns of a wide tile: the most of {16, 12, 8, 6, 4} (divisors of the column block) up to
// `most` whose weights fit the L1 data cache (fp32), or half of it (f16, bf16); 4 when none does.
// f16's 2048 -> 768 at batch 1, cold weights, Zen 5 (48 KiB L1D): 12 columns (all of the L1)
// 21-23 GB/s, 8 (half) 24-26; fp32's best filled it (the table above).
template <typename WT>
int wide_cols(int IC, int most) {
  const int64_t room = sizeof(WT) == sizeof(float) ? l1d_bytes() : l1d_bytes() / 2;
  for (int c : {16, 12, 8, 6})
    if (c <= most && (int64_t)c * IC * (int64_t)sizeof(WT) <= room) return c;
  return 4;
}

// Tiles of RT rows x ct columns (ct divides kColBlockF32); pick(rows, cols) gives the tile.
template <int RT, typename WT, typename Pick>
void run_f32(float* out, int ldo, const float* inp, const WT* W, int n, int IC, int OC, float beta, int ct,
             Pick pick) {
  const int blocks = (OC + kColBlockF32 - 1) / kColBlockF32;
#pragma omp parallel for schedule(dynamic)
  for (int blk = 0; blk < blocks; blk++) {
    const int c1 = std::min(OC, (blk + 1) * kColBlockF32);
    for (int c = blk * kColBlockF32; c < c1; c += ct) {  // columns outer: their weights stay in cache
      const int cw = std::min(ct, c1 - c);
      for (int r = 0, nrt = (n + RT - 1) / RT; r < n; r += RT)
        pick(std::min(RT, n - r), cw)(out, ldo, inp, W, IC, r, c, beta, r / RT, nrt);
    }
  }
}

// ---- Q8_0 -----------------------------------------------------------------------------------
// Output columns per OpenMP task, a multiple of the tiles (AVX-512 16, AVX2 8 columns); rows are
// taken kRowTileQ8 at a time and blocks kChunkQ8 at a time, so the scratch below is fixed-size.
constexpr int kColBlockQ8 = 128, kRowTileQ8 = 16, kChunkQ8 = 64;
// A tile reads 16 (AVX2: 8) weight rows side by side, 34 bytes at a time, which the hardware
// prefetchers follow less well than fp32's 4 rows: while it reads block b of its rows it
// prefetches block b of the next tile's rows (the next tile in the loop). Batch 1, cold weights,
// 1 thread: 9.3 GB/s without, 10.3 prefetching each row 8 blocks ahead, 13.2 this way (fp32:
// 14.6). Prefetches past the matrix's end do not fault.

// Per (row, block) of one chunk: fp32(x.d), and 128 * sum(x.qs) for the AVX-512 path, which
// multiplies (w + 128) as unsigned bytes by x and subtracts it.
struct RowPrepQ8 {
  float xd[kRowTileQ8][kChunkQ8];
  int32_t xs128[kRowTileQ8][kChunkQ8];
};

inline int32_t load_i32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline int32_t block_dot(const int8_t* a, const int8_t* b) {
  int32_t s = 0;
  for (int i = 0; i < kQ8Block; i++) s += (int32_t)a[i] * (int32_t)b[i];
  return s;
}

float dot_q8_portable(const BlockQ8_0* x, const BlockQ8_0* w, int nb) {
  float acc = 0.0f;
  for (int b = 0; b < nb; b++)
    acc = std::fma(f32_from_fp16(w[b].d) * f32_from_fp16(x[b].d), (float)block_dot(x[b].qs, w[b].qs), acc);
  return acc;
}

__attribute__((target("avx2"))) void prep_q8(RowPrepQ8& p, const BlockQ8_0* xq, int nb, int r0, int rh, int b0,
                                             int bn, bool sums) {
  for (int r = 0; r < rh; r++) {
    const BlockQ8_0* x = xq + (int64_t)(r0 + r) * nb + b0;
    for (int b = 0; b < bn; b++) {
      p.xd[r][b] = f32_from_fp16(x[b].d);
      if (!sums) continue;
      // sum of the bytes + 128 each, as four u64 partial sums (sad against zero)
      const __m256i u = _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)x[b].qs), _mm256_set1_epi8((char)0x80));
      const __m256i s = _mm256_sad_epu8(u, _mm256_setzero_si256());
      const __m128i t = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
      const int32_t sum = (int32_t)(_mm_cvtsi128_si64(t) + _mm_extract_epi64(t, 1)) - 128 * kQ8Block;
      p.xs128[r][b] = 128 * sum;
    }
  }
}

// A 16-column tile over blocks [b0, b0+bn) for rows [0, rh) of the prepared chunk, AVX-512 VNNI.
// The 16 columns' 32-byte blocks are transposed so that dword lane j of T[k] holds bytes
// 4k..4k+3 of column j: one vpdpbusd per 4 bytes of x (broadcast) then serves 16 columns, and
// lane j ends with column j's exact int32 block sum, no horizontal adds. vpdpbusd multiplies
// unsigned by signed bytes: T holds w + 128 (0..255, -128 included), x is signed, and
// 128 * sum(x) is subtracted. facc (rh, ldf) accumulates the tile's 16 columns.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) void tile_q8_avx512(
    float* facc, int ldf, const RowPrepQ8& p, const BlockQ8_0* xq, const BlockQ8_0* W, int nb, int r0, int rh,
    int cw, int b0, int bn) {
  const BlockQ8_0* col[16];
  alignas(64) int32_t off[16];
#pragma GCC unroll 16
  for (int j = 0; j < 16; j++) {
    const int c = std::min(j, cw - 1);  // lanes past the edge repeat the last column (not stored)
    col[j] = W + (int64_t)c * nb;
    off[j] = c * nb * (int)sizeof(BlockQ8_0);
  }
  const __m512i goff = _mm512_load_si512(off);
  const __m512i bias = _mm512_set1_epi8((char)0x80);
  for (int b = b0; b < b0 + bn; b++) {
#pragma GCC unroll 16
    for (int j = 0; j < 16; j++) _mm_prefetch((const char*)(col[j] + 16 * nb + b), _MM_HINT_T0);
    __m512i Z[8];
#pragma GCC unroll 16
    for (int j = 0; j < 4; j++) {
      Z[j] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)col[j][b].qs)),
                                _mm256_loadu_si256((const __m256i*)col[j + 4][b].qs), 1);
      Z[j + 4] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)col[j + 8][b].qs)),
                                    _mm256_loadu_si256((const __m256i*)col[j + 12][b].qs), 1);
    }
    __m512i T[8];
#pragma GCC unroll 16
    for (int g = 0; g < 2; g++) {  // 4x4 dword transposes within 128-bit lanes
      const __m512i* z = Z + 4 * g;
      const __m512i t0 = _mm512_unpacklo_epi32(z[0], z[1]), t1 = _mm512_unpackhi_epi32(z[0], z[1]);
      const __m512i t2 = _mm512_unpacklo_epi32(z[2], z[3]), t3 = _mm512_unpackhi_epi32(z[2], z[3]);
      T[4 * g + 0] = _mm512_unpacklo_epi64(t0, t2);
      T[4 * g + 1] = _mm512_unpackhi_epi64(t0, t2);
      T[4 * g + 2] = _mm512_unpacklo_epi64(t1, t3);
      T[4 * g + 3] = _mm512_unpackhi_epi64(t1, t3);
    }
    // T[m] (g=0): lanes [c0-3 dword m, c0-3 dword m+4, c4-7 dword m, c4-7 dword m+4]; T[4+m] the
    // same for c8-15. Gather the 128-bit lanes into dword m and dword m+4 of all 16 columns.
    __m512i D[8];
#pragma GCC unroll 16
    for (int m = 0; m < 4; m++) {
      D[m] = _mm512_xor_si512(_mm512_shuffle_i32x4(T[m], T[4 + m], 0x88), bias);
      D[m + 4] = _mm512_xor_si512(_mm512_shuffle_i32x4(T[m], T[4 + m], 0xdd), bias);
    }
    // the 16 columns' scales: a 4-byte gather at each block's start, the low half kept
    const __m512i g = _mm512_i32gather_epi32(goff, (const void*)(W + b), 1);
    const __m512 wd = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g));
    for (int r = 0; r < rh; r++) {
      const int8_t* xb = xq[(int64_t)(r0 + r) * nb + b].qs;
      __m512i a0 = _mm512_setzero_si512(), a1 = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int k = 0; k < 8; k += 2) {
        a0 = _mm512_dpbusd_epi32(a0, D[k], _mm512_set1_epi32(load_i32(xb + 4 * k)));
        a1 = _mm512_dpbusd_epi32(a1, D[k + 1], _mm512_set1_epi32(load_i32(xb + 4 * k + 4)));
      }
      const __m512i isum = _mm512_sub_epi32(_mm512_add_epi32(a0, a1), _mm512_set1_epi32(p.xs128[r][b - b0]));
      const __m512 s = _mm512_mul_ps(wd, _mm512_set1_ps(p.xd[r][b - b0]));
      float* f = facc + (int64_t)r * ldf;
      _mm512_storeu_ps(f, _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(isum), _mm512_loadu_ps(f)));
    }
  }
}

// An 8-column tile, AVX2: the same transpose (8x8 dwords), then ggml's sign trick per 4 bytes:
// maddubs(|w|, x * sign(w)) (|w| <= 128 unsigned, |x| <= 127, so a pair of products is at most
// 32512: no int16 saturation, -128 in w included), madd by ones to int32.
__attribute__((target("avx2,fma,f16c"))) void tile_q8_avx2(float* facc, int ldf, const RowPrepQ8& p,
                                                          const BlockQ8_0* xq, const BlockQ8_0* W, int nb,
                                                          int r0, int rh, int cw, int b0, int bn) {
  const BlockQ8_0* col[8];
  alignas(32) int32_t off[8];
#pragma GCC unroll 16
  for (int j = 0; j < 8; j++) {
    const int c = std::min(j, cw - 1);
    col[j] = W + (int64_t)c * nb;
    off[j] = c * nb * (int)sizeof(BlockQ8_0);
  }
  const __m256i goff = _mm256_load_si256((const __m256i*)off);
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i lo16 = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1, 0, 1, 4, 5, 8,
                                        9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1);
  for (int b = b0; b < b0 + bn; b++) {
#pragma GCC unroll 16
    for (int j = 0; j < 8; j++) _mm_prefetch((const char*)(col[j] + 8 * nb + b), _MM_HINT_T0);
    __m256i Y[8];
#pragma GCC unroll 16
    for (int j = 0; j < 8; j++) Y[j] = _mm256_loadu_si256((const __m256i*)col[j][b].qs);
    __m256i U[8];
#pragma GCC unroll 16
    for (int g = 0; g < 2; g++) {
      const __m256i* y = Y + 4 * g;
      const __m256i t0 = _mm256_unpacklo_epi32(y[0], y[1]), t1 = _mm256_unpackhi_epi32(y[0], y[1]);
      const __m256i t2 = _mm256_unpacklo_epi32(y[2], y[3]), t3 = _mm256_unpackhi_epi32(y[2], y[3]);
      U[4 * g + 0] = _mm256_unpacklo_epi64(t0, t2);  // [c dword 0 | c dword 4], 4 columns
      U[4 * g + 1] = _mm256_unpackhi_epi64(t0, t2);
      U[4 * g + 2] = _mm256_unpacklo_epi64(t1, t3);
      U[4 * g + 3] = _mm256_unpackhi_epi64(t1, t3);
    }
    __m256i T[8], A[8];
#pragma GCC unroll 16
    for (int m = 0; m < 4; m++) {
      T[m] = _mm256_permute2x128_si256(U[m], U[4 + m], 0x20);
      T[m + 4] = _mm256_permute2x128_si256(U[m], U[4 + m], 0x31);
    }
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) A[k] = _mm256_sign_epi8(T[k], T[k]);
    const __m256i g = _mm256_permute4x64_epi64(
        _mm256_shuffle_epi8(_mm256_i32gather_epi32((const int*)(W + b), goff, 1), lo16), 0x08);
    const __m256 wd = _mm256_cvtph_ps(_mm256_castsi256_si128(g));
    for (int r = 0; r < rh; r++) {
      const int8_t* xb = xq[(int64_t)(r0 + r) * nb + b].qs;
      __m256i a0 = _mm256_setzero_si256(), a1 = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int k = 0; k < 8; k += 2) {
        const __m256i s0 = _mm256_sign_epi8(_mm256_set1_epi32(load_i32(xb + 4 * k)), T[k]);
        const __m256i s1 = _mm256_sign_epi8(_mm256_set1_epi32(load_i32(xb + 4 * k + 4)), T[k + 1]);
        a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(_mm256_maddubs_epi16(A[k], s0), ones));
        a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(_mm256_maddubs_epi16(A[k + 1], s1), ones));
      }
      const __m256 s = _mm256_mul_ps(wd, _mm256_set1_ps(p.xd[r][b - b0]));
      float* f = facc + (int64_t)r * ldf;
      _mm256_storeu_ps(f, _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(_mm256_add_epi32(a0, a1)), _mm256_loadu_ps(f)));
    }
  }
}

template <int CT, typename Tile>
void run_q8(float* out, int ldo, const BlockQ8_0* xq, const BlockQ8_0* Wq, int n, int nb, int OC, float beta,
            bool sums, Tile tile) {
  const int blocks = (OC + kColBlockQ8 - 1) / kColBlockQ8;
#pragma omp parallel for schedule(dynamic)
  for (int blk = 0; blk < blocks; blk++) {
    const int c0 = blk * kColBlockQ8, c1 = std::min(OC, c0 + kColBlockQ8);
    alignas(64) float facc[kRowTileQ8][kColBlockQ8];
    RowPrepQ8 p;
    for (int r0 = 0; r0 < n; r0 += kRowTileQ8) {
      const int rh = std::min(kRowTileQ8, n - r0);
      for (int r = 0; r < rh; r++) std::fill(facc[r], facc[r] + kColBlockQ8, 0.0f);
      for (int b0 = 0; b0 < nb; b0 += kChunkQ8) {
        const int bn = std::min(kChunkQ8, nb - b0);
        prep_q8(p, xq, nb, r0, rh, b0, bn, sums);
        for (int c = c0; c < c1; c += CT)
          tile(&facc[0][c - c0], kColBlockQ8, p, xq, Wq + (int64_t)c * nb, nb, r0, rh, std::min(CT, c1 - c), b0, bn);
      }
      for (int r = 0; r < rh; r++)
        for (int c = c0; c < c1; c++) {
          float* o = out + (int64_t)(r0 + r) * ldo + c;
          *o = finish(facc[r][c - c0], o, beta);
        }
    }
  }
}

}  // namespace

// ---- the entry points -------------------------------------------------------------------------
namespace {
template <typename WT>
void linear_fp(float* out, int ldo, const float* inp, const WT* W, int n, int IC, int OC, float beta) {
  if (n <= 0 || OC <= 0) return;
  switch (current_isa()) {
    case DecodeIsa::kAvx512Vnni:
      if (n == 1)
        return run_f32<1>(out, ldo, inp, W, n, IC, OC, beta, wide_cols<WT>(IC, kAvx512Cols1F32),
                          [](int, int c) { return kTilesAvx512Row1<WT>[c - 1]; });
      if (n == 2)
        return run_f32<2>(out, ldo, inp, W, n, IC, OC, beta, wide_cols<WT>(IC, kAvx512Cols2F32),
                          [](int r, int c) { return kTilesAvx512Rows2<WT>[r - 1][c - 1]; });
      return run_f32<kAvx512RowsF32>(out, ldo, inp, W, n, IC, OC, beta, kAvx512ColsF32,
                                     [](int r, int c) { return kTilesAvx512<WT>[r - 1][c - 1]; });
    case DecodeIsa::kAvx2:
      if (n == 1)
        return run_f32<1>(out, ldo, inp, W, n, IC, OC, beta, wide_cols<WT>(IC, kAvx2Cols1F32),
                          [](int, int c) { return kTilesAvx2Row1<WT>[c - 1]; });
      return run_f32<kAvx2RowsF32>(out, ldo, inp, W, n, IC, OC, beta, kAvx2ColsF32,
                                   [](int r, int c) { return kTilesAvx2<WT>[r - 1][c - 1]; });
    case DecodeIsa::kPortable:
      return run_f32<1>(out, ldo, inp, W, n, IC, OC, beta, 1, [](int, int) { return tile_f32_portable<WT>; });
  }
}
}  // namespace

void decode_linear_f32(float* out, int ldo, const float* inp, const float* W, int n, int IC, int OC,
                       float beta) {
  linear_fp(out, ldo, inp, W, n, IC, OC, beta);
}

void decode_linear_f16(float* out, int ldo, const float* inp, const uint16_t* W, int n, int IC, int OC,
                       float beta) {
  linear_fp(out, ldo, inp, W, n, IC, OC, beta);
}

void decode_linear_bf16(float* out, int ldo, const float* inp, const uint16_t* W, int n, int IC, int OC,
                        float beta) {
  linear_fp(out, ldo, inp, reinterpret_cast<const Bf16*>(W), n, IC, OC, beta);
}

void round_to_bf16(float* out, const float* x, int64_t n) {
  // 16 at a time with vmath's twin of the scalar rounding (the same bits), widened by a shift.
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = vmath::bf16_pack16(_mm256_loadu_ps(x + i), _mm256_loadu_ps(x + i + 8));
    _mm256_storeu_ps(out + i, vmath::bf16_widen8(_mm256_castsi256_si128(h)));
    _mm256_storeu_ps(out + i + 8, vmath::bf16_widen8(_mm256_extracti128_si256(h, 1)));
  }
  for (; i < n; i++) out[i] = bf16_round_f32(x[i]);
}

namespace {
// F16C's vcvtps2ph with round to nearest even is fp16_from_f32 bit for bit (tested at every
// rounding boundary), and vcvtph2ps is exact.
__attribute__((target("avx2,f16c"))) void round_to_fp16_f16c(float* out, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; i++) out[i] = f32_from_fp16(fp16_from_f32(x[i]));
}
}  // namespace

void round_to_fp16(float* out, const float* x, int64_t n) {
  if (current_isa() != DecodeIsa::kPortable) return round_to_fp16_f16c(out, x, n);
  for (int64_t i = 0; i < n; i++) out[i] = f32_from_fp16(fp16_from_f32(x[i]));
}

void decode_linear_q8_0(float* out, int ldo, const BlockQ8_0* xq, const BlockQ8_0* Wq, int n, int IC,
                        int OC, float beta) {
  if (n <= 0 || OC <= 0) return;
  const int nb = IC / kQ8Block;
  switch (current_isa()) {
    case DecodeIsa::kAvx512Vnni: return run_q8<16>(out, ldo, xq, Wq, n, nb, OC, beta, true, tile_q8_avx512);
    case DecodeIsa::kAvx2: return run_q8<8>(out, ldo, xq, Wq, n, nb, OC, beta, false, tile_q8_avx2);
    case DecodeIsa::kPortable: break;
  }
  const int blocks = (OC + kColBlockQ8 - 1) / kColBlockQ8;
#pragma omp parallel for schedule(dynamic)
  for (int blk = 0; blk < blocks; blk++)
    for (int o = blk * kColBlockQ8; o < std::min(OC, (blk + 1) * kColBlockQ8); o++)
      for (int r = 0; r < n; r++) {
        float* d = out + (int64_t)r * ldo + o;
        *d = finish(dot_q8_portable(xq + (int64_t)r * nb, Wq + (int64_t)o * nb, nb), d, beta);
      }
}

// The references: one element at a time, serial, the formulas of the file's opening comment.
namespace {
template <typename WT>
void linear_fp_ref(float* out, int ldo, const float* inp, const WT* W, int n, int IC, int OC, float beta) {
  for (int r = 0; r < n; r++)
    for (int o = 0; o < OC; o++) {
      const float* x = inp + (int64_t)r * IC;
      const WT* w = W + (int64_t)o * IC;
      float p[kLanes] = {};
      for (int k = 0; k < IC - IC % kLanes; k++) p[k % kLanes] = std::fma(x[k], wval(w, k), p[k % kLanes]);
      float s = tree16(p);
      for (int k = IC - IC % kLanes; k < IC; k++) s = std::fma(x[k], wval(w, k), s);
      float* d = out + (int64_t)r * ldo + o;
      *d = beta == 0.0f ? s : std::fma(beta, *d, s);
    }
}
}  // namespace

void decode_linear_f32_ref(float* out, int ldo, const float* inp, const float* W, int n, int IC, int OC,
                           float beta) {
  linear_fp_ref(out, ldo, inp, W, n, IC, OC, beta);
}

void decode_linear_f16_ref(float* out, int ldo, const float* inp, const uint16_t* W, int n, int IC, int OC,
                           float beta) {
  linear_fp_ref(out, ldo, inp, W, n, IC, OC, beta);
}

void decode_linear_bf16_ref(float* out, int ldo, const float* inp, const uint16_t* W, int n, int IC, int OC,
                            float beta) {
  linear_fp_ref(out, ldo, inp, reinterpret_cast<const Bf16*>(W), n, IC, OC, beta);
}

void decode_linear_q8_0_ref(float* out, int ldo, const BlockQ8_0* xq, const BlockQ8_0* Wq, int n, int IC,
                            int OC, float beta) {
  const int nb = IC / kQ8Block;
  for (int r = 0; r < n; r++)
    for (int o = 0; o < OC; o++) {
      float acc = 0.0f;
      for (int b = 0; b < nb; b++) {
        const BlockQ8_0& x = xq[(int64_t)r * nb + b];
        const BlockQ8_0& w = Wq[(int64_t)o * nb + b];
        int32_t isum = 0;
        for (int i = 0; i < kQ8Block; i++) isum += (int32_t)x.qs[i] * (int32_t)w.qs[i];
        acc = std::fma(f32_from_fp16(w.d) * f32_from_fp16(x.d), (float)isum, acc);
      }
      float* d = out + (int64_t)r * ldo + o;
      *d = beta == 0.0f ? acc : std::fma(beta, *d, acc);
    }
}

const char* decode_linear_isa() {
  switch (current_isa()) {
    case DecodeIsa::kAvx512Vnni: return "avx512-vnni";
    case DecodeIsa::kAvx2: return "avx2";
    case DecodeIsa::kPortable: break;
  }
  return "portable";
}

void decode_linear_set_portable(bool portable) {
  g_isa.store((int)(portable ? DecodeIsa::kPortable : best_isa()), std::memory_order_relaxed);
}

DecodeIsa decode_linear_current_isa() { return current_isa(); }

bool decode_linear_set_isa(DecodeIsa isa) {
  if (!cpu_has(isa)) return false;
  g_isa.store((int)isa, std::memory_order_relaxed);
  return true;
}

}  // namespace smelt
