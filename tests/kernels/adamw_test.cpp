// Fused AdamW vs the double reference over 5 steps (with decay, clipping scale, bias correction).
// The step against torch.optim.AdamW is in tests/model/model_test.cpp.
#include "kernel_check.hpp"
#include "smelt/kernels/kernels.hpp"

using namespace smelt;
using namespace smelt::test;

TEST(AdamW, MatchesReference) {
  const int64_t n = 1000;
  auto p = randn(n, 1), p_ref = p;
  std::vector<float> m(n, 0), v(n, 0), m_ref(n, 0), v_ref(n, 0);
  for (int t = 1; t <= 5; t++) {
    auto g = randn(n, 10 + t);
    adamw_step(p.data(), m.data(), v.data(), g.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, t);
    adamw_step_ref(p_ref.data(), m_ref.data(), v_ref.data(), g.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f,
                   0.1f, 0.7f, t);
  }
  EXPECT_LT(max_err(p, p_ref), 1e-6);
  EXPECT_LT(max_err(m, m_ref), 1e-6);
  EXPECT_LT(max_err(v, v_ref), 1e-6);
}
