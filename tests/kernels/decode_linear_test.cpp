// decode_linear.hpp: fp16 conversion against F16C (every half, every rounding boundary), Q8_0
// quantization against a transcription of ggml's reference and hand-computed blocks, and the
// decode linear layers (dispatch vs portable vs _ref bit for bit, batch and thread invariance).
#include <immintrin.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernel_check.hpp"
#include "smelt/kernels/decode_linear.hpp"
#include "smelt/kernels/kernels.hpp"
#include "smelt/machine/cpu_info.hpp"

using namespace smelt;
using namespace smelt::test;

namespace {

__attribute__((target("f16c"))) uint16_t hw_fp16(float x) {
  return (uint16_t)_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT);
}
__attribute__((target("f16c"))) float hw_f32(uint16_t h) { return _cvtsh_ss(h); }
bool have_f16c() { return __builtin_cpu_supports("f16c"); }

uint32_t bits(float x) { return std::bit_cast<uint32_t>(x); }

// ggml's quantize_row_q8_0_ref as published (ggml-quants.c), with F16C for GGML_FP32_TO_FP16 as
// ggml builds it on x86: the bytes our quantizer must reproduce.
void ggml_q8_0_ref(BlockQ8_0* y, const float* x, int64_t k) {
  for (int64_t i = 0; i < k / 32; i++) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) {
      const float v = x[i * 32 + j];
      amax = amax > fabsf(v) ? amax : fabsf(v);
    }
    const float d = amax / ((1 << 7) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = hw_fp16(d);
    for (int j = 0; j < 32; ++j) {
      const float x0 = x[i * 32 + j] * id;
      y[i].qs[j] = roundf(x0);
    }
  }
}

bool same_blocks(const std::vector<BlockQ8_0>& a, const std::vector<BlockQ8_0>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(BlockQ8_0)) == 0;
}

}  // namespace

// ---- fp16 ------------------------------------------------------------------------------------

