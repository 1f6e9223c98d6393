// decode_attention.hpp: the vector path gives the scalar reference's bits in every cache format,
// head size (with and without a tail of 8) and key count; the reference agrees with a softmax
// attention in double over the same (widened) cache; kv_store rounds as fp16_from_f32 and
// bf16_round_f32 do, on both paths; scores far apart do not overflow.
#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "smelt/kernels/decode_attention.hpp"
#include "smelt/kernels/decode_linear.hpp"
#include "smelt/kernels/kernels.hpp"

using namespace smelt;

namespace {

// A cache of n positions, ld elements apart, in format f, filled from values of scale `amp`.
struct Cache {
  std::vector<float> f32;   // what was stored, before rounding
  std::vector<char> bytes;  // as the cache holds it
};

Cache make_cache(KvFormat f, int n, int64_t ld, float amp, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, amp);
  Cache c;
  c.f32.resize((size_t)n * ld);
  for (float& x : c.f32) x = d(g);
  c.bytes.resize(c.f32.size() * kv_format_bytes(f));
  for (int j = 0; j < n; j++)
    kv_store(c.bytes.data() + (size_t)j * ld * kv_format_bytes(f), c.f32.data() + (size_t)j * ld, (int)ld, f);
  return c;
}

// Element i of the cache as the kernel must read it (an independent widening).
double widened(KvFormat f, const Cache& c, int64_t i) {
  if (f == KvFormat::kF32) return c.f32[i];
  uint16_t h;
  std::memcpy(&h, c.bytes.data() + 2 * i, 2);
  if (f == KvFormat::kF16) return f32_from_fp16(h);
  return std::bit_cast<float>((uint32_t)h << 16);
}

// Softmax attention in double over the widened cache.
std::vector<double> attention_double(KvFormat f, const std::vector<float>& q, const Cache& K, const Cache& V,
                                     int64_t off, int64_t ld, int n, int HS, double scale) {
  std::vector<double> s(n), out(HS, 0.0);
  double m = -INFINITY, sum = 0;
  for (int j = 0; j < n; j++) {
    double d = 0;
    for (int e = 0; e < HS; e++) d += (double)q[e] * widened(f, K, off + (int64_t)j * ld + e);
    s[j] = d * scale;
    m = std::max(m, s[j]);
  }
  for (int j = 0; j < n; j++) sum += (s[j] = std::exp(s[j] - m));
  for (int j = 0; j < n; j++)
    for (int e = 0; e < HS; e++) out[e] += s[j] / sum * widened(f, V, off + (int64_t)j * ld + e);
  return out;
}

const KvFormat kFormats[] = {KvFormat::kF32, KvFormat::kF16, KvFormat::kBf16};

}  // namespace

