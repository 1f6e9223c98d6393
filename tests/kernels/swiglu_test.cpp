// SwiGLU vs the double reference and vs finite differences.
#include "kernel_check.hpp"
#include "smelt/kernels/kernels.hpp"

using namespace smelt;
using namespace smelt::test;

TEST(SwiGlu, MatchesReferenceAndFiniteDifferences) {
  const int N = 37, H = 24;
  auto gu = randn((size_t)N * 2 * H, 1, 2.0f), dout = randn((size_t)N * H, 2);
  std::vector<float> y(N * H), y_ref(N * H);
  swiglu_forward(y.data(), gu.data(), N, H);
  swiglu_forward_ref(y_ref.data(), gu.data(), N, H);
  EXPECT_LT(max_err(y, y_ref), 1e-6);
  std::vector<float> d(N * 2 * H, 5.0f), d_ref(N * 2 * H);
  swiglu_backward(d.data(), dout.data(), gu.data(), N, H);
  swiglu_backward_ref(d_ref.data(), dout.data(), gu.data(), N, H);
  EXPECT_LT(max_err(d, d_ref), 1e-6);
  check_fd(gu, d, [&] {
    std::vector<float> yy(N * H);
    swiglu_forward(yy.data(), gu.data(), N, H);
    return dot_loss(yy, dout);
  });
}
