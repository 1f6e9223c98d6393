// The GEMM back ends and the bf16 linear layers: bf16 rounding (ties to even, NaN, infinities);
// fp32 GEMMs on OpenBLAS, oneDNN and BLIS against a double reference for every transpose; bf16 GEMMs on
// oneDNN (when the CPU has bf16 units) and on the portable path against a double reference of the
// bf16-rounded inputs (fp32-accumulation tolerance), so both paths compute the same numbers; the
// bf16 linear layers against the fp32 ones within the bf16 bound; 1 and 2 threads bit-identical.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include <omp.h>

#include "kernel_check.hpp"
#include "test_references.hpp"
#include "smelt/kernels/kernels.hpp"

using namespace smelt;
using namespace smelt::test;

namespace {
uint16_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> h(x.size());
  bf16_from_f32(h.data(), x.data(), (int64_t)x.size());
  return h;
}
// C = beta C + op(A) op(B) in double over the widened operands (row-major, lda/ldb = stored cols).
template <typename T>
std::vector<float> gemm_ref(bool ta, bool tb, int M, int N, int K, const std::vector<T>& A, const std::vector<T>& B,
                            float beta, std::vector<float> C) {
  // op(A) as rows of K and op(B) as columns of K, widened to double once
  auto widen = [](const std::vector<T>& v, size_t i) {
    if constexpr (sizeof(T) == 4) return (double)v[i];
    else {
      float f;
      f32_from_bf16(&f, &v[i], 1);
      return (double)f;
    }
  };
  const int lda = ta ? M : K, ldb = tb ? K : N;
  std::vector<double> a((size_t)M * K), b((size_t)N * K);
  for (int i = 0; i < M; i++)
    for (int k = 0; k < K; k++) a[(size_t)i * K + k] = widen(A, ta ? (size_t)k * lda + i : (size_t)i * lda + k);
  for (int j = 0; j < N; j++)
    for (int k = 0; k < K; k++) b[(size_t)j * K + k] = widen(B, tb ? (size_t)j * ldb + k : (size_t)k * ldb + j);
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double s = 0;
      for (int k = 0; k < K; k++) s += a[(size_t)i * K + k] * b[(size_t)j * K + k];
      C[(size_t)i * N + j] = (float)(beta * C[(size_t)i * N + j] + s);
    }
  return C;
}
}  // namespace

TEST(Bf16, RoundsToNearestTiesToEven) {
  EXPECT_EQ(bits(1.0f), 0x3f80);
  uint16_t h;
  float x = from_bits(0x3f808000u);  // exactly halfway between 0x3f80 and 0x3f81: to even (0x3f80)
  bf16_from_f32(&h, &x, 1);
  EXPECT_EQ(h, 0x3f80);
  x = from_bits(0x3f818000u);  // halfway between 0x3f81 and 0x3f82: to even (0x3f82)
  bf16_from_f32(&h, &x, 1);
  EXPECT_EQ(h, 0x3f82);
  x = from_bits(0x3f808001u);  // just above halfway: up
  bf16_from_f32(&h, &x, 1);
  EXPECT_EQ(h, 0x3f81);
  x = INFINITY;
  bf16_from_f32(&h, &x, 1);
  EXPECT_EQ(h, 0x7f80);
  x = from_bits(0x7f7fffffu);  // the largest float rounds up to infinity, as IEEE rounding does
  bf16_from_f32(&h, &x, 1);
  EXPECT_EQ(h, 0x7f80);
  x = from_bits(0x7f800001u);  // a signalling NaN whose payload sits in the low half stays a NaN
  bf16_from_f32(&h, &x, 1);
  float back;
  f32_from_bf16(&back, &h, 1);
  EXPECT_TRUE(std::isnan(back));
  EXPECT_EQ(bf16_round_f32(3.14159265f), from_bits(0x40490000u));
}

// The vector conversion (16 at a time) follows the scalar rule (one at a time) on every edge case
// and on random bits, including the tail that is not a multiple of 16.
TEST(Bf16, VectorConversionEqualsTheScalarRule) {
  std::vector<float> x = {from_bits(0x3f808000u), from_bits(0x3f818000u), from_bits(0x3f808001u), INFINITY,
                          -INFINITY, from_bits(0x7f7fffffu), from_bits(0xff7fffffu), from_bits(0x7f800001u),
                          from_bits(0xffc00001u), 0.0f, -0.0f, from_bits(0x00000001u), from_bits(0x807fffffu)};
  std::mt19937 g(5);
  while (x.size() < 1000) x.push_back(from_bits(g()));
  std::vector<uint16_t> v(x.size());
  bf16_from_f32(v.data(), x.data(), (int64_t)x.size());
  for (size_t i = 0; i < x.size(); i++) {
    uint16_t one;
    bf16_from_f32(&one, &x[i], 1);
    ASSERT_EQ(v[i], one) << "element " << i;
  }
}