TEST(Fp16, EveryHalfWidensAsF16cAndRoundTrips) {
  if (!have_f16c()) GTEST_SKIP() << "CPU lacks F16C (the hardware reference)";
  for (uint32_t h = 0; h < 65536; h++) {
    const float f = f32_from_fp16((uint16_t)h);
    ASSERT_EQ(bits(f), bits(hw_f32((uint16_t)h))) << "half 0x" << std::hex << h;
    const bool nan = ((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff);
    // every non-NaN half comes back; a NaN comes back quiet (bit 9 set), as in hardware
    const uint16_t back = fp16_from_f32(f);
    if (!nan) ASSERT_EQ(back, h) << "half 0x" << std::hex << h;
    else ASSERT_EQ(back, h | 0x200) << "NaN half 0x" << std::hex << h;
  }
}

TEST(Fp16, NarrowingMatchesF16cAtEveryRoundingBoundary) {
  if (!have_f16c()) GTEST_SKIP() << "CPU lacks F16C (the hardware reference)";
  auto check = [](float x) {
    ASSERT_EQ(fp16_from_f32(x), hw_fp16(x)) << "float bits 0x" << std::hex << bits(x);
  };
  // The midpoint between each pair of adjacent halves (a tie, exact in fp32) and its float
  // neighbours, for both signs: every tie-to-even and every overflow-to-infinity case.
  for (uint32_t h = 0; h < 0x7c00; h++) {
    for (float sgn : {1.0f, -1.0f}) {
      const double lo = f32_from_fp16((uint16_t)h), hi = h + 1 == 0x7c00 ? 65536.0 : f32_from_fp16((uint16_t)(h + 1));
      const float mid = (float)((lo + hi) / 2) * sgn;
      check(mid);
      check(std::nextafterf(mid, 0.0f));
      check(std::nextafterf(mid, sgn * INFINITY));
      check(f32_from_fp16((uint16_t)h) * sgn);
    }
  }
  // Every float whose low 13 bits sit on or next to a rounding boundary, and random floats
  // (NaNs, float subnormals, the half-subnormal range included).
  for (uint32_t hi = 0; hi < (1u << 19); hi++)
    for (uint32_t lo : {0u, 1u, 0xfffu, 0x1000u, 0x1001u, 0x1fffu}) check(std::bit_cast<float>(hi << 13 | lo));
  std::mt19937 g(7);
  for (int i = 0; i < 2000000; i++) check(std::bit_cast<float>((uint32_t)g()));
  for (int i = 0; i < 1000000; i++) check(std::bit_cast<float>(((uint32_t)g() & 0x87ffffffu) | 0x30000000u));
}

TEST(Fp16, KnownValues) {
  EXPECT_EQ(fp16_from_f32(1.0f), 0x3c00);
  EXPECT_EQ(fp16_from_f32(-2.0f), 0xc000);
  EXPECT_EQ(fp16_from_f32(65504.0f), 0x7bff);
  EXPECT_EQ(fp16_from_f32(65519.996f), 0x7bff);
  EXPECT_EQ(fp16_from_f32(65520.0f), 0x7c00);                  // the tie rounds to even: infinity
  EXPECT_EQ(fp16_from_f32(0x1p-24f), 0x0001);                  // smallest subnormal
  EXPECT_EQ(fp16_from_f32(0x1p-25f), 0x0000);                  // tie between 0 and 2^-24: even
  EXPECT_EQ(fp16_from_f32(std::nextafterf(0x1p-25f, 1.0f)), 0x0001);
  EXPECT_EQ(fp16_from_f32(0x1.8p-24f), 0x0002);                // 1.5 units: tie to even 2
  EXPECT_EQ(fp16_from_f32(-0.0f), 0x8000);
  EXPECT_EQ(fp16_from_f32(INFINITY), 0x7c00);
  EXPECT_EQ(fp16_from_f32(-INFINITY), 0xfc00);
  EXPECT_EQ(fp16_from_f32(NAN) & 0x7e00, 0x7e00);
  EXPECT_EQ(f32_from_fp16(0x0001), 0x1p-24f);
  EXPECT_EQ(f32_from_fp16(0x3555), 0x1.554p-2f);
  EXPECT_TRUE(std::isinf(f32_from_fp16(0xfc00)) && f32_from_fp16(0xfc00) < 0);
}

// ---- Q8_0 quantization ---------------------------------------------------------------------

TEST(Q8_0, QuantizeHandComputedBlocks) {
  std::vector<float> x(3 * kQ8Block, 0.0f);
  // block 0: amax 127 -> d = 1, id = 1: q = roundf(x), halves away from zero
  const float b0[] = {127.0f, 2.5f, -2.5f, 0.5f, -0.5f, 1.49999f, 126.6f, -127.0f};
  for (int j = 0; j < 8; j++) x[j] = b0[j];
  // block 1: amax 1 -> d = 1/127 (fp16 0x2008), id = 127
  x[32] = 1.0f, x[33] = -0.25f, x[34] = 0.1f, x[35] = 0.3f;
  // block 2: all zero -> d = 0, q = 0
  std::vector<BlockQ8_0> q(3);
  quantize_row_q8_0(q.data(), x.data(), (int64_t)x.size());
  EXPECT_EQ(q[0].d, 0x3c00);
  const int e0[] = {127, 3, -3, 1, -1, 1, 127, -127};
  for (int j = 0; j < 8; j++) EXPECT_EQ(q[0].qs[j], e0[j]) << j;
  for (int j = 8; j < 32; j++) EXPECT_EQ(q[0].qs[j], 0);
  EXPECT_EQ(q[1].d, 0x2008);
  EXPECT_EQ(q[1].qs[0], 127);
  EXPECT_EQ(q[1].qs[1], -32);  // -31.75
  EXPECT_EQ(q[1].qs[2], 13);   // 12.7
  EXPECT_EQ(q[1].qs[3], 38);   // 38.1
  EXPECT_EQ(q[2].d, 0);
  for (int j = 0; j < 32; j++) EXPECT_EQ(q[2].qs[j], 0);

  std::vector<float> y(x.size());
  dequantize_row_q8_0(y.data(), q.data(), (int64_t)x.size());
  EXPECT_EQ(y[1], 3.0f);
  EXPECT_EQ(y[33], -32.0f * f32_from_fp16(0x2008));
  EXPECT_EQ(y[64], 0.0f);
}

TEST(Q8_0, ByteIdenticalToGgmlReference) {
  if (!have_f16c()) GTEST_SKIP() << "CPU lacks F16C (ggml's fp16 conversion on x86)";
  for (float scale : {1e-6f, 1e-3f, 0.02f, 1.0f, 300.0f, 40000.0f}) {
    auto x = randn(64 * kQ8Block, (uint64_t)(scale * 1000) + 11, scale);
    x[5] = 0.0f;
    for (int j = 0; j < 32; j++) x[2 * 32 + j] = 0.0f;  // an all-zero block
    x[3 * 32 + 7] = -x[3 * 32 + 7] * 50;                 // a dominant negative value
    std::vector<BlockQ8_0> a(64), b(64);
    quantize_row_q8_0(a.data(), x.data(), (int64_t)x.size());
    ggml_q8_0_ref(b.data(), x.data(), (int64_t)x.size());
    EXPECT_TRUE(same_blocks(a, b)) << "scale " << scale;
  }
}

TEST(Q8_0, QuantizeOfDequantizeIsIdentity) {
  // Blocks made by quantize_row_q8_0 whose fp16 scale is neither 0 nor infinite (amax between
  // ~4e-6 and 8e6): dequantize then quantize gives the same bytes.
  for (float scale : {1e-4f, 0.01f, 1.0f, 50.0f, 1e4f}) {
    auto x = randn(200 * kQ8Block, (uint64_t)(scale * 7) + 3, scale);
    for (int j = 0; j < 32; j++) x[9 * 32 + j] = 0.0f;
    std::vector<BlockQ8_0> a(200), b(200);
    quantize_row_q8_0(a.data(), x.data(), (int64_t)x.size());
    std::vector<float> y(x.size());
    dequantize_row_q8_0(y.data(), a.data(), (int64_t)x.size());
    quantize_row_q8_0(b.data(), y.data(), (int64_t)y.size());
    EXPECT_TRUE(same_blocks(a, b)) << "scale " << scale;
  }
}
