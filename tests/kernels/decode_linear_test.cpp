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
#include "smelt/hw/cpu_info.hpp"
#include "smelt/kernels/decode_linear.hpp"
#include "smelt/kernels/kernels.hpp"

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

// ---- the linear layers ---------------------------------------------------------------------

namespace {

struct Shape {
  int n, IC, OC;
};

// Every path's arithmetic is the same formula, so every comparison below is bitwise.
std::vector<float> run_f32(DecodeIsa isa, const std::vector<float>& x, const std::vector<float>& w, Shape s,
                           int ldo, float beta, const std::vector<float>& init) {
  EXPECT_TRUE(decode_linear_set_isa(isa));
  std::vector<float> out = init;
  decode_linear_f32(out.data(), ldo, x.data(), w.data(), s.n, s.IC, s.OC, beta);
  return out;
}

std::vector<float> run_q8(DecodeIsa isa, const std::vector<BlockQ8_0>& x, const std::vector<BlockQ8_0>& w,
                          Shape s, int ldo, float beta, const std::vector<float>& init) {
  EXPECT_TRUE(decode_linear_set_isa(isa));
  std::vector<float> out = init;
  decode_linear_q8_0(out.data(), ldo, x.data(), w.data(), s.n, s.IC, s.OC, beta);
  return out;
}

// A bf16 is the upper half of an fp32 (the definition, written here apart from the kernels).
float widen_bf16(uint16_t h) { return std::bit_cast<float>((uint32_t)h << 16); }

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<BlockQ8_0> quantize(const std::vector<float>& v) {
  std::vector<BlockQ8_0> q(v.size() / kQ8Block);
  quantize_row_q8_0(q.data(), v.data(), (int64_t)v.size());
  return q;
}

// Weights as foreign GGUF files may hold them: -128 sprinkled in, one block of -128 only.
void add_minus_128(std::vector<BlockQ8_0>& w, uint64_t seed) {
  std::mt19937 g((uint32_t)seed);
  for (auto& b : w)
    if (g() % 3 == 0) b.qs[g() % kQ8Block] = -128;
  for (auto& q : w[w.size() / 2].qs) q = -128;
}

class DecodeLinear : public ::testing::TestWithParam<DecodeIsa> {
 protected:
  void SetUp() override {
    if (!decode_linear_set_isa(GetParam())) {
      if (GetParam() == DecodeIsa::kAvx512Vnni) GTEST_SKIP() << "CPU lacks AVX512-VNNI (with AVX512F/BW/VL)";
      GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
    }
  }
  void TearDown() override {
    decode_linear_set_portable(false);
    kernels_set_threads(1);
  }
};

}  // namespace

TEST_P(DecodeLinear, F32EqualsReferenceBitwise) {
  kernels_set_threads(2);
  std::mt19937 g(1);
  std::vector<Shape> shapes;
  for (int n = 1; n <= 17; n++) shapes.push_back({n, 16 * (1 + n % 5) + n % 16, 48 + 3 * n + 1});
  for (int i = 0; i < 12; i++) shapes.push_back({1 + (int)(g() % 17), 1 + (int)(g() % 300), 1 + (int)(g() % 200)});
  // one and two rows over long inputs: the wide tiles' every width (16, 12, 8, 6, 4 columns, by
  // what fits the L1 data cache) and their edges
  for (int IC : {700, 1000, 1500, 2000, 3100})
    for (int n : {1, 2}) shapes.push_back({n, IC + n, 61 + IC % 7});
  shapes.push_back({5, 0, 7});  // IC 0: out = beta * out
  for (Shape s : shapes) {
    const int ldo = s.OC + 3;
    auto x = randn((size_t)s.n * s.IC, g()), w = randn((size_t)s.OC * s.IC, g());
    for (float beta : {0.0f, 1.0f}) {
      std::vector<float> init = randn((size_t)s.n * ldo, g());
      if (beta == 0.0f) init.assign(init.size(), NAN);  // beta 0 must not read out
      std::vector<float> ref = init;
      decode_linear_f32_ref(ref.data(), ldo, x.data(), w.data(), s.n, s.IC, s.OC, beta);
      EXPECT_TRUE(same_bits(run_f32(GetParam(), x, w, s, ldo, beta, init), ref))
          << "n " << s.n << " IC " << s.IC << " OC " << s.OC << " beta " << beta;
      for (int r = 0; r < s.n; r++)  // the padding columns are left alone
        for (int c = s.OC; c < ldo; c++) EXPECT_TRUE(std::isnan(ref[r * ldo + c]) || ref[r * ldo + c] == init[r * ldo + c]);
    }
  }
}

