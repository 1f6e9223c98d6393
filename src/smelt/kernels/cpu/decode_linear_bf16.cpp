// Decode-time linear layers on bf16 weights and bf16 inputs (decode_linear.hpp): half the bytes
// of fp32, no rounding in the arithmetic beyond fp32's. A bf16 is the upper half of an fp32, so
// it widens exactly with a shift (the even element of a 32-bit pair) or a mask (the odd one): a
// 64-byte line of 32 weights becomes two fp32 vectors in two integer operations, fewer than F16C's
// conversions, and the products then run on the fp32 FMAs.
//
// One formula per output element, evaluated alike by every path (AVX-512, AVX2, portable, _ref)
// whatever tile the element falls in, n or the thread count (batch invariant):
//
//  bf16, K32 = IC - IC % 32, wid(b) = the fp32 whose bits are b << 16:
//    p[j] = 0, then for k = j, j+32, ... < K32:  p[j] = fma(wid(x[k]), wid(w[k]), p[j])  (j = 0..31)
//    q[i] = p[2i] + p[2i+1]  (i = 0..15),  s = tree16(q)  (decode_linear_internal.hpp)
//    for k = K32 .. IC-1:                        s = fma(wid(x[k]), wid(w[k]), s)
//  out = beta == 0 ? s : fma(beta, out, s)
//
// In registers, p[2i] is lane i of the "even" accumulator (the line's 32-bit words shifted left
// by 16) and p[2i+1] lane i of the "odd" one (the words masked to their upper half).
// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized on their own _mm512_undefined_*()
// (GCC bug 105593, fixed in 13); silenced for the header, as in decode_linear.cpp.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <utility>

#include "smelt/kernels/cpu/decode_linear_internal.hpp"
#include "smelt/kernels/decode_linear.hpp"