class GemmShapes : public ::testing::TestWithParam<std::array<int, 3>> {};

// Every fp32 back end (BLIS where installed: scripts/install-deps installs it, so CI checks it),
// every transpose, alpha 1 and 0.5, beta 0 (C not read: it starts as NaN) and 1.
TEST_P(GemmShapes, Fp32BackEndsMatchTheReference) {
  const int M = GetParam()[0], N = GetParam()[1], K = GetParam()[2];
  SMELT_REQUIRE_REFERENCE(gemm_backend_available(GemmBackend::kBlis), "apt-get install libblis4-serial");
  for (GemmBackend be : {GemmBackend::kOpenBlas, GemmBackend::kOneDnn, GemmBackend::kBlis}) {
    gemm_set_backend(be);
    ASSERT_EQ(gemm_backend(), be);
    for (int t = 0; t < 4; t++) {
      const bool ta = t & 1, tb = t & 2;
      auto A = randn((size_t)M * K, 1), B = randn((size_t)K * N, 2), C = randn((size_t)M * N, 3);
      for (float alpha : {1.0f, 0.5f})
        for (float beta : {0.0f, 1.0f}) {
          std::vector<float> As = A;  // alpha A, exact for 0.5
          for (float& a : As) a *= alpha;
          auto want = gemm_ref(ta, tb, M, N, K, As, B, beta, C);
          auto got = C;
          if (beta == 0.0f) got.assign(got.size(), NAN);
          gemm_f32(ta, tb, M, N, K, alpha, A.data(), ta ? M : K, B.data(), tb ? K : N, beta, got.data(), N);
          const bool finite = std::all_of(got.begin(), got.end(), [](float v) { return std::isfinite(v); });
          EXPECT_TRUE(finite && max_err(got, want) < 1e-5)
              << gemm_backend_name(be) << " ta " << ta << " tb " << tb << " alpha " << alpha << " beta " << beta;
        }
    }
  }
  gemm_set_backend(GemmBackend::kOpenBlas);
}

TEST_P(GemmShapes, Bf16PathsMatchTheReferenceOfTheRoundedInputs) {
  const int M = GetParam()[0], N = GetParam()[1], K = GetParam()[2];
  if (!gemm_bf16_native())
    std::fprintf(stderr, "note: this CPU has no bf16 units oneDNN uses; only the portable path is checked\n");
  for (int t = 0; t < 4; t++) {
    const bool ta = t & 1, tb = t & 2;
    auto A = to_bf16(randn((size_t)M * K, 4)), B = to_bf16(randn((size_t)K * N, 5));
    auto C = randn((size_t)M * N, 6);
    for (float beta : {0.0f, 1.0f, 0.5f}) {  // 0.5: the engines scale C first (gemm_bf16_prescale)
      auto want = gemm_ref(ta, tb, M, N, K, A, B, beta, C);
      auto port = C;
      gemm_bf16_portable(ta, tb, M, N, K, A.data(), ta ? M : K, B.data(), tb ? K : N, beta, port.data(), N);
      // fp32 sums of exact products: a few fp32 ulps of sqrt(K) terms of size ~1.
      EXPECT_LT(max_err(port, want), 2e-6 * std::sqrt((double)K)) << "portable ta " << ta << " tb " << tb;
      if (gemm_bf16_native()) {
        auto one = C;
        gemm_bf16_onednn(ta, tb, M, N, K, A.data(), ta ? M : K, B.data(), tb ? K : N, beta, one.data(), N);
        EXPECT_LT(max_err(one, want), 2e-6 * std::sqrt((double)K)) << gemm_bf16_isa() << " ta " << ta << " tb " << tb;
      }
      if (gemm_bf16_packed_available()) {
        auto own = C;
        gemm_bf16_packed(ta, tb, M, N, K, A.data(), ta ? M : K, B.data(), tb ? K : N, beta, own.data(), N);
        EXPECT_LT(max_err(own, want), 2e-6 * std::sqrt((double)K)) << "packed ta " << ta << " tb " << tb;
      }
    }
  }
}