// A 2-byte weight format (f16, bf16): on every shape the path equals its reference, and both equal
// the fp32 kernel on the widened weights bit for bit (the formula is the fp32 one). IC values off
// the 16-lane grid take the tail; long rows reach the one-row tile's widths, 12, 8, 6 and 4 weight
// rows in half the L1D. narrow: fp32 -> the format's bits; widen: back, exactly; round: the
// inputs' rounding in place (f16's kernel takes any fp32 inputs, bf16's rounded ones).
template <typename Narrow, typename Widen, typename Round, typename Kernel, typename Ref>
void expect_fp32_on_widened(DecodeIsa isa, uint32_t seed, Narrow narrow, Widen widen, Round round, Kernel kernel,
                            Ref ref_kernel) {
  kernels_set_threads(2);
  std::mt19937 g(seed);
  std::vector<Shape> shapes;
  for (int n = 1; n <= 17; n++) shapes.push_back({n, 16 * (1 + n % 5) + n % 16, 48 + 3 * n + 1});
  for (int i = 0; i < 8; i++) shapes.push_back({1 + (int)(g() % 17), 1 + (int)(g() % 300), 1 + (int)(g() % 200)});
  for (int IC : {800, 1500, 2000, 3000, 6200})
    for (int n : {1, 2}) shapes.push_back({n, IC + n, 61 + IC % 7});
  for (Shape s : shapes) {
    const int ldo = s.OC + 2;
    auto x = randn((size_t)s.n * s.IC, g()), w = randn((size_t)s.OC * s.IC, g());
    round(x);
    std::vector<uint16_t> w16(w.size());
    std::vector<float> widened(w.size());
    for (size_t i = 0; i < w.size(); i++) w16[i] = narrow(w[i]), widened[i] = widen(w16[i]);
    for (float beta : {0.0f, 1.0f}) {
      std::vector<float> init = randn((size_t)s.n * ldo, g());
      if (beta == 0.0f) init.assign(init.size(), NAN);
      std::vector<float> ref = init, f32 = init, got = init;
      ref_kernel(ref.data(), ldo, x.data(), w16.data(), s.n, s.IC, s.OC, beta);
      decode_linear_f32_ref(f32.data(), ldo, x.data(), widened.data(), s.n, s.IC, s.OC, beta);
      ASSERT_TRUE(decode_linear_set_isa(isa));
      kernel(got.data(), ldo, x.data(), w16.data(), s.n, s.IC, s.OC, beta);
      EXPECT_TRUE(same_bits(got, ref)) << "n " << s.n << " IC " << s.IC << " OC " << s.OC << " beta " << beta;
      EXPECT_TRUE(same_bits(ref, f32)) << "n " << s.n << " IC " << s.IC << " OC " << s.OC << " beta " << beta;
    }
  }
}

