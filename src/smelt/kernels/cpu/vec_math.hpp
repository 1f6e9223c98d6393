// exp for the CPU kernels, 8 lanes at a time (AVX2 + FMA) and a scalar twin that gives the same
// bits, so an element's value never depends on whether it fell in a vector or in a tail.
// Cephes expf (range reduction by ln 2 in two parts, degree-6 polynomial): within 2 ulp of
// std::exp on [-87.3, 88]; below -87.3 (under FLT_MIN, e.g. -inf from a mask) it returns 0, above
// 88 it saturates at e^88 (finite).
// glibc's std::exp is scalar here (no -ffast-math), and softmax, cross-entropy over the
// vocabulary and SwiGLU call it ~3e8 times a step on the small config. Not a general libm.
#pragma once
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

namespace smelt::vmath {

constexpr float kExpHi = 88.0f, kExpLo = -87.3365447504f;  // e^kExpLo = FLT_MIN; e^88 < FLT_MAX
constexpr float kLog2e = 1.44269504088896341f, kC1 = 0.693359375f, kC2 = -2.12194440e-4f;
constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f,
                kP3 = 4.1665795894e-2f, kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;

inline __m256 exp8(__m256 x) {
  __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(kExpLo), _CMP_LT_OQ);  // also -inf
  x = _mm256_min_ps(x, _mm256_set1_ps(kExpHi));
  x = _mm256_max_ps(x, _mm256_set1_ps(kExpLo));
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kC1), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kC2), r);
  __m256 p = _mm256_set1_ps(kP0);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP1));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP5));
  __m256 r2 = _mm256_mul_ps(r, r);
  p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  return _mm256_andnot_ps(under, y);
}

// The same operations one lane at a time (fmaf is the exactly rounded fused multiply-add, as
// vfmadd; nearbyintf rounds half to even, as _mm256_round_ps).
inline float exp1(float x) {
  if (!(x >= kExpLo)) return 0.0f;  // below FLT_MIN, -inf (NaN also gives 0)
  x = x < kExpHi ? x : kExpHi;
  float n = std::nearbyintf(x * kLog2e);
  float r = std::fmaf(-n, kC1, x);
  r = std::fmaf(-n, kC2, r);
  float p = kP0;
  p = std::fmaf(p, r, kP1);
  p = std::fmaf(p, r, kP2);
  p = std::fmaf(p, r, kP3);
  p = std::fmaf(p, r, kP4);
  p = std::fmaf(p, r, kP5);
  float r2 = r * r;
  p = std::fmaf(p, r2, r + 1.0f);
  int32_t bits = ((int32_t)n + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return p * scale;
}

// Horizontal sum of 8 lanes in a fixed order.
inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float hmax8(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// out[i] = exp(x[i] - sub) for i < n; returns their sum (8 lane partial sums, then the tail, in
// a fixed order). out may equal x.
inline float exp_sub_sum(float* out, const float* x, float sub, int n) {
  __m256 acc = _mm256_setzero_ps(), vs = _mm256_set1_ps(sub);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vs));
    _mm256_storeu_ps(out + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  float s = hsum8(acc);
  for (; i < n; i++) {
    out[i] = exp1(x[i] - sub);
    s += out[i];
  }
  return s;
}

// sum of exp(x[i] - sub) without storing.
inline float exp_sub_sum(const float* x, float sub, int n) {
  __m256 acc = _mm256_setzero_ps(), vs = _mm256_set1_ps(sub);
  int i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_add_ps(acc, exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vs)));
  float s = hsum8(acc);
  for (; i < n; i++) s += exp1(x[i] - sub);
  return s;
}

// max of x[0..n) (n >= 1), seeded with `init`.
inline float max_of(const float* x, int n, float init) {
  __m256 m = _mm256_set1_ps(init);
  int i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
  float r = hmax8(m);
  for (; i < n; i++) r = x[i] > r ? x[i] : r;
  return r;
}

// fp32 -> bf16, round to nearest with ties to even; a NaN stays a (quiet) NaN. The scalar rule and
// its 16-wide AVX2 twin give the same bits (tested), so a value never depends on the tail.
inline uint16_t bf16_round(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
// 16 floats (two registers) -> 16 bf16 in one register, in order.
inline __m256i bf16_pack16(__m256 lo, __m256 hi) {
  const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  const __m256i quiet = _mm256_set1_epi32(0x40);
  __m256i h[2];
  const __m256 in[2] = {lo, hi};
  for (int k = 0; k < 2; k++) {
    __m256i u = _mm256_castps_si256(in[k]);
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(bias, _mm256_and_si256(_mm256_srli_epi32(u, 16), one)));
    r = _mm256_srli_epi32(r, 16);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
    __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), quiet);
    h[k] = _mm256_blendv_epi8(r, q, nan);
  }
  // packus works within 128-bit lanes: put the four 64-bit quarters back in order.
  return _mm256_permute4x64_epi64(_mm256_packus_epi32(h[0], h[1]), 0xD8);
}
inline void bf16_round16(uint16_t* out, const float* inp) {
  _mm256_storeu_si256((__m256i*)out, bf16_pack16(_mm256_loadu_ps(inp), _mm256_loadu_ps(inp + 8)));
}

// bf16 -> fp32, exact (a bf16 is the upper half of an fp32): one value, and 8 held in a register.
inline float bf16_widen(uint16_t h) {
  const uint32_t u = (uint32_t)h << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline __m256 bf16_widen8(__m128i h) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

}  // namespace smelt::vmath