namespace smelt {

using namespace decode_detail;

namespace {

constexpr int kPair = 32;     // K elements per step: one 64-byte line of bf16
constexpr int kColBlock = 48;  // output columns per OpenMP task: a multiple of every tile width

inline float wid(uint16_t b) { return std::bit_cast<float>((uint32_t)b << 16); }

inline float tail(float s, const uint16_t* x, const uint16_t* w, int k0, int IC) {
  for (int k = k0; k < IC; k++) s = std::fma(wid(x[k]), wid(w[k]), s);
  return s;
}

float dot_portable(const uint16_t* x, const uint16_t* w, int IC) {
  float p[kPair] = {}, q[kLanes];
  const int K32 = IC - IC % kPair;
  for (int k = 0; k < K32; k += kPair)
    for (int j = 0; j < kPair; j++) p[j] = std::fma(wid(x[k + j]), wid(w[k + j]), p[j]);
  for (int i = 0; i < kLanes; i++) q[i] = p[2 * i] + p[2 * i + 1];
  return tail(tree16(q), x, w, K32, IC);
}

using Tile = void (*)(float* out, int ldo, const uint16_t* inp, const uint16_t* W, int IC, int r0, int c0,
                      float beta, int rt, int nrt);

// One tile: rows [r0, r0+R) x weight rows [c0, c0+C), each weight line loaded once for R rows.
// While it runs it prefetches its share (row tile rt of nrt) of the next column tile's weights, as
// the fp32 tiles do (decode_linear.cpp).
template <int R, int C>
__attribute__((target("avx512f,avx512bw"))) void tile_avx512(float* out, int ldo, const uint16_t* inp,
                                                             const uint16_t* W, int IC, int r0, int c0, float beta,
                                                             int rt, int nrt) {
  const uint16_t* x[R];
  const uint16_t* w[C];
#pragma GCC unroll 16
  for (int r = 0; r < R; r++) x[r] = inp + (int64_t)(r0 + r) * IC;
#pragma GCC unroll 16
  for (int c = 0; c < C; c++) w[c] = W + (int64_t)(c0 + c) * IC;
  __m512 ae[R][C], ao[R][C];
#pragma GCC unroll 16
  for (int r = 0; r < R; r++)
#pragma GCC unroll 16
    for (int c = 0; c < C; c++) ae[r][c] = ao[r][c] = _mm512_setzero_ps();
  const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
  const int K32 = IC - IC % kPair;
  for (int k = 0; k < K32; k += kPair) {
    const int64_t ahead = (int64_t)C * IC + (int64_t)(rt * K32 + k) / nrt;
#pragma GCC unroll 16
    for (int c = 0; c < C; c++) _mm_prefetch((const char*)(w[c] + ahead), _MM_HINT_T0);
    __m512 xe[R], xo[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; r++) {
      const __m512i v = _mm512_loadu_si512(x[r] + k);
      xe[r] = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
      xo[r] = _mm512_castsi512_ps(_mm512_and_si512(v, hi));
    }
#pragma GCC unroll 16
    for (int c = 0; c < C; c++) {
      const __m512i v = _mm512_loadu_si512(w[c] + k);
      const __m512 we = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
      const __m512 wo = _mm512_castsi512_ps(_mm512_and_si512(v, hi));
#pragma GCC unroll 16
      for (int r = 0; r < R; r++) {
        ae[r][c] = _mm512_fmadd_ps(xe[r], we, ae[r][c]);
        ao[r][c] = _mm512_fmadd_ps(xo[r], wo, ao[r][c]);
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; r++)
#pragma GCC unroll 16
    for (int c = 0; c < C; c++) {
      const __m512 v = _mm512_add_ps(ae[r][c], ao[r][c]);  // q[i] = p[2i] + p[2i+1]
      const __m256 h8 = _mm256_add_ps(_mm512_castps512_ps256(v),
                                      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
      const __m128 h4 = _mm_add_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps(h8, 1));
      const __m128 h2 = _mm_add_ps(h4, _mm_movehl_ps(h4, h4));
      const float s = _mm_cvtss_f32(_mm_add_ss(h2, _mm_shuffle_ps(h2, h2, 1)));
      float* o = out + (int64_t)(r0 + r) * ldo + c0 + c;
      *o = finish(tail(s, x[r], w[c], K32, IC), o, beta);
    }
}

// AVX2: a line is two halves of 16 bf16; half h's even and odd words give lanes 8h..8h+7 of the
// even and odd sums. 4 accumulators per (row, weight row): one row, up to 2 weight rows.
template <int C>
__attribute__((target("avx2,fma"))) void tile_avx2(float* out, int ldo, const uint16_t* inp, const uint16_t* W,
                                                   int IC, int r0, int c0, float beta, int rt, int nrt) {
  const uint16_t* x = inp + (int64_t)r0 * IC;
  const uint16_t* w[C];
#pragma GCC unroll 4
  for (int c = 0; c < C; c++) w[c] = W + (int64_t)(c0 + c) * IC;
  __m256 ae[C][2], ao[C][2];
#pragma GCC unroll 4
  for (int c = 0; c < C; c++) ae[c][0] = ae[c][1] = ao[c][0] = ao[c][1] = _mm256_setzero_ps();
  const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
  const int K32 = IC - IC % kPair;
  for (int k = 0; k < K32; k += kPair) {
    const int64_t ahead = (int64_t)C * IC + (int64_t)(rt * K32 + k) / nrt;
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) _mm_prefetch((const char*)(w[c] + ahead), _MM_HINT_T0);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
      const __m256i xv = _mm256_loadu_si256((const __m256i*)(x + k + 16 * h));
      const __m256 xe = _mm256_castsi256_ps(_mm256_slli_epi32(xv, 16));
      const __m256 xo = _mm256_castsi256_ps(_mm256_and_si256(xv, hi));
#pragma GCC unroll 4
      for (int c = 0; c < C; c++) {
        const __m256i v = _mm256_loadu_si256((const __m256i*)(w[c] + k + 16 * h));
        ae[c][h] = _mm256_fmadd_ps(xe, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)), ae[c][h]);
        ao[c][h] = _mm256_fmadd_ps(xo, _mm256_castsi256_ps(_mm256_and_si256(v, hi)), ao[c][h]);
      }
    }
  }
#pragma GCC unroll 4
  for (int c = 0; c < C; c++) {
    const __m256 lo8 = _mm256_add_ps(ae[c][0], ao[c][0]), hi8 = _mm256_add_ps(ae[c][1], ao[c][1]);
    const __m256 h8 = _mm256_add_ps(lo8, hi8);
    const __m128 h4 = _mm_add_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps(h8, 1));
    const __m128 h2 = _mm_add_ps(h4, _mm_movehl_ps(h4, h4));
    const float s = _mm_cvtss_f32(_mm_add_ss(h2, _mm_shuffle_ps(h2, h2, 1)));
    float* o = out + (int64_t)r0 * ldo + c0 + c;
    *o = finish(tail(s, x, w[c], K32, IC), o, beta);
  }
}

void tile_portable(float* out, int ldo, const uint16_t* inp, const uint16_t* W, int IC, int r0, int c0, float beta,
                   int, int) {
  float* o = out + (int64_t)r0 * ldo + c0;
  *o = finish(dot_portable(inp + (int64_t)r0 * IC, W + (int64_t)c0 * IC, IC), o, beta);
}

