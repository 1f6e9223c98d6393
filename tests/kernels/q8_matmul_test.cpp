// The q8_0 training GEMMs of a frozen base (kernels/q8_matmul.hpp) against a float64 product with
// the dequantized weight, for odd shapes (partial tiles and blocks, beta 0 and 1), and their bits
// against the thread count.
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "kernel_check.hpp"
#include "smelt/kernels/kernels.hpp"
#include "smelt/kernels/q8_matmul.hpp"

using namespace smelt;

namespace {

struct Shape {
  int N, IC, OC;
};

// W (OC, IC) quantized, and its dequantized values.
void quantized(int IC, int OC, uint64_t seed, std::vector<BlockQ8_0>& q, std::vector<float>& deq) {
  const std::vector<float> w = test::randn((size_t)OC * IC, seed, 0.3f);
  q.resize((size_t)OC * IC / kQ8Block);
  deq.resize(w.size());
  for (int o = 0; o < OC; o++) {
    quantize_row_q8_0(q.data() + (size_t)o * IC / kQ8Block, w.data() + (size_t)o * IC, IC);
    dequantize_row_q8_0(deq.data() + (size_t)o * IC, q.data() + (size_t)o * IC / kQ8Block, IC);
  }
}

class Q8Matmul : public ::testing::TestWithParam<Shape> {};

}  // namespace

TEST_P(Q8Matmul, ForwardAndInputGradientEqualTheDequantizedProduct) {
  const Shape s = GetParam();
  std::vector<BlockQ8_0> q;
  std::vector<float> w;
  quantized(s.IC, s.OC, 1, q, w);
  const std::vector<float> x = test::randn((size_t)s.N * s.IC, 2), dy = test::randn((size_t)s.N * s.OC, 3);
  std::vector<float> y0 = test::randn((size_t)s.N * s.OC, 4);
  for (float beta : {0.0f, 1.0f}) {
    std::vector<float> y = y0, want(y.size());
    for (int n = 0; n < s.N; n++)
      for (int o = 0; o < s.OC; o++) {
        double a = beta * (double)y0[(size_t)n * s.OC + o];
        for (int i = 0; i < s.IC; i++) a += (double)x[(size_t)n * s.IC + i] * w[(size_t)o * s.IC + i];
        want[(size_t)n * s.OC + o] = (float)a;
      }
    kernels_set_threads(2);
    matmul_forward_q8_0(y.data(), x.data(), q.data(), s.N, s.IC, s.OC, beta);
    EXPECT_LT(test::max_err(y, want), 1e-5) << "beta " << beta;
  }
  std::vector<float> dx((size_t)s.N * s.IC, 7.0f), want(dx.size());  // overwritten, whatever it held
  for (int n = 0; n < s.N; n++)
    for (int i = 0; i < s.IC; i++) {
      double a = 0;
      for (int o = 0; o < s.OC; o++) a += (double)dy[(size_t)n * s.OC + o] * w[(size_t)o * s.IC + i];
      want[(size_t)n * s.IC + i] = (float)a;
    }
  matmul_backward_input_q8_0(dx.data(), dy.data(), q.data(), s.N, s.IC, s.OC);
  EXPECT_LT(test::max_err(dx, want), 1e-5);
  // One thread: the same bits (tiles fixed by the shape).
  std::vector<float> y1 = y0, y2 = y0, dx1(dx.size());
  kernels_set_threads(1);
  matmul_forward_q8_0(y1.data(), x.data(), q.data(), s.N, s.IC, s.OC, 1.0f);
  matmul_backward_input_q8_0(dx1.data(), dy.data(), q.data(), s.N, s.IC, s.OC);
  kernels_set_threads(2);
  matmul_forward_q8_0(y2.data(), x.data(), q.data(), s.N, s.IC, s.OC, 1.0f);
  EXPECT_EQ(y1, y2);
  EXPECT_EQ(dx1, dx);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Q8Matmul,
                         ::testing::Values(Shape{1, 32, 1}, Shape{37, 96, 300}, Shape{64, 544, 257},
                                           Shape{5, 1056, 520}));