// Every format; head sizes with and without a tail of 8, and every count of 8-wide registers the
// value pass can end on (1 to 7 after chunks of 64: 200, 80, 24, 96, 40, 112, 120); key counts
// around 8; a head that is not the first in its row (ld > HS, offset).
TEST(DecodeAttention, VectorPathIsTheReferenceBitForBitAndNearDouble) {
  ASSERT_NE(decode_linear_current_isa(), DecodeIsa::kPortable) << "this CPU has no AVX2 + FMA + F16C";
  int cases = 0;
  for (KvFormat f : kFormats)
    for (int HS : {4, 8, 12, 24, 40, 64, 80, 96, 112, 120, 128, 200})
      for (int n : {1, 7, 8, 9, 33, 300}) {
        const int heads = 3, ld = heads * HS, head = 1;
        const int64_t off = (int64_t)head * HS;
        const Cache K = make_cache(f, n, ld, 1.0f, 11 + HS + n), V = make_cache(f, n, ld, 2.0f, 97 + HS * n);
        std::vector<float> q(HS);
        std::mt19937 g(HS * 131 + n);
        std::normal_distribution<float> d(0.0f, 1.5f);
        for (float& x : q) x = d(g);
        const float scale = 1.0f / std::sqrt((float)HS);
        const int64_t esz = kv_format_bytes(f);
        std::vector<float> got(HS, NAN), ref(HS, NAN), s1(n), s2(n);
        decode_attention(got.data(), q.data(), K.bytes.data() + off * esz, V.bytes.data() + off * esz, f, ld, n, HS,
                         scale, s1.data());
        decode_attention_ref(ref.data(), q.data(), K.bytes.data() + off * esz, V.bytes.data() + off * esz, f, ld, n,
                             HS, scale, s2.data());
        const std::vector<double> want = attention_double(f, q, K, V, off, ld, n, HS, scale);
        for (int e = 0; e < HS; e++) {
          ASSERT_EQ(std::bit_cast<uint32_t>(got[e]), std::bit_cast<uint32_t>(ref[e]))
              << kv_format_name(f) << " HS " << HS << " n " << n << " element " << e;
          // fp32 sums of n terms of size ~|v|: a few ulp of the values' scale per term
          ASSERT_NEAR(ref[e], want[e], 2e-6 * 2.0 * (4 + std::sqrt((double)n) + HS / 16.0))
              << kv_format_name(f) << " HS " << HS << " n " << n << " element " << e;
        }
        cases++;
      }
  EXPECT_EQ(cases, 3 * 12 * 6);
}

// A group of query heads sharing one kv head: each head's output is the one-head reference's, bit
// for bit, on the CPU's vector path, on AVX2's and on the portable path, for group sizes that fill
// the score pass's chunks of 8 heads and the value pass's chunks and end on every remainder, and
// head sizes that end the value tiles (8 or 16 lanes, 1-8 registers) on each register count, and
// key counts that end the score pass's tiles of 8 / G keys on a remainder (9, 70) or leave only
// the one-key tail (1).
TEST(DecodeAttention, GroupIsEachHeadAloneBitForBit) {
  const DecodeIsa own = decode_linear_current_isa();
  ASSERT_NE(own, DecodeIsa::kPortable) << "this CPU has no AVX2 + FMA + F16C";
  int cases = 0;
  // the CPU's own path (AVX-512's one-pass value sums where it has them), then AVX2's tiles
  for (DecodeIsa isa : {own, DecodeIsa::kAvx2})
    for (KvFormat f : kFormats)
      for (int HS : {8, 12, 16, 24, 40, 48, 64, 72, 80, 96, 128, 144, 200})
        for (int G : {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 17})
          for (int n : {1, 9, 70}) {
            const int kv_heads = 2, ld = kv_heads * HS;
            const int64_t off = HS, esz = kv_format_bytes(f);  // the second kv head
            const Cache K = make_cache(f, n, ld, 1.0f, 5 + HS + G), V = make_cache(f, n, ld, 2.0f, 7 + HS * G + n);
            const void* k = K.bytes.data() + off * esz;
            const void* v = V.bytes.data() + off * esz;
            std::vector<float> q((size_t)G * HS);
            std::mt19937 g(HS * 17 + G * 3 + n);
            std::normal_distribution<float> d(0.0f, 1.5f);
            for (float& x : q) x = d(g);
            const float scale = 1.0f / std::sqrt((float)HS);
            std::vector<float> got((size_t)G * HS, NAN), port((size_t)G * HS, NAN), ref(HS), s((size_t)G * n), s1(n);
            ASSERT_TRUE(decode_linear_set_isa(isa));
            decode_attention_group(got.data(), q.data(), G, k, v, f, ld, n, HS, scale, s.data());
            decode_linear_set_portable(true);
            decode_attention_group(port.data(), q.data(), G, k, v, f, ld, n, HS, scale, s.data());
            decode_linear_set_portable(false);
            ASSERT_TRUE(decode_linear_set_isa(own));
            for (int h = 0; h < G; h++) {
              decode_attention_ref(ref.data(), q.data() + (size_t)h * HS, k, v, f, ld, n, HS, scale, s1.data());
              for (int e = 0; e < HS; e++) {
                ASSERT_EQ(std::bit_cast<uint32_t>(got[(size_t)h * HS + e]), std::bit_cast<uint32_t>(ref[e]))
                    << decode_linear_isa() << " " << kv_format_name(f) << " HS " << HS << " G " << G << " n " << n
                    << " head " << h << " element " << e;
                ASSERT_EQ(std::bit_cast<uint32_t>(port[(size_t)h * HS + e]), std::bit_cast<uint32_t>(ref[e]))
                    << "portable " << kv_format_name(f) << " HS " << HS << " G " << G << " head " << h;
              }
            }
            cases++;
          }
  EXPECT_EQ(cases, 2 * 3 * 13 * 11 * 3);
}