TEST_P(DecodeLinear, F16EqualsReferenceAndF32OnWidenedWeightsBitwise) {
  expect_fp32_on_widened(
      GetParam(), 5, fp16_from_f32, f32_from_fp16, [](std::vector<float>&) {}, decode_linear_f16,
      decode_linear_f16_ref);
  // The inputs' rounding is fp16's round to nearest even, value for value.
  auto x = randn(4096, 9, 3.0f);
  x.push_back(65520.0f), x.push_back(-1e-8f), x.push_back(1.0f + 1.0f / 2048);  // overflow, underflow, a tie
  // the same cases and half's subnormals, zeros and NaN again at the front (the vector paths' body)
  const float front[] = {65520.0f, -1e-8f, 1.0f + 1.0f / 2048, 0x1p-24f, 0x1.8p-25f, 0x1p-25f, -0x1.4p-20f, 6.1e-5f,
                         -0.0f, 0.0f, NAN, -INFINITY, 65504.0f, 65519.0f, 0x1.004p0f, 0x1.006p0f};
  x.insert(x.begin(), std::begin(front), std::end(front));
  std::vector<float> r(x.size());
  round_to_fp16(r.data(), x.data(), (int64_t)x.size());
  for (size_t i = 0; i < x.size(); i++)
    ASSERT_EQ(std::bit_cast<uint32_t>(r[i]), std::bit_cast<uint32_t>(f32_from_fp16(fp16_from_f32(x[i])))) << x[i];
  EXPECT_EQ(r[0], INFINITY);
  EXPECT_EQ(r[2], 1.0f);  // ties to even
  EXPECT_EQ(r[4096 + 16], INFINITY);
  EXPECT_EQ(r[4098 + 16], 1.0f);
}

// bf16: as f16 (expect_fp32_on_widened), inputs rounded by round_to_bf16; the rounding's ties;
// a row is the same bits alone or in any batch.
TEST_P(DecodeLinear, Bf16EqualsReferenceAndF32OnWidenedWeightsBitwise) {
  auto narrow = [](float v) {
    uint16_t h;
    bf16_from_f32_serial(&h, &v, 1);
    return h;
  };
  auto round = [](std::vector<float>& x) { round_to_bf16(x.data(), x.data(), (int64_t)x.size()); };
  expect_fp32_on_widened(GetParam(), 6, narrow, widen_bf16, round, decode_linear_bf16, decode_linear_bf16_ref);
  auto bf16 = [](const std::vector<float>& v) {
    std::vector<uint16_t> h(v.size());
    bf16_from_f32_serial(h.data(), v.data(), (int64_t)v.size());
    return h;
  };
  // The inputs' rounding: nearest, ties to even, NaN kept, as the bf16 copies of the weights.
  auto x = randn(4096, 9, 3.0f);
  const float edge[] = {1.0f + 0x1p-8f, 1.0f + 0x1.8p-8f, 0x1.fffffep127f, -0.0f, NAN, -INFINITY, 0x1p-130f};
  x.insert(x.begin(), std::begin(edge), std::end(edge));
  std::vector<float> r(x.size());
  round_to_bf16(r.data(), x.data(), (int64_t)x.size());
  const auto h = bf16(x);
  for (size_t i = 0; i < x.size(); i++) {
    if (std::isnan(x[i])) continue;
    ASSERT_EQ(std::bit_cast<uint32_t>(r[i]), std::bit_cast<uint32_t>(widen_bf16(h[i]))) << x[i];
  }
  EXPECT_EQ(r[0], 1.0f);                  // a tie: to even
  EXPECT_EQ(r[1], 1.0f + 0x1p-7f);        // a tie: to even, upward
  EXPECT_EQ(r[2], INFINITY);              // past the largest bf16
  EXPECT_TRUE(std::isnan(r[4]));
  // Batch and thread invariance.
  std::mt19937 g(7);
  const int IC = 16 * 13 + 5, OC = 100;
  auto xb = randn((size_t)17 * IC, g());
  round(xb);
  const auto w = bf16(randn((size_t)OC * IC, g()));
  std::vector<float> alone((size_t)17 * OC);
  kernels_set_threads(1);
  for (int row = 0; row < 17; row++)
    decode_linear_bf16(&alone[row * OC], OC, &xb[(size_t)row * IC], w.data(), 1, IC, OC, 0.0f);
  for (int threads : {1, 2}) {
    kernels_set_threads(threads);
    for (int n = 1; n <= 17; n++) {
      std::vector<float> out((size_t)n * OC);
      decode_linear_bf16(out.data(), OC, xb.data(), w.data(), n, IC, OC, 0.0f);
      EXPECT_EQ(std::memcmp(out.data(), alone.data(), out.size() * 4), 0) << "n " << n << " threads " << threads;
    }
  }
}

