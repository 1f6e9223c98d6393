// BLAS-backed linear layers vs double-accumulated references (1e-5 of the tensor scale): forward
// with beta 0 and 1 (residual add), dinp overwrite, dweight accumulate; rows and output features
// not multiples of the tile edges, one and two tiles per GEMM; bit-identical for 1 and 2 threads;
// on each fp32 GEMM back end (OpenBLAS, oneDNN, BLIS: two threads call it at once).
#include <array>

#include "kernel_check.hpp"
#include "test_references.hpp"
#include "smelt/kernels/kernels.hpp"

using namespace smelt;
using namespace smelt::test;

class Matmul : public ::testing::TestWithParam<std::array<int, 4>> {};

// {N, IC, OC}: one tile everywhere; then sides >= 1024, cut in two tiles (forward by columns,
// dinp by rows, dweight by rows), so 2 threads split every GEMM.
TEST_P(Matmul, MatchesReferenceAndIsThreadInvariant) {
  const int N = GetParam()[0], IC = GetParam()[1], OC = GetParam()[2];
  const GemmBackend be = (GemmBackend)GetParam()[3];
  if (be == GemmBackend::kBlis)
    SMELT_REQUIRE_REFERENCE(gemm_backend_available(be), "apt-get install libblis4-serial (scripts/install-deps)");
  gemm_set_backend(be);
  ASSERT_EQ(gemm_backend(), be);
  auto x = randn((size_t)N * IC, 1), w = randn((size_t)OC * IC, 2), dy = randn((size_t)N * OC, 3);
  std::vector<float> y_t[2], dx_t[2], dw_t[2];
  for (int threads : {1, 2}) {
    kernels_set_threads(threads);
    for (float beta : {0.0f, 1.0f}) {
      auto y = randn((size_t)N * OC, 4), y_ref = y;
      matmul_forward(y.data(), x.data(), w.data(), N, IC, OC, beta);
      matmul_forward_ref(y_ref.data(), x.data(), w.data(), N, IC, OC, beta);
      EXPECT_LT(max_err(y, y_ref), 1e-5);
      y_t[threads - 1] = y;
    }
    std::vector<float> dx((size_t)N * IC, 7.0f), dx_ref((size_t)N * IC);
    std::vector<float> dw((size_t)OC * IC, 0.5f), dw_ref((size_t)OC * IC, 0.5f);
    matmul_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), N, IC, OC);
    matmul_backward_ref(dx_ref.data(), dw_ref.data(), dy.data(), x.data(), w.data(), N, IC, OC);
    EXPECT_LT(max_err(dx, dx_ref), 1e-5);
    EXPECT_LT(max_err(dw, dw_ref), 1e-5);
    std::vector<float> dw2((size_t)OC * IC, 0.5f);
    matmul_backward(nullptr, dw2.data(), dy.data(), x.data(), w.data(), N, IC, OC);
    EXPECT_EQ(dw, dw2);
    dx_t[threads - 1] = dx;
    dw_t[threads - 1] = dw;
  }
  EXPECT_EQ(y_t[0], y_t[1]);
  EXPECT_EQ(dx_t[0], dx_t[1]);
  EXPECT_EQ(dw_t[0], dw_t[1]);
  gemm_set_backend(GemmBackend::kOpenBlas);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Matmul,
                         ::testing::Values(std::array<int, 4>{600, 40, 301, (int)GemmBackend::kOpenBlas},
                                           std::array<int, 4>{1100, 40, 1030, (int)GemmBackend::kOpenBlas},
                                           std::array<int, 4>{600, 40, 301, (int)GemmBackend::kOneDnn},
                                           std::array<int, 4>{1100, 40, 1030, (int)GemmBackend::kOneDnn},
                                           std::array<int, 4>{600, 40, 301, (int)GemmBackend::kBlis},
                                           std::array<int, 4>{1100, 40, 1030, (int)GemmBackend::kBlis}));