// Tile tables: [columns - 1], [rows - 1][columns - 1].
template <int R, int... C>
constexpr std::array<Tile, sizeof...(C)> avx512_tiles(std::integer_sequence<int, C...>) {
  return {tile_avx512<R, C + 1>...};
}
// One row: up to 12 weight rows side by side (24 accumulators), as many as fit the L1 data cache
// (more loads in flight: decode_linear.cpp measured the same for fp32); two rows: 6; more: 4 x 2.
constexpr int kCols1 = 12, kCols2 = 6, kRowsN = 4, kColsN = 2;
constexpr auto kTiles1 = avx512_tiles<1>(std::make_integer_sequence<int, kCols1>{});
constexpr std::array<Tile, kCols2> kTiles2[2] = {avx512_tiles<1>(std::make_integer_sequence<int, kCols2>{}),
                                                 avx512_tiles<2>(std::make_integer_sequence<int, kCols2>{})};
constexpr std::array<Tile, kColsN> kTilesN[kRowsN] = {
    avx512_tiles<1>(std::make_integer_sequence<int, kColsN>{}),
    avx512_tiles<2>(std::make_integer_sequence<int, kColsN>{}),
    avx512_tiles<3>(std::make_integer_sequence<int, kColsN>{}),
    avx512_tiles<4>(std::make_integer_sequence<int, kColsN>{})};
constexpr Tile kTilesAvx2[2] = {tile_avx2<1>, tile_avx2<2>};

// Weight rows of a one-row tile: the most of {12, 8, 6, 4} up to `most` whose lines fit half the
// L1 data cache, the other half holding the next tile's prefetched lines. Batch 1, cold weights,
// 1 thread, Zen 5 (48 KiB L1D), 2048 -> 768: 12 rows (all of the L1) 18.6 GB/s, 6 rows (half)
// 24.7, 4 rows 23.5; 768 inputs keep 12 (18 KiB).
int wide_cols(int IC, int most) {
  for (int c : {12, 8, 6})
    if (c <= most && (int64_t)c * IC * 2 <= l1d_bytes() / 2) return c;
  return 4;
}

// Tiles of RT rows x ct weight rows (ct divides kColBlock); pick(rows, cols) gives the tile.
template <int RT, typename Pick>
void run(float* out, int ldo, const uint16_t* inp, const uint16_t* W, int n, int IC, int OC, float beta, int ct,
         Pick pick) {
  const int blocks = (OC + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(dynamic)
  for (int blk = 0; blk < blocks; blk++) {
    const int c1 = std::min(OC, (blk + 1) * kColBlock);
    for (int c = blk * kColBlock; c < c1; c += ct) {  // columns outer: their weights stay in cache
      const int cw = std::min(ct, c1 - c);
      for (int r = 0, nrt = (n + RT - 1) / RT; r < n; r += RT)
        pick(std::min(RT, n - r), cw)(out, ldo, inp, W, IC, r, c, beta, r / RT, nrt);
    }
  }
}

}  // namespace

void decode_linear_bf16(float* out, int ldo, const uint16_t* inp, const uint16_t* W, int n, int IC, int OC,
                        float beta) {
  if (n <= 0 || OC <= 0) return;
  switch (current_isa()) {
    case DecodeIsa::kAvx512Vnni:
      if (n == 1)
        return run<1>(out, ldo, inp, W, n, IC, OC, beta, wide_cols(IC, kCols1),
                      [](int, int c) { return kTiles1[c - 1]; });
      if (n == 2)
        return run<2>(out, ldo, inp, W, n, IC, OC, beta, kCols2,
                      [](int r, int c) { return kTiles2[r - 1][c - 1]; });
      return run<kRowsN>(out, ldo, inp, W, n, IC, OC, beta, kColsN,
                         [](int r, int c) { return kTilesN[r - 1][c - 1]; });
    case DecodeIsa::kAvx2:
      return run<1>(out, ldo, inp, W, n, IC, OC, beta, 2, [](int, int c) { return kTilesAvx2[c - 1]; });
    case DecodeIsa::kPortable:
      return run<1>(out, ldo, inp, W, n, IC, OC, beta, 1, [](int, int) { return tile_portable; });
  }
}

// The reference: one element at a time, serial, the formula of the opening comment.
void decode_linear_bf16_ref(float* out, int ldo, const uint16_t* inp, const uint16_t* W, int n, int IC, int OC,
                            float beta) {
  for (int r = 0; r < n; r++)
    for (int o = 0; o < OC; o++) {
      const uint16_t* x = inp + (int64_t)r * IC;
      const uint16_t* w = W + (int64_t)o * IC;
      float p[kPair] = {}, q[kLanes];
      const int K32 = IC - IC % kPair;
      for (int k = 0; k < K32; k++) p[k % kPair] = std::fma(wid(x[k]), wid(w[k]), p[k % kPair]);
      for (int i = 0; i < kLanes; i++) q[i] = p[2 * i] + p[2 * i + 1];
      float s = tree16(q);
      for (int k = K32; k < IC; k++) s = std::fma(wid(x[k]), wid(w[k]), s);
      float* d = out + (int64_t)r * ldo + o;
      *d = beta == 0.0f ? s : std::fma(beta, *d, s);
    }
}

}  // namespace smelt
