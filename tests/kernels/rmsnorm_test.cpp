// rmsnorm_forward/backward vs the references (1e-5) and vs central finite differences; the
// backward adds into dinp (residual stream) and dweight; the per-head form (QK-norm) against its
// reference.
#include "kernel_check.hpp"
#include "smelt/kernels/kernels.hpp"

using namespace smelt;
using namespace smelt::test;

TEST(RmsNorm, MatchesReferenceAndFiniteDifferences) {
  const int N = 37, C = 64;
  const float eps = 1e-5f;
  auto x = randn((size_t)N * C, 1), w = randn(C, 2), dout = randn((size_t)N * C, 3);
  for (auto& v : w) v += 1.0f;
  std::vector<float> y(N * C), r(N), y_ref(N * C), r_ref(N);
  rmsnorm_forward(y.data(), r.data(), x.data(), w.data(), N, C, eps);
  rmsnorm_forward_ref(y_ref.data(), r_ref.data(), x.data(), w.data(), N, C, eps);
  EXPECT_LT(max_err(y, y_ref), 1e-5);
  EXPECT_LT(max_err(r, r_ref), 1e-5);

  std::vector<float> dx(N * C, 0.25f), dw(C, 0.5f), dx_ref(N * C, 0.25f), dw_ref(C, 0.5f);
  rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), r.data(), N, C);
  rmsnorm_backward_ref(dx_ref.data(), dw_ref.data(), dout.data(), x.data(), w.data(), r.data(), N, C);
  EXPECT_LT(max_err(dx, dx_ref), 1e-5);
  EXPECT_LT(max_err(dw, dw_ref), 1e-5);

  // finite differences of sum(y * dout), from zeroed gradients
  std::vector<float> gx(N * C, 0.0f), gw(C, 0.0f);
  rmsnorm_backward(gx.data(), gw.data(), dout.data(), x.data(), w.data(), r.data(), N, C);
  auto loss = [&] {
    std::vector<float> yy(N * C), rr(N);
    rmsnorm_forward(yy.data(), rr.data(), x.data(), w.data(), N, C, eps);
    return dot_loss(yy, dout);
  };
  check_fd(x, gx, loss);
  check_fd(w, gw, loss);
}

TEST(RmsNorm, ThreadCountDoesNotChangeBits) {
  const int N = 53, C = 96;
  auto x = randn((size_t)N * C, 4), w = randn(C, 5), dout = randn((size_t)N * C, 6);
  std::vector<float> y(N * C), r(N), dx1(N * C, 0), dw1(C, 0), dx2(N * C, 0), dw2(C, 0);
  kernels_set_threads(1);
  rmsnorm_forward(y.data(), r.data(), x.data(), w.data(), N, C, 1e-5f);
  rmsnorm_backward(dx1.data(), dw1.data(), dout.data(), x.data(), w.data(), r.data(), N, C);
  kernels_set_threads(2);
  rmsnorm_backward(dx2.data(), dw2.data(), dout.data(), x.data(), w.data(), r.data(), N, C);
  EXPECT_EQ(dx1, dx2);
  EXPECT_EQ(dw1, dw2);
}

// QK-norm's per-head form, in place on strided rows (heads [0, nheads) of HS at column col0 of
// rows of row_stride): against its reference, the gradient written over dy, dweight added; the
// columns outside the heads untouched; the same bits for 1 and 2 threads.
TEST(RmsNorm, PerHeadInPlaceMatchesReferenceAndThreadCountDoesNotChangeBits) {
  const int N = 70, nheads = 3, HS = 32, col0 = 8, stride = col0 + nheads * HS + 5;
  const float eps = 1e-6f;
  auto qkv = randn((size_t)N * stride, 7), w = randn(HS, 8), dy0 = randn((size_t)N * stride, 9);
  for (auto& v : w) v += 1.0f;
  std::vector<float> x = qkv, x_ref = qkv, raw((size_t)N * nheads * HS), raw_ref(raw.size());
  std::vector<float> r((size_t)N * nheads), r_ref(r.size());
  head_rmsnorm_forward(x.data(), raw.data(), r.data(), w.data(), N, stride, col0, nheads, HS, eps);
  head_rmsnorm_forward_ref(x_ref.data(), raw_ref.data(), r_ref.data(), w.data(), N, stride, col0, nheads, HS, eps);
  EXPECT_LT(max_err(x, x_ref), 1e-5);
  EXPECT_LT(max_err(r, r_ref), 1e-5);
  EXPECT_EQ(raw, raw_ref);
  for (int n = 0; n < N; n++)
    for (int c = 0; c < stride; c++)
      if (c < col0 || c >= col0 + nheads * HS) ASSERT_EQ(x[(size_t)n * stride + c], qkv[(size_t)n * stride + c]);

  std::vector<float> dy = dy0, dy_ref = dy0, dw(HS, 0.5f), dw_ref(HS, 0.5f);
  head_rmsnorm_backward(dy.data(), dw.data(), raw.data(), w.data(), r.data(), N, stride, col0, nheads, HS);
  head_rmsnorm_backward_ref(dy_ref.data(), dw_ref.data(), raw.data(), w.data(), r.data(), N, stride, col0, nheads, HS);
  EXPECT_LT(max_err(dy, dy_ref), 1e-5);
  EXPECT_LT(max_err(dw, dw_ref), 1e-4);

  std::vector<float> dy1 = dy0, dy2 = dy0, dw1(HS, 0), dw2(HS, 0);
  kernels_set_threads(1);
  head_rmsnorm_backward(dy1.data(), dw1.data(), raw.data(), w.data(), r.data(), N, stride, col0, nheads, HS);
  kernels_set_threads(2);
  head_rmsnorm_backward(dy2.data(), dw2.data(), raw.data(), w.data(), r.data(), N, stride, col0, nheads, HS);
  EXPECT_EQ(dy1, dy2);
  EXPECT_EQ(dw1, dw2);
}
