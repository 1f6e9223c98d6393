// Global gradient norm: vs a long-double sum, identical bits for 1 and 2 threads, clip factor.
#include "kernel_check.hpp"
#include "smelt/kernels/kernels.hpp"

using namespace smelt;
using namespace smelt::test;

TEST(GradNorm, MatchesReferenceAndIsThreadInvariant) {
  auto g = randn(300001, 1);
  double ref = grad_norm_squared_ref(g.data(), (int64_t)g.size());
  kernels_set_threads(1);
  double a = grad_norm_squared(g.data(), (int64_t)g.size());
  kernels_set_threads(2);
  double b = grad_norm_squared(g.data(), (int64_t)g.size());
  EXPECT_EQ(a, b);
  EXPECT_NEAR(a, ref, 1e-12 * ref);
  EXPECT_EQ(grad_clip_scale(0.5, 1.0f), 1.0f);
  EXPECT_NEAR(grad_clip_scale(4.0, 1.0f), 0.25f, 1e-6);
  EXPECT_EQ(grad_clip_scale(4.0, 0.0f), 1.0f);
}