TEST_P(DecodeLinear, Q8EqualsReferenceBitwise) {
  kernels_set_threads(2);
  std::mt19937 g(2);
  std::vector<Shape> shapes;
  for (int n = 1; n <= 17; n++) shapes.push_back({n, 32 * (1 + n % 4), 128 + 5 * n + 3});
  for (int i = 0; i < 10; i++) shapes.push_back({1 + (int)(g() % 17), 32 * (1 + (int)(g() % 80)), 1 + (int)(g() % 300)});
  shapes.push_back({3, 32 * 130, 17});  // more blocks than one chunk of the fast paths
  shapes.push_back({33, 64, 20});       // more rows than one row tile
  for (Shape s : shapes) {
    const int ldo = s.OC + 1;
    auto xq = quantize(randn((size_t)s.n * s.IC, g()));
    auto wq = quantize(randn((size_t)s.OC * s.IC, g(), 0.05f));
    add_minus_128(wq, g());
    for (float beta : {0.0f, 1.0f}) {
      std::vector<float> init = randn((size_t)s.n * ldo, g());
      if (beta == 0.0f) init.assign(init.size(), NAN);
      std::vector<float> ref = init;
      decode_linear_q8_0_ref(ref.data(), ldo, xq.data(), wq.data(), s.n, s.IC, s.OC, beta);
      EXPECT_TRUE(same_bits(run_q8(GetParam(), xq, wq, s, ldo, beta, init), ref))
          << "n " << s.n << " IC " << s.IC << " OC " << s.OC << " beta " << beta;
    }
  }
}

TEST_P(DecodeLinear, ExtremeQ8BlocksAreExact) {
  // w all -128 against x all +-127 (the largest products, the sign trick's edge), and mixtures.
  const Shape s{3, 96, 21};
  std::vector<BlockQ8_0> xq(s.n * 3), wq(s.OC * 3);
  std::mt19937 g(3);
  for (auto& b : xq) {
    b.d = fp16_from_f32(0.5f);
    for (auto& q : b.qs) q = (g() & 1) ? 127 : -127;
  }
  for (auto& b : wq) {
    b.d = fp16_from_f32(0.25f);
    for (auto& q : b.qs) q = (int8_t)(g() % 4 == 0 ? 127 : -128);
  }
  for (auto& q : wq[0].qs) q = -128;
  for (auto& q : xq[0].qs) q = 127;
  std::vector<float> init(s.n * s.OC, 0.0f), ref = init;
  decode_linear_q8_0_ref(ref.data(), s.OC, xq.data(), wq.data(), s.n, s.IC, s.OC, 0.0f);
  EXPECT_EQ(ref[0], -0.125f * 127 * 128 * 32 + [&] {  // the first block by hand, then the rest
    float acc = 0;
    for (int b = 1; b < 3; b++) {
      int32_t isum = 0;
      for (int i = 0; i < 32; i++) isum += xq[b].qs[i] * wq[b].qs[i];
      acc += 0.125f * isum;
    }
    return acc;
  }());
  EXPECT_TRUE(same_bits(run_q8(GetParam(), xq, wq, s, s.OC, 0.0f, init), ref));
}

TEST_P(DecodeLinear, BatchAndThreadInvariant) {
  // Row r of an n-row call == the same row alone, for every n; 1 thread == 2 threads.
  const int IC = 16 * 13 + 5, OC = 100, ICq = 32 * 9;
  std::mt19937 g(4);
  auto x = randn((size_t)17 * IC, g()), w = randn((size_t)OC * IC, g());
  auto xq = quantize(randn((size_t)17 * ICq, g())), wq = quantize(randn((size_t)OC * ICq, g()));
  add_minus_128(wq, g());
  std::vector<float> alone((size_t)17 * OC), alone_q((size_t)17 * OC);
  kernels_set_threads(1);
  for (int r = 0; r < 17; r++) {
    decode_linear_f32(&alone[r * OC], OC, &x[(size_t)r * IC], w.data(), 1, IC, OC, 0.0f);
    decode_linear_q8_0(&alone_q[r * OC], OC, &xq[(size_t)r * (ICq / 32)], wq.data(), 1, ICq, OC, 0.0f);
  }
  for (int threads : {1, 2}) {
    kernels_set_threads(threads);
    for (int n = 1; n <= 17; n++) {
      std::vector<float> out((size_t)n * OC), outq((size_t)n * OC);
      decode_linear_f32(out.data(), OC, x.data(), w.data(), n, IC, OC, 0.0f);
      decode_linear_q8_0(outq.data(), OC, xq.data(), wq.data(), n, ICq, OC, 0.0f);
      EXPECT_EQ(std::memcmp(out.data(), alone.data(), out.size() * 4), 0) << "f32 n " << n << " threads " << threads;
      EXPECT_EQ(std::memcmp(outq.data(), alone_q.data(), outq.size() * 4), 0) << "q8 n " << n << " threads " << threads;
    }
  }
}