// Odd sizes (not multiples of 16, 32 or the portable blocks), K past one 256 block, and tiny ones.
INSTANTIATE_TEST_SUITE_P(Shapes, GemmShapes,
                         ::testing::Values(std::array<int, 3>{1, 1, 1}, std::array<int, 3>{7, 5, 3},
                                           std::array<int, 3>{67, 130, 301}, std::array<int, 3>{129, 33, 520}));

// Smelt's packed bf16 kernel at the edges of its blocking: rows past one sliver (12) and one row
// block (96), columns past one panel (32) and one column block (512), K odd and past one K block
// (512, cut into equal even blocks), leading dimensions wider than the operands, both betas,
// every transpose: against the double reference of the same bf16 inputs. The same bits on 1 and
// 2 threads and from inside an OpenMP team (one job on the calling thread).
TEST(GemmBf16Packed, EveryTransposeAndEdgeAgainstTheReferenceWithTheSameBitsOnAnyThreads) {
  if (!gemm_bf16_packed_available()) {
    GTEST_SKIP() << "no AVX512-BF16 on this CPU: the packed kernel is never used here";
  }
  // ... and K past one block (4099: three of 1368), and the smaller operand past one packed chunk
  // (2 MiB: at K 2047, 504 rows of A, or 480 columns of B).
  const std::array<int, 3> shapes[] = {{1, 1, 1},       {13, 33, 2},     {97, 531, 1031}, {200, 40, 513},
                                       {25, 1100, 77},  {13, 40, 4099},  {520, 600, 2047}, {600, 520, 2047}};
  for (const auto& sh : shapes) {
    const int M = sh[0], N = sh[1], K = sh[2];
    for (int t = 0; t < 4; t++) {
      const bool ta = t & 1, tb = t & 2;
      // operands stored wider than they are read: lda, ldb 3 past the width, ldc 5 past N
      const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 3, ldc = N + 5;
      const int arows = ta ? K : M, brows = tb ? N : K;
      auto A = to_bf16(randn((size_t)arows * lda, 21)), B = to_bf16(randn((size_t)brows * ldb, 22));
      // the reference reads tight copies
      std::vector<uint16_t> At((size_t)arows * (lda - 3)), Bt((size_t)brows * (ldb - 3));
      for (int r = 0; r < arows; r++)
        for (int c = 0; c < lda - 3; c++) At[(size_t)r * (lda - 3) + c] = A[(size_t)r * lda + c];
      for (int r = 0; r < brows; r++)
        for (int c = 0; c < ldb - 3; c++) Bt[(size_t)r * (ldb - 3) + c] = B[(size_t)r * ldb + c];
      auto C = randn((size_t)M * ldc, 23);
      std::vector<float> Ct((size_t)M * N);
      for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) Ct[(size_t)i * N + j] = C[(size_t)i * ldc + j];
      const auto product = gemm_ref(ta, tb, M, N, K, At, Bt, 0.0f, Ct);  // once per transpose
      for (float beta : {0.0f, 1.0f}) {
        std::vector<float> want = product;
        if (beta != 0.0f)
          for (size_t i = 0; i < want.size(); i++) want[i] = (float)((double)Ct[i] + product[i]);
        std::vector<float> got[3];
        for (int run = 0; run < 3; run++) {
          got[run] = C;
          float* out = got[run].data();
          if (run < 2) {
            kernels_set_threads(run + 1);
            gemm_bf16_packed(ta, tb, M, N, K, A.data(), lda, B.data(), ldb, beta, out, ldc);
          } else {
            kernels_set_threads(2);
#pragma omp parallel num_threads(2)
            if (omp_get_thread_num() == 1)
              gemm_bf16_packed(ta, tb, M, N, K, A.data(), lda, B.data(), ldb, beta, out, ldc);
          }
        }
        kernels_set_threads(1);
        const std::string where = "M " + std::to_string(M) + " N " + std::to_string(N) + " K " +
                                  std::to_string(K) + " ta " + std::to_string(ta) + " tb " + std::to_string(tb) +
                                  " beta " + std::to_string(beta);
        double err = 0;
        for (int i = 0; i < M; i++)
          for (int j = 0; j < N; j++)
            err = std::max(err, (double)std::fabs(got[0][(size_t)i * ldc + j] - want[(size_t)i * N + j]));
        // Each element sums up to 2048 K terms in one fp32 chain (vdpbf16ps rounds after each
        // product), the running sum growing like sqrt(k): its rounding errors add up to about
        // u K / sqrt(2) (u = 2^-24); 4 u K is past the largest of the elements, and a lost or
        // repeated block or pair (an error of order 1) is far beyond it.
        EXPECT_LT(err, 4.0 * K / (1 << 24) + 1e-6) << where;
        for (int i = 0; i < M; i++)  // the padding past N is not written
          for (int j = N; j < ldc; j++) ASSERT_EQ(got[0][(size_t)i * ldc + j], C[(size_t)i * ldc + j]) << where;
        EXPECT_EQ(got[0], got[1]) << where << ": 1 and 2 threads differ";
        EXPECT_EQ(got[0], got[2]) << where << ": inside a team differs";
      }
    }
  }
}