// The portable dispatch runs the reference; both paths store the same cache bytes.
TEST(DecodeAttention, PortablePathAndStoresAgree) {
  std::vector<float> x;
  std::mt19937 g(5);
  std::normal_distribution<float> d(0.0f, 3.0f);
  for (int i = 0; i < 997; i++) x.push_back(d(g));
  // rounding ties, subnormals of both formats, huge values, signed zero, infinities
  for (float v : {0.0f, -0.0f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 1.0f + 1.0f / 256, 1.0f + 3.0f / 256,
                  6.0e-8f, 3.0e-5f, 1.0e-39f, 65504.0f, 65520.0f, 1e30f, INFINITY, -INFINITY})
    x.push_back(v);
  const int n = (int)x.size();
  for (KvFormat f : {KvFormat::kF16, KvFormat::kBf16}) {
    std::vector<uint16_t> vec(n), port(n);
    kv_store(vec.data(), x.data(), n, f);
    decode_linear_set_portable(true);
    kv_store(port.data(), x.data(), n, f);
    decode_linear_set_portable(false);
    for (int i = 0; i < n; i++) {
      const uint16_t want = f == KvFormat::kF16 ? fp16_from_f32(x[i])
                                                : (uint16_t)(std::bit_cast<uint32_t>(bf16_round_f32(x[i])) >> 16);
      ASSERT_EQ(vec[i], want) << kv_format_name(f) << " value " << x[i];
      ASSERT_EQ(port[i], want) << kv_format_name(f) << " value " << x[i];
    }
  }
  const int HS = 64, len = 40;
  const Cache K = make_cache(KvFormat::kF16, len, HS, 1.0f, 1), V = make_cache(KvFormat::kF16, len, HS, 1.0f, 2);
  std::vector<float> q(HS, 0.3f), a(HS), b(HS), s(len);
  decode_linear_set_portable(true);
  decode_attention(a.data(), q.data(), K.bytes.data(), V.bytes.data(), KvFormat::kF16, HS, len, HS, 0.125f, s.data());
  decode_linear_set_portable(false);
  decode_attention_ref(b.data(), q.data(), K.bytes.data(), V.bytes.data(), KvFormat::kF16, HS, len, HS, 0.125f,
                       s.data());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), sizeof(float) * HS));
}

// Scores hundreds apart: exp of the raw scores would overflow fp32; the result is the value of
// the one key that dominates.
TEST(DecodeAttention, FarApartScoresPickTheLargest) {
  const int HS = 16, n = 20;
  std::vector<float> K((size_t)n * HS, 0.0f), V((size_t)n * HS), q(HS, 0.0f), out(HS), s(n);
  for (int j = 0; j < n; j++) {
    K[(size_t)j * HS] = (float)(j * 40 % 700);  // key 17 scores 680, the next 640
    for (int e = 0; e < HS; e++) V[(size_t)j * HS + e] = (float)(j * 100 + e);
  }
  q[0] = 1.0f;
  decode_attention(out.data(), q.data(), K.data(), V.data(), KvFormat::kF32, HS, n, HS, 1.0f, s.data());
  for (int e = 0; e < HS; e++) EXPECT_EQ(out[e], (float)(17 * 100 + e)) << e;
}
