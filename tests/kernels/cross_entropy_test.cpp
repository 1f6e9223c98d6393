// Fused cross-entropy vs the two-pass double reference: losses, in-place dlogits, ignored targets
// (-1 rows get zero loss and zero gradient), a vocabulary that is not a multiple of the 2048
// chunk; and vs finite differences of the mean loss.
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

// Training's fused forward under bf16 makes the same losses and lse as the forward and the same
// bf16 gradient as the backward, bit for bit, in one pass over the logits.
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
  const auto keep = logits;
  cross_entropy_forward_grad_bf16(loss2.data(), lse2.data(), got.data(), logits.data(), tgt.data(), dloss, N, V);
  EXPECT_EQ(loss2, loss);
  EXPECT_EQ(lse2, lse);
  EXPECT_EQ(got, want);
  EXPECT_EQ(logits, keep);
}