class MatmulBf16 : public ::testing::TestWithParam<std::array<int, 3>> {};

// The bf16 linear layers: against their reference (bf16-rounded inputs, double sums) to fp32
// accumulation error, and against the fp32 layers within the bf16 bound: each product's inputs
// carry a relative error of at most u = 2^-8, so |y16 - y32| <= ((1+u)^2 - 1) sum|x w| plus fp32
// sums; checked element by element. 1 and 2 threads give the same bits. On each engine the CPU
// has (oneDNN, and Smelt's packed kernel where there is AVX512-BF16; at 60 rows only dweight
// runs packed, kBf16PackedMinRows).
TEST_P(MatmulBf16, MatchesTheReferenceAndTheFp32LayerWithinTheBf16Bound) {
  const int N = GetParam()[0], IC = GetParam()[1], OC = GetParam()[2];
  auto x = randn((size_t)N * IC, 1), w = randn((size_t)OC * IC, 2), dy = randn((size_t)N * OC, 3);
  auto w16 = to_bf16(w);
  std::vector<uint16_t> x16((size_t)N * IC), dy16((size_t)N * OC);
  const double u = 1.0 / 256, rel = (1 + u) * (1 + u) - 1;
  std::vector<Bf16Engine> engines = {Bf16Engine::kOneDnn};
  if (gemm_bf16_native() && gemm_bf16_packed_available()) engines.push_back(Bf16Engine::kPacked);
  for (Bf16Engine engine : engines) {
  for (LinearProduct p : {LinearProduct::kForward, LinearProduct::kDinp, LinearProduct::kDweight})
    gemm_bf16_set_engine(IC, OC, p, engine);
  SCOPED_TRACE(bf16_engine_name(engine));
  std::vector<float> y_t[2], dx_t[2], dw_t[2];
  for (int threads : {1, 2}) {
    kernels_set_threads(threads);
    auto y = randn((size_t)N * OC, 4), y_ref = y, y32 = y;
    matmul_forward_bf16(y.data(), x16.data(), x.data(), w16.data(), N, IC, OC, 1.0f);
    matmul_forward_bf16_ref(y_ref.data(), x.data(), w16.data(), N, IC, OC, 1.0f);
    matmul_forward_ref(y32.data(), x.data(), w.data(), N, IC, OC, 1.0f);
    EXPECT_LT(max_err(y, y_ref), 2e-6 * std::sqrt((double)IC));
    for (int n = 0; n < N; n += 7)
      for (int o = 0; o < OC; o += 5) {
        double mag = 0;
        for (int i = 0; i < IC; i++) mag += std::fabs((double)x[(size_t)n * IC + i] * w[(size_t)o * IC + i]);
        ASSERT_LE(std::fabs(y[(size_t)n * OC + o] - y32[(size_t)n * OC + o]), rel * mag + 1e-5 * (1 + mag))
            << "row " << n << " col " << o;
      }
    std::vector<float> dx((size_t)N * IC, 7.0f), dx_ref((size_t)N * IC), dx32((size_t)N * IC);
    std::vector<float> dw((size_t)OC * IC, 0.5f), dw_ref = dw, dw32 = dw;
    matmul_backward_bf16(dx.data(), dw.data(), dy16.data(), x16.data(), dy.data(), x.data(), w16.data(), N, IC, OC);
    matmul_backward_bf16_ref(dx_ref.data(), dw_ref.data(), dy.data(), x.data(), w16.data(), N, IC, OC);
    matmul_backward_ref(dx32.data(), dw32.data(), dy.data(), x.data(), w.data(), N, IC, OC);
    EXPECT_LT(max_err(dx, dx_ref), 2e-6 * std::sqrt((double)OC));
    EXPECT_LT(max_err(dw, dw_ref), 2e-6 * std::sqrt((double)N));
    // Against fp32, relative to the tensor's scale: the error of a sum of random-signed terms is
    // about u sqrt(terms) against a scale of a few sqrt(terms); 1e-2 is loose, 0 is impossible.
    EXPECT_LT(max_err(dx, dx32), 1e-2);
    EXPECT_LT(max_err(dw, dw32), 1e-2);
    EXPECT_GT(max_err(dw, dw32), 0.0) << "bf16 rounding must show: the bf16 path is not running";
    dx_t[threads - 1] = dx, dw_t[threads - 1] = dw, y_t[threads - 1] = y;
  }
  EXPECT_EQ(y_t[0], y_t[1]);
  EXPECT_EQ(dx_t[0], dx_t[1]);
  EXPECT_EQ(dw_t[0], dw_t[1]);
  }
  gemm_bf16_clear_engines();
}

