// rope_forward vs the textbook reference (angles recomputed per element), the backward as the
// exact inverse rotation, and vs finite differences; explicit positions (document restarts).
#include "kernel_check.hpp"
#include "smelt/kernels/kernels.hpp"

using namespace smelt;
using namespace smelt::test;

TEST(Rope, MatchesReferenceInverseAndFiniteDifferences) {
  const int B = 2, T = 37, NH = 3, NKV = 1, HS = 16, N = B * T, QKV = (NH + 2 * NKV) * HS;
  const float theta = 10000.0f;
  std::vector<float> table((size_t)T * HS);
  const std::vector<double> freq = rope_theta_freq(HS, theta);
  rope_table(table.data(), T, HS, freq.data());
  std::vector<int32_t> pos(N);
  for (int n = 0; n < N; n++) pos[n] = (n % T) < 20 ? n % T : n % T - 20;  // a restart at t=20
  for (const int32_t* p : {(const int32_t*)nullptr, (const int32_t*)pos.data()}) {
    auto x = randn((size_t)N * QKV, 1);
    auto y = x, y_ref = x;
    rope_forward(y.data(), p, table.data(), N, T, QKV, 0, NH, HS);
    rope_forward(y.data(), p, table.data(), N, T, QKV, NH * HS, NKV, HS);
    rope_forward_ref(y_ref.data(), p, N, T, QKV, 0, NH, HS, freq.data());
    rope_forward_ref(y_ref.data(), p, N, T, QKV, NH * HS, NKV, HS, freq.data());
    EXPECT_LT(max_err(y, y_ref), 1e-5);
    // v columns untouched
    for (int n = 0; n < N; n++)
      for (int i = (NH + NKV) * HS; i < QKV; i++) ASSERT_EQ(y[(size_t)n * QKV + i], x[(size_t)n * QKV + i]);
    auto back = y;
    rope_backward(back.data(), p, table.data(), N, T, QKV, 0, NH, HS);
    rope_backward(back.data(), p, table.data(), N, T, QKV, NH * HS, NKV, HS);
    EXPECT_LT(max_err(back, x), 1e-5);
    auto back_ref = y;
    rope_backward_ref(back_ref.data(), p, N, T, QKV, 0, NH, HS, freq.data());
    rope_backward_ref(back_ref.data(), p, N, T, QKV, NH * HS, NKV, HS, freq.data());
    EXPECT_LT(max_err(back_ref, back), 1e-5);

    auto dout = randn((size_t)N * QKV, 2);
    auto g = dout;
    rope_backward(g.data(), p, table.data(), N, T, QKV, 0, NH, HS);
    rope_backward(g.data(), p, table.data(), N, T, QKV, NH * HS, NKV, HS);
    auto loss = [&] {
      auto yy = x;
      rope_forward(yy.data(), p, table.data(), N, T, QKV, 0, NH, HS);
      rope_forward(yy.data(), p, table.data(), N, T, QKV, NH * HS, NKV, HS);
      return dot_loss(yy, dout);
    };
    check_fd(x, g, loss);
  }
}
