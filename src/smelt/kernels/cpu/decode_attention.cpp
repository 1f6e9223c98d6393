// Single-query attention over a KV cache (decode_attention.hpp has the formula): an AVX2 + FMA +
// F16C path (its value sums on AVX-512 where the CPU has it) and the scalar reference it equals
// bit for bit; the cache's element conversions.
#include "smelt/kernels/decode_attention.hpp"

// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized on their own _mm512_undefined_*()
// (GCC bug 105593, fixed in 13), as in decode_linear.cpp.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "smelt/kernels/cpu/vec_math.hpp"
#include "smelt/kernels/decode_linear.hpp"

namespace smelt {

const char* kv_format_name(KvFormat f) {
  switch (f) {
    case KvFormat::kF32: return "f32";
    case KvFormat::kF16: return "f16";
    case KvFormat::kBf16: return "bf16";
  }
  return "?";
}

int kv_format_bytes(KvFormat f) { return f == KvFormat::kF32 ? 4 : 2; }

namespace {
constexpr int kLanes = 8;

bool vector_path() { return decode_linear_current_isa() != DecodeIsa::kPortable; }

// Element i of a cache row as fp32 (exact for every format).
template <KvFormat F>
inline float widen1(const void* p, int64_t i) {
  if constexpr (F == KvFormat::kF32) {
    return static_cast<const float*>(p)[i];
  } else if constexpr (F == KvFormat::kF16) {
    return f32_from_fp16(static_cast<const uint16_t*>(p)[i]);
  } else {
    return vmath::bf16_widen(static_cast<const uint16_t*>(p)[i]);
  }
}

// Elements i..i+7 as fp32 (vcvtph2ps is exact; bf16 is a shift).
template <KvFormat F>
__attribute__((target("avx2,fma,f16c"))) inline __m256 widen8(const void* p, int64_t i) {
  if constexpr (F == KvFormat::kF32) {
    return _mm256_loadu_ps(static_cast<const float*>(p) + i);
  } else {
    const __m128i h = _mm_loadu_si128((const __m128i*)(static_cast<const uint16_t*>(p) + i));
    if constexpr (F == KvFormat::kF16) return _mm256_cvtph_ps(h);
    else return vmath::bf16_widen8(h);
  }
}

// Positions read ahead of the one in use, in software beside the hardware's prefetchers (a
// 512-token bf16 decode of a 125M model on Zen 5: attention 4.4% of the time with, 5.1% without;
// at 3000 positions, 12 layers' caches from L3, decode_attention_bench: 32 ahead 5-13% faster
// than 16 or 64, 8 the slowest).
constexpr int kAhead = 32;
inline void prefetch_row(const void* base, int64_t elem, int64_t bytes, int esz) {
  const char* p = static_cast<const char*>(base) + elem * esz;
  for (int64_t b = 0; b < bytes; b += 64) _mm_prefetch(p + b, _MM_HINT_T0);
}

// vmath::hsum8's tree, one lane at a time.
inline float tree8(const float* a) {
  const float t0 = a[0] + a[4], t1 = a[1] + a[5], t2 = a[2] + a[6], t3 = a[3] + a[7];
  return (t0 + t2) + (t1 + t3);
}

// ---- the reference ----------------------------------------------------------------------------
template <KvFormat F>
void attend_ref(float* out, const float* q, const void* K, const void* V, int64_t ld, int n, int HS, float scale,
                float* s) {
  const int body = HS - HS % kLanes;
  for (int j = 0; j < n; j++) {
    const int64_t at = (int64_t)j * ld;
    float lane[kLanes] = {};
    for (int e = 0; e < body; e++) lane[e % kLanes] = std::fma(q[e], widen1<F>(K, at + e), lane[e % kLanes]);
    float d = tree8(lane);
    for (int e = body; e < HS; e++) d = std::fma(q[e], widen1<F>(K, at + e), d);
    s[j] = d * scale;
  }
  float m = -std::numeric_limits<float>::infinity();
  for (int j = 0; j < n; j++) m = s[j] > m ? s[j] : m;
  float part[kLanes] = {};
  const int jbody = n - n % kLanes;
  for (int j = 0; j < jbody; j++) part[j % kLanes] += (s[j] = vmath::exp1(s[j] - m));
  float sum = tree8(part);
  for (int j = jbody; j < n; j++) sum += (s[j] = vmath::exp1(s[j] - m));
  const float inv = 1.0f / sum;
  for (int e = 0; e < HS; e++) {
    float acc = 0.0f;
    for (int j = 0; j < n; j++) acc = std::fma(s[j], widen1<F>(V, (int64_t)j * ld + e), acc);
    out[e] = acc * inv;
  }
}

// ---- AVX2 + FMA + F16C ------------------------------------------------------------------------
// A group of query heads that share a kv head (grouped-query attention) reads each key and value
// once for the group: NG heads' dot products (scores) or NG heads' value sums (values) are held in
// registers side by side. Each head's arithmetic is the one-head formula's, in its order: the
// grouping moves loads, not sums.

// Lane i of the result is vmath::hsum8(a[i]), bit for bit, for 8 registers at once: hsum8's tree
// (t = low half + high half, then (t0 + t2) + (t1 + t3)) with the registers transposed on the way,
// 15 shuffles and 7 additions for 8 sums instead of 24 and 24.
__attribute__((target("avx2,fma,f16c"))) inline __m256 hsum8x8(const __m256* a) {
  __m256 t[4];  // [t of a[i] | t of a[i + 4]]
#pragma GCC unroll 4
  for (int i = 0; i < 4; i++)
    t[i] = _mm256_add_ps(_mm256_permute2f128_ps(a[i], a[i + 4], 0x20), _mm256_permute2f128_ps(a[i], a[i + 4], 0x31));
  // [t0 + t2, t1 + t3] of a[0], a[2] | a[4], a[6]; then of a[1], a[3] | a[5], a[7]
  const __m256 u02 = _mm256_add_ps(_mm256_shuffle_ps(t[0], t[2], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm256_shuffle_ps(t[0], t[2], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m256 u13 = _mm256_add_ps(_mm256_shuffle_ps(t[1], t[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm256_shuffle_ps(t[1], t[3], _MM_SHUFFLE(3, 2, 3, 2)));
  // sums of a[0], a[2], a[1], a[3] | a[4], a[6], a[5], a[7], then put in order
  const __m256 r = _mm256_add_ps(_mm256_shuffle_ps(u02, u13, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm256_shuffle_ps(u02, u13, _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm256_permute_ps(r, _MM_SHUFFLE(3, 1, 2, 0));
}

// s[g n + j0 + k] = scale * q_g . k_{j0 + k} for NG heads g (queries q + g HS) and KB keys
// (NG KB <= 8): each key read and widened once for the NG heads, the NG KB sums reduced together.
template <KvFormat F, int NG, int KB>
__attribute__((target("avx2,fma,f16c")))
void scores_tile(float* s, const float* q, const void* K, int64_t ld, int n, int j0, int HS, int body, float scale) {
  static_assert(NG * KB <= 8);
  constexpr int esz = F == KvFormat::kF32 ? 4 : 2;
  __m256 a[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; i++) a[i] = _mm256_setzero_ps();
#pragma GCC unroll 8
  for (int k = 0; k < KB; k++)
    if (j0 + k + kAhead < n) prefetch_row(K, (int64_t)(j0 + k + kAhead) * ld, (int64_t)HS * esz, esz);
  for (int e = 0; e < body; e += kLanes) {
#pragma GCC unroll 8
    for (int k = 0; k < KB; k++) {
      const __m256 x = widen8<F>(K, (int64_t)(j0 + k) * ld + e);
#pragma GCC unroll 8
      for (int g = 0; g < NG; g++)
        a[g * KB + k] = _mm256_fmadd_ps(_mm256_loadu_ps(q + (int64_t)g * HS + e), x, a[g * KB + k]);
    }
  }
  alignas(32) float d[8];
  _mm256_store_ps(d, hsum8x8(a));
#pragma GCC unroll 8
  for (int g = 0; g < NG; g++)
#pragma GCC unroll 8
    for (int k = 0; k < KB; k++) {
      const float* qg = q + (int64_t)g * HS;
      float x = d[g * KB + k];
      for (int e = body; e < HS; e++) x = std::fma(qg[e], widen1<F>(K, (int64_t)(j0 + k) * ld + e), x);
      s[(int64_t)g * n + j0 + k] = x * scale;
    }
}

// NG heads' scores over all n keys: tiles of 8 / NG keys, then one key at a time.
template <KvFormat F, int NG>
__attribute__((target("avx2,fma,f16c")))
void scores_avx2(float* s, const float* q, const void* K, int64_t ld, int n, int HS, float scale) {
  constexpr int KB = 8 / NG;
  const int body = HS - HS % kLanes;
  int j = 0;
  for (; j + KB <= n; j += KB) scores_tile<F, NG, KB>(s, q, K, ld, n, j, HS, body, scale);
  for (; j < n; j++) scores_tile<F, NG, 1>(s, q, K, ld, n, j, HS, body, scale);
}

// out[g HS + e0 .. + 8 NV) = inv[g] * sum_j p[g n + j] v_j[e] for NG heads: NG x NV registers of
// sums, in j order.
template <KvFormat F, int NG, int NV>
__attribute__((target("avx2,fma,f16c")))
void values_avx2(float* out, const float* p, const void* V, int64_t ld, int n, int HS, int64_t e0,
                 const float* inv) {
  __m256 acc[NG][NV];
#pragma GCC unroll 8
  for (int g = 0; g < NG; g++)
#pragma GCC unroll 8
    for (int v = 0; v < NV; v++) acc[g][v] = _mm256_setzero_ps();
  constexpr int esz = F == KvFormat::kF32 ? 4 : 2;
  for (int j = 0; j < n; j++) {
    const int64_t at = (int64_t)j * ld + e0;
    if (j + kAhead < n) prefetch_row(V, at + kAhead * ld, NV * kLanes * esz, esz);
#pragma GCC unroll 8
    for (int v = 0; v < NV; v++) {
      const __m256 x = widen8<F>(V, at + v * kLanes);
#pragma GCC unroll 8
      for (int g = 0; g < NG; g++) acc[g][v] = _mm256_fmadd_ps(_mm256_set1_ps(p[(int64_t)g * n + j]), x, acc[g][v]);
    }
  }
#pragma GCC unroll 8
  for (int g = 0; g < NG; g++)
#pragma GCC unroll 8
    for (int v = 0; v < NV; v++)
      _mm256_storeu_ps(out + (int64_t)g * HS + e0 + v * kLanes, _mm256_mul_ps(acc[g][v], _mm256_set1_ps(inv[g])));
}

// Up to 8 heads' scores in one pass over the keys.
template <KvFormat F>
__attribute__((target("avx2,fma,f16c")))
void scores_group(float* s, const float* q, int NG, const void* K, int64_t ld, int n, int HS, float scale) {
  switch (NG) {
    case 1: return scores_avx2<F, 1>(s, q, K, ld, n, HS, scale);
    case 2: return scores_avx2<F, 2>(s, q, K, ld, n, HS, scale);
    case 3: return scores_avx2<F, 3>(s, q, K, ld, n, HS, scale);
    case 4: return scores_avx2<F, 4>(s, q, K, ld, n, HS, scale);
    case 5: return scores_avx2<F, 5>(s, q, K, ld, n, HS, scale);
    case 6: return scores_avx2<F, 6>(s, q, K, ld, n, HS, scale);
    case 7: return scores_avx2<F, 7>(s, q, K, ld, n, HS, scale);
    default: return scores_avx2<F, 8>(s, q, K, ld, n, HS, scale);
  }
}

// One head's value sums over elements [0, body): 8 registers at a time, then the rest at once.
template <KvFormat F>
__attribute__((target("avx2,fma,f16c")))
void values_one(float* out, const float* p, const void* V, int64_t ld, int n, int HS, int body,
                const float* inv) {
  int e = 0;
  for (; e + 8 * kLanes <= body; e += 8 * kLanes) values_avx2<F, 1, 8>(out, p, V, ld, n, HS, e, inv);
  switch ((body - e) / kLanes) {
    case 7: return values_avx2<F, 1, 7>(out, p, V, ld, n, HS, e, inv);
    case 6: return values_avx2<F, 1, 6>(out, p, V, ld, n, HS, e, inv);
    case 5: return values_avx2<F, 1, 5>(out, p, V, ld, n, HS, e, inv);
    case 4: return values_avx2<F, 1, 4>(out, p, V, ld, n, HS, e, inv);
    case 3: return values_avx2<F, 1, 3>(out, p, V, ld, n, HS, e, inv);
    case 2: return values_avx2<F, 1, 2>(out, p, V, ld, n, HS, e, inv);
    case 1: return values_avx2<F, 1, 1>(out, p, V, ld, n, HS, e, inv);
    default: return;
  }
}

// NG heads (2-4) over [0, body): tiles of NG x NV registers (8 of sums), one register for the rest.
template <KvFormat F, int NG>
__attribute__((target("avx2,fma,f16c")))
void values_several(float* out, const float* p, const void* V, int64_t ld, int n, int HS, int body,
                    const float* inv) {
  constexpr int NV = NG == 2 ? 4 : 2;
  int e = 0;
  for (; e + NV * kLanes <= body; e += NV * kLanes) values_avx2<F, NG, NV>(out, p, V, ld, n, HS, e, inv);
  for (; e < body; e += kLanes) values_avx2<F, NG, 1>(out, p, V, ld, n, HS, e, inv);
}

// Up to 4 heads' value sums in one pass over the values (per tile).
template <KvFormat F>
__attribute__((target("avx2,fma,f16c")))
void values_group(float* out, const float* p, int NG, const void* V, int64_t ld, int n, int HS, int body,
                  const float* inv) {
  switch (NG) {
    case 1: return values_one<F>(out, p, V, ld, n, HS, body, inv);
    case 2: return values_several<F, 2>(out, p, V, ld, n, HS, body, inv);
    case 3: return values_several<F, 3>(out, p, V, ld, n, HS, body, inv);
    default: return values_several<F, 4>(out, p, V, ld, n, HS, body, inv);
  }
}

// ---- AVX-512: the value sums in one pass -------------------------------------------------------
// Each output element of the value pass is its own fma chain in j order, so 16 lanes give the 8-lane
// path's bits. With 32 registers, up to 24 of them sums, a head's whole row (up to 8 x 16
// elements) is held for several heads at once and the values are read in one sequential pass
// (the AVX2 tiles take a 128-byte row in 2-4 strided passes).
constexpr int kWideLanes = 16, kWideSums = 24;

template <KvFormat F>
__attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c"))) inline __m512 widen16(const void* p, int64_t i) {
  if constexpr (F == KvFormat::kF32) {
    return _mm512_loadu_ps(static_cast<const float*>(p) + i);
  } else {
    const __m256i h = _mm256_loadu_si256((const __m256i*)(static_cast<const uint16_t*>(p) + i));
    if constexpr (F == KvFormat::kF16) return _mm512_cvtph_ps(h);
    else return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// out[g HS + e0 .. + 16 NV) = inv[g] * sum_j p[g n + j] v_j[e] for NG heads: NG x NV registers.
template <KvFormat F, int NG, int NV>
__attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))
void values_avx512(float* out, const float* p, const void* V, int64_t ld, int n, int HS, int64_t e0,
                   const float* inv) {
  __m512 acc[NG][NV];
#pragma GCC unroll 8
  for (int g = 0; g < NG; g++)
#pragma GCC unroll 8
    for (int v = 0; v < NV; v++) acc[g][v] = _mm512_setzero_ps();
  constexpr int esz = F == KvFormat::kF32 ? 4 : 2;
  for (int j = 0; j < n; j++) {
    const int64_t at = (int64_t)j * ld + e0;
    if (j + kAhead < n) prefetch_row(V, at + kAhead * ld, NV * kWideLanes * esz, esz);
#pragma GCC unroll 8
    for (int v = 0; v < NV; v++) {
      const __m512 x = widen16<F>(V, at + v * kWideLanes);
#pragma GCC unroll 8
      for (int g = 0; g < NG; g++) acc[g][v] = _mm512_fmadd_ps(_mm512_set1_ps(p[(int64_t)g * n + j]), x, acc[g][v]);
    }
  }
#pragma GCC unroll 8
  for (int g = 0; g < NG; g++)
#pragma GCC unroll 8
    for (int v = 0; v < NV; v++)
      _mm512_storeu_ps(out + (int64_t)g * HS + e0 + v * kWideLanes, _mm512_mul_ps(acc[g][v], _mm512_set1_ps(inv[g])));
}

// NG heads over [0, body): 16-lane tiles of 8, 4, 2 or 1 registers a head (as many as the sums'
// registers allow), then a last 8 elements on the AVX2 tile.
template <KvFormat F, int NG>
__attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))
void values_wide(float* out, const float* p, const void* V, int64_t ld, int n, int HS, int body,
                 const float* inv) {
  const int body16 = body - body % kWideLanes;
  int e = 0;
  while (e < body16) {
    const int left = (body16 - e) / kWideLanes;
    if (NG * 8 <= kWideSums && left >= 8) {
      if constexpr (NG * 8 <= kWideSums) values_avx512<F, NG, 8>(out, p, V, ld, n, HS, e, inv);
      e += 8 * kWideLanes;
    } else if (left >= 4) {
      values_avx512<F, NG, 4>(out, p, V, ld, n, HS, e, inv), e += 4 * kWideLanes;
    } else if (left >= 2) {
      values_avx512<F, NG, 2>(out, p, V, ld, n, HS, e, inv), e += 2 * kWideLanes;
    } else {
      values_avx512<F, NG, 1>(out, p, V, ld, n, HS, e, inv), e += kWideLanes;
    }
  }
  if (e < body) values_avx2<F, NG, 1>(out, p, V, ld, n, HS, e, inv);
}

// G heads in as few passes as the sums' registers allow, the heads spread evenly over the passes.
template <KvFormat F>
__attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))
void values_wide_group(float* out, const float* p, int G, const void* V, int64_t ld, int n, int HS, int body,
                       const float* inv) {
  const int regs = std::max(1, std::min(8, body / kWideLanes));
  const int most = std::max(1, std::min(4, kWideSums / regs)), passes = (G + most - 1) / most;
  for (int g = 0, pass = 0; g < G; pass++) {
    const int NG = (G - g + (passes - pass) - 1) / (passes - pass);
    float* o = out + (int64_t)g * HS;
    const float* pg = p + (int64_t)g * n;
    switch (NG) {
      case 1: values_wide<F, 1>(o, pg, V, ld, n, HS, body, inv + g); break;
      case 2: values_wide<F, 2>(o, pg, V, ld, n, HS, body, inv + g); break;
      case 3: values_wide<F, 3>(o, pg, V, ld, n, HS, body, inv + g); break;
      default: values_wide<F, 4>(o, pg, V, ld, n, HS, body, inv + g); break;
    }
    g += NG;
  }
}

template <KvFormat F>
__attribute__((target("avx2,fma,f16c")))
void attend_avx2(float* out, const float* q, int G, const void* K, const void* V, int64_t ld, int n, int HS,
                 float scale, float* s, bool wide) {
  for (int g = 0; g < G; g += 8)
    scores_group<F>(s + (int64_t)g * n, q + (int64_t)g * HS, std::min(8, G - g), K, ld, n, HS, scale);
  float inv[kMaxGroup];
  for (int g = 0; g < G; g++) {
    float* sg = s + (int64_t)g * n;
    const float m = vmath::max_of(sg, n, -std::numeric_limits<float>::infinity());
    inv[g] = 1.0f / vmath::exp_sub_sum(sg, sg, m, n);
  }
  const int body = HS - HS % kLanes;
  if (wide) {
    values_wide_group<F>(out, s, G, V, ld, n, HS, body, inv);
  } else {
    for (int g = 0; g < G; g += 4)
      values_group<F>(out + (int64_t)g * HS, s + (int64_t)g * n, std::min(4, G - g), V, ld, n, HS, body, inv + g);
  }
  for (int g = 0; g < G; g++) {
    const float* sg = s + (int64_t)g * n;
    for (int e = body; e < HS; e++) {
      float acc = 0.0f;
      for (int j = 0; j < n; j++) acc = std::fma(sg[j], widen1<F>(V, (int64_t)j * ld + e), acc);
      out[(int64_t)g * HS + e] = acc * inv[g];
    }
  }
}

__attribute__((target("avx2,f16c"))) void store_f16c(uint16_t* dst, const float* src, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i*)(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; i++) dst[i] = fp16_from_f32(src[i]);
}
}  // namespace

void kv_store(void* dst, const float* src, int n, KvFormat f) {
  if (f == KvFormat::kF32) {
    std::memcpy(dst, src, sizeof(float) * n);
    return;
  }
  uint16_t* h = static_cast<uint16_t*>(dst);
  if (f == KvFormat::kF16) {
    // vcvtps2ph with round to nearest even is fp16_from_f32 bit for bit (decode_linear.cpp).
    if (vector_path()) return store_f16c(h, src, n);
    for (int i = 0; i < n; i++) h[i] = fp16_from_f32(src[i]);
    return;
  }
  int i = 0;
  for (; i + 16 <= n; i += 16) vmath::bf16_round16(h + i, src + i);  // the scalar rule's bits
  for (; i < n; i++) h[i] = vmath::bf16_round(src[i]);
}

void decode_attention(float* out, const float* q, const void* K, const void* V, KvFormat f, int64_t ld, int n,
                      int HS, float scale, float* scores) {
  decode_attention_group(out, q, 1, K, V, f, ld, n, HS, scale, scores);
}

void decode_attention_group(float* out, const float* q, int G, const void* K, const void* V, KvFormat f,
                            int64_t ld, int n, int HS, float scale, float* scores) {
  const DecodeIsa isa = decode_linear_current_isa();
  if (isa == DecodeIsa::kPortable) {
    for (int g = 0; g < G; g++)
      decode_attention_ref(out + (int64_t)g * HS, q + (int64_t)g * HS, K, V, f, ld, n, HS, scale,
                           scores + (int64_t)g * n);
    return;
  }
  const bool wide = isa == DecodeIsa::kAvx512Vnni;  // AVX-512 F/BW/VL present
  switch (f) {
    case KvFormat::kF32: return attend_avx2<KvFormat::kF32>(out, q, G, K, V, ld, n, HS, scale, scores, wide);
    case KvFormat::kF16: return attend_avx2<KvFormat::kF16>(out, q, G, K, V, ld, n, HS, scale, scores, wide);
    case KvFormat::kBf16: return attend_avx2<KvFormat::kBf16>(out, q, G, K, V, ld, n, HS, scale, scores, wide);
  }
}

void decode_attention_ref(float* out, const float* q, const void* K, const void* V, KvFormat f, int64_t ld,
                          int n, int HS, float scale, float* scores) {
  switch (f) {
    case KvFormat::kF32: return attend_ref<KvFormat::kF32>(out, q, K, V, ld, n, HS, scale, scores);
    case KvFormat::kF16: return attend_ref<KvFormat::kF16>(out, q, K, V, ld, n, HS, scale, scores);
    case KvFormat::kBf16: return attend_ref<KvFormat::kBf16>(out, q, K, V, ld, n, HS, scale, scores);
  }
}

}  // namespace smelt