TEST_P(DecodeLinear, CloseToDoublePrecisionDot) {
  // Each fp32 rounding (one per FMA or add) errs by at most 2^-24 of the partial sum, which is
  // bounded by the sum of |terms|: |out - exact| <= steps * 2^-24 * sum |term|.
  const Shape s{4, 32 * 24, 70};
  std::mt19937 g(5);
  auto x = randn((size_t)s.n * s.IC, g()), w = randn((size_t)s.OC * s.IC, g(), 0.02f);
  auto xq = quantize(x), wq = quantize(w);
  std::vector<float> xd(x.size()), wd(w.size()), out(s.n * s.OC), outq(s.n * s.OC);
  dequantize_row_q8_0(xd.data(), xq.data(), (int64_t)x.size());
  dequantize_row_q8_0(wd.data(), wq.data(), (int64_t)w.size());
  decode_linear_f32(out.data(), s.OC, x.data(), w.data(), s.n, s.IC, s.OC, 0.0f);
  decode_linear_q8_0(outq.data(), s.OC, xq.data(), wq.data(), s.n, s.IC, s.OC, 0.0f);
  for (int r = 0; r < s.n; r++)
    for (int o = 0; o < s.OC; o++) {
      double e = 0, a = 0, eq = 0, aq = 0;
      for (int k = 0; k < s.IC; k++) {
        e += (double)x[r * s.IC + k] * w[o * s.IC + k], a += std::fabs((double)x[r * s.IC + k] * w[o * s.IC + k]);
        const double t = (double)xd[r * s.IC + k] * wd[o * s.IC + k];
        eq += t, aq += std::fabs(t);
      }
      const double f32_steps = s.IC / 16 + 4, q8_steps = s.IC / 32;
      EXPECT_LE(std::fabs(out[r * s.OC + o] - e), f32_steps * 0x1p-24 * a) << r << "," << o;
      EXPECT_LE(std::fabs(outq[r * s.OC + o] - eq), q8_steps * 0x1p-24 * aq) << r << "," << o;
      EXPECT_NEAR(outq[r * s.OC + o], e, 0.05 * a / std::sqrt((double)s.IC) + 1e-3);  // Q8_0 ~ fp32
    }
}

INSTANTIATE_TEST_SUITE_P(Isa, DecodeLinear,
                         ::testing::Values(DecodeIsa::kPortable, DecodeIsa::kAvx2, DecodeIsa::kAvx512Vnni),
                         [](const auto& info) {
                           switch (info.param) {
                             case DecodeIsa::kAvx2: return std::string("avx2");
                             case DecodeIsa::kAvx512Vnni: return std::string("avx512_vnni");
                             default: return std::string("portable");
                           }
                         });

TEST(DecodeLinearDispatch, NamesTheChosenPath) {
  decode_linear_set_portable(true);
  EXPECT_STREQ(decode_linear_isa(), "portable");
  decode_linear_set_portable(false);
  const CpuInfo& c = cpu_info();
  const char* want = c.avx512f && c.avx512bw && c.avx512vl && c.avx512_vnni ? "avx512-vnni"
                     : c.avx2 && c.fma                                         ? "avx2"
                                                                               : "portable";
  EXPECT_STREQ(decode_linear_isa(), want);
}