INSTANTIATE_TEST_SUITE_P(Shapes, MatmulBf16,
                         ::testing::Values(std::array<int, 3>{60, 40, 31}, std::array<int, 3>{1100, 40, 1030}));

// The engine table: a product runs where it was set, oneDNN where nothing was; a forward or dinp
// below kBf16PackedMinRows rows stays on oneDNN (the weight would be packed for too few rows),
// dweight at any row count.
TEST(MatmulBf16Paths, EngineTableAndTheRowFloor) {
  gemm_bf16_clear_engines();
  EXPECT_EQ(gemm_bf16_engine_for(4096, 64, 96, LinearProduct::kForward), Bf16Engine::kOneDnn);
  for (LinearProduct p : {LinearProduct::kForward, LinearProduct::kDinp, LinearProduct::kDweight})
    gemm_bf16_set_engine(64, 96, p, Bf16Engine::kPacked);
  gemm_bf16_set_engine(96, 64, LinearProduct::kForward, Bf16Engine::kOneDnn);
  EXPECT_EQ(gemm_bf16_engine_for(kBf16PackedMinRows, 64, 96, LinearProduct::kForward), Bf16Engine::kPacked);
  EXPECT_EQ(gemm_bf16_engine_for(kBf16PackedMinRows, 64, 96, LinearProduct::kDinp), Bf16Engine::kPacked);
  EXPECT_EQ(gemm_bf16_engine_for(kBf16PackedMinRows - 1, 64, 96, LinearProduct::kForward), Bf16Engine::kOneDnn);
  EXPECT_EQ(gemm_bf16_engine_for(kBf16PackedMinRows - 1, 64, 96, LinearProduct::kDinp), Bf16Engine::kOneDnn);
  EXPECT_EQ(gemm_bf16_engine_for(1, 64, 96, LinearProduct::kDweight), Bf16Engine::kPacked);
  EXPECT_EQ(gemm_bf16_engine_for(4096, 96, 64, LinearProduct::kForward), Bf16Engine::kOneDnn);  // (in, out) order
  EXPECT_EQ(gemm_bf16_engine_for(4096, 96, 64, LinearProduct::kDinp), Bf16Engine::kOneDnn);     // never set
  gemm_bf16_clear_engines();
  EXPECT_EQ(gemm_bf16_engine_for(4096, 64, 96, LinearProduct::kDweight), Bf16Engine::kOneDnn);
}

// The portable path computes what the bf16 units compute: a whole linear layer both ways.
TEST(MatmulBf16Paths, PortableAgreesWithTheBf16Units) {
  if (!gemm_bf16_native()) GTEST_SKIP() << "no bf16 units on this CPU: only the portable path exists here";
  const int N = 300, IC = 96, OC = 130;
  auto x = randn((size_t)N * IC, 11), w = randn((size_t)OC * IC, 12);
  auto w16 = to_bf16(w);
  std::vector<uint16_t> x16((size_t)N * IC);
  std::vector<float> a((size_t)N * OC), b((size_t)N * OC);
  matmul_forward_bf16(a.data(), x16.data(), x.data(), w16.data(), N, IC, OC);
  gemm_bf16_set_portable(true);
  EXPECT_FALSE(gemm_bf16_native());
  matmul_forward_bf16(b.data(), x16.data(), x.data(), w16.data(), N, IC, OC);
  gemm_bf16_set_portable(false);
  EXPECT_TRUE(gemm_bf16_native());
  EXPECT_LT(max_err(a, b), 2e-6 * std::sqrt((double)IC));
}
