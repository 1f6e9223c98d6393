// embedding_forward/backward vs the naive references; backward bit-identical for 1 and 2 threads.
#include "kernel_check.hpp"
#include "smelt/kernels/kernels.hpp"

using namespace smelt;
using namespace smelt::test;

TEST(Embedding, ForwardBackwardMatchReference) {
  const int N = 75, C = 48, V = 50;
  auto wte = randn((size_t)V * C, 1);
  std::vector<int32_t> tok(N);
  for (int n = 0; n < N; n++) tok[n] = (n * 7) % 13;  // repeated tokens: the scatter must add
  std::vector<float> out(N * C), out_ref(N * C);
  embedding_forward(out.data(), tok.data(), wte.data(), N, C, V);
  embedding_forward_ref(out_ref.data(), tok.data(), wte.data(), N, C, V);
  EXPECT_EQ(out, out_ref);

  auto dout = randn((size_t)N * C, 2);
  std::vector<float> dw_ref((size_t)V * C, 0.5f);
  embedding_backward_ref(dw_ref.data(), dout.data(), tok.data(), N, C, V);
  for (int threads : {1, 2}) {
    kernels_set_threads(threads);
    std::vector<float> dw((size_t)V * C, 0.5f);  // accumulates onto what is there
    embedding_backward(dw.data(), dout.data(), tok.data(), N, C, V);
    EXPECT_EQ(dw, dw_ref) << threads << " threads";
  }
}
