// Fused cross-entropy vs the two-pass double reference: losses, in-place dlogits, ignored targets
// (-1 rows get zero loss and zero gradient), a vocabulary that is not a multiple of the 2048
// chunk; and vs finite differences of the mean loss.
#include <cstring>

#include "kernel_check.hpp"
#include "smelt/kernels/kernels.hpp"

using namespace smelt;
using namespace smelt::test;

TEST(CrossEntropy, MatchesReferenceAndFiniteDifferences) {
  const int N = 23, V = 4133;
  auto logits = randn((size_t)N * V, 1, 3.0f);
  std::vector<int32_t> tgt(N);
  for (int n = 0; n < N; n++) tgt[n] = n % 5 == 3 ? -1 : (n * 977) % V;
  std::vector<float> loss(N), lse(N), loss_ref(N);
  cross_entropy_forward(loss.data(), lse.data(), logits.data(), tgt.data(), N, V);
  cross_entropy_forward_ref(loss_ref.data(), logits.data(), tgt.data(), N, V);
  EXPECT_LT(max_err(loss, loss_ref), 1e-5);
  for (int n = 0; n < N; n++) {
    if (tgt[n] < 0) EXPECT_EQ(loss[n], 0.0f);
  }

  const float dloss = 1.0f / 19;
  std::vector<float> d = logits, d_ref((size_t)N * V);
  cross_entropy_backward(d.data(), lse.data(), tgt.data(), dloss, N, V);
  cross_entropy_backward_ref(d_ref.data(), logits.data(), tgt.data(), dloss, N, V);
  EXPECT_LT(max_err(d, d_ref), 1e-7);

  auto fd_loss = [&] {
    std::vector<float> l(N), z(N);
    cross_entropy_forward(l.data(), z.data(), logits.data(), tgt.data(), N, V);
    double s = 0;
    for (float x : l) s += x;
    return s * dloss;
  };
  check_fd(logits, d, fd_loss, 60, 1e-2, 2e-3);
}

// The bf16 backward writes the fp32 backward's values rounded to bf16, bit for bit (every target
// position incl. the vector tail, ignored rows all zero), and leaves the logits as they were.
TEST(CrossEntropy, Bf16BackwardIsTheRoundedFp32Backward) {
  const int N = 23, V = 4133;
  auto logits = randn((size_t)N * V, 2, 3.0f);
  std::vector<int32_t> tgt(N);
  for (int n = 0; n < N; n++) tgt[n] = n % 5 == 3 ? -1 : (n == 7 ? V - 1 : (n * 977) % V);
  std::vector<float> loss(N), lse(N);
  cross_entropy_forward(loss.data(), lse.data(), logits.data(), tgt.data(), N, V);
  const float dloss = 1.0f / 19;
  std::vector<float> d = logits;
  cross_entropy_backward(d.data(), lse.data(), tgt.data(), dloss, N, V);
  std::vector<uint16_t> want(d.size()), got(d.size(), 0xffff);
  bf16_from_f32(want.data(), d.data(), (int64_t)d.size());
  const auto keep = logits;
  cross_entropy_backward_bf16(got.data(), logits.data(), lse.data(), tgt.data(), dloss, N, V);
  EXPECT_EQ(got, want);
  EXPECT_EQ(logits, keep);
}

// Training's fused forward under bf16 makes the forward's losses and lse (to fp32 rounding) and
// the backward's bf16 gradient (to one bf16 rounding: its probabilities come from one exponential
// per logit scaled per chunk, not a second exponential), overwriting its logits scratch. The
// vocabulary is not a multiple of the chunk or the vector width.
TEST(CrossEntropy, FusedForwardGradEqualsForwardThenBackward) {
  const int N = 23, V = 4133;
  auto logits = randn((size_t)N * V, 3, 3.0f);
  std::vector<int32_t> tgt(N);
  for (int n = 0; n < N; n++) tgt[n] = n % 5 == 3 ? -1 : (n == 7 ? V - 1 : (n * 977) % V);
  const float dloss = 1.0f / 19;
  std::vector<float> loss(N), lse(N), loss2(N, -1), lse2(N, -1);
  cross_entropy_forward(loss.data(), lse.data(), logits.data(), tgt.data(), N, V);
  std::vector<uint16_t> want((size_t)N * V), got((size_t)N * V, 0xffff);
  cross_entropy_backward_bf16(want.data(), logits.data(), lse.data(), tgt.data(), dloss, N, V);
  auto scratch = logits;
  cross_entropy_forward_grad_bf16(loss2.data(), lse2.data(), got.data(), scratch.data(), tgt.data(), dloss, N, V);
  for (int n = 0; n < N; n++) {
    EXPECT_NEAR(loss2[n], loss[n], 2e-6f * std::max(1.0f, loss[n])) << n;
    EXPECT_NEAR(lse2[n], lse[n], 2e-6f * std::fabs(lse[n])) << n;
  }
  auto f32 = [](uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  int differ = 0;
  for (size_t i = 0; i < got.size(); i++) {
    const float a = f32(got[i]), b = f32(want[i]);
    ASSERT_LE(std::fabs(a - b), std::ldexp(std::fabs(b), -7) + 1e-30f) << i;  // one bf16 step at most
    differ += got[i] != want[i];
  }
  EXPECT_LT(differ, (int)got.size() / 20) << "most values identical";
  for (int n = 0; n < N; n++)
    if (tgt[n] < 0)
      for (int v = 0; v < V; v++) ASSERT_EQ(got[(size_t)n * V + v], 0) << n;
}

// The prediction entropy of one row: log V for equal logits, and the double-precision definition
// on random ones (a vocabulary that is not a multiple of the chunk or the vector width).
TEST(CrossEntropy, SoftmaxEntropyMatchesTheDefinition) {
  const int V = 4133;
  std::vector<float> flat(V, 1.5f);
  EXPECT_NEAR(softmax_entropy(flat.data(), V), std::log((double)V), 1e-5);
  auto z = randn(V, 4, 3.0f);
  double m = z[0], s = 0, sz = 0;
  for (float x : z) m = std::max(m, (double)x);
  for (float x : z) s += std::exp(x - m);
  for (float x : z) sz += std::exp(x - m) / s * (x - m);
  EXPECT_NEAR(softmax_entropy(z.data(), V), std::log(s) - sz, 1e-4);
}
