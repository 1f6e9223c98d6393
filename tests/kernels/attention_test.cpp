// Flash-style attention vs the (T,T)-matrix reference: forward, lse-based backward, grouped-query
// heads, segment (document) masks, T not a multiple of the 64-key tile; finite differences;
// bit-identical results for 1 and 2 threads.
#include <cmath>

#include "kernel_check.hpp"
#include "smelt/kernels/kernels.hpp"

using namespace smelt;
using namespace smelt::test;

namespace {
struct Shape { int B, T, NH, NKV, HS; bool seg; };

void run(const Shape& s) {
  const int N = s.B * s.T, QKV = (s.NH + 2 * s.NKV) * s.HS, OC = s.NH * s.HS;
  auto qkv = randn((size_t)N * QKV, 11);
  std::vector<int32_t> seg(N);
  for (int n = 0; n < N; n++) seg[n] = (n % s.T) < s.T / 3 ? 0 : ((n % s.T) < s.T / 2 ? 1 : 2);
  const int32_t* sp = s.seg ? seg.data() : nullptr;
  std::vector<float> out((size_t)N * OC), lse((size_t)s.B * s.NH * s.T), out_ref((size_t)N * OC);
  std::vector<float> scratch((size_t)s.T * s.T);
  attention_forward(out.data(), lse.data(), qkv.data(), sp, s.B, s.T, s.NH, s.NKV, s.HS);
  attention_forward_ref(out_ref.data(), qkv.data(), sp, scratch.data(), s.B, s.T, s.NH, s.NKV, s.HS);
  EXPECT_LT(max_err(out, out_ref), 1e-5);

  auto dout = randn((size_t)N * OC, 12);
  std::vector<float> dqkv((size_t)N * QKV, 9.0f), dqkv_ref((size_t)N * QKV);  // 9: overwrite
  attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), sp, s.B, s.T,
                     s.NH, s.NKV, s.HS);
  attention_backward_ref(dqkv_ref.data(), dout.data(), qkv.data(), sp, scratch.data(), s.B, s.T,
                         s.NH, s.NKV, s.HS);
  EXPECT_LT(max_err(dqkv, dqkv_ref), 1e-5);

  auto loss = [&] {
    std::vector<float> o((size_t)N * OC), l((size_t)s.B * s.NH * s.T);
    attention_forward(o.data(), l.data(), qkv.data(), sp, s.B, s.T, s.NH, s.NKV, s.HS);
    return dot_loss(o, dout);
  };
  check_fd(qkv, dqkv, loss, 30);

  // threads: same bits
  std::vector<float> o1((size_t)N * OC), o2((size_t)N * OC), d1((size_t)N * QKV), d2((size_t)N * QKV);
  kernels_set_threads(1);
  attention_forward(o1.data(), lse.data(), qkv.data(), sp, s.B, s.T, s.NH, s.NKV, s.HS);
  attention_backward(d1.data(), dout.data(), qkv.data(), o1.data(), lse.data(), sp, s.B, s.T, s.NH, s.NKV, s.HS);
  kernels_set_threads(2);
  attention_forward(o2.data(), lse.data(), qkv.data(), sp, s.B, s.T, s.NH, s.NKV, s.HS);
  attention_backward(d2.data(), dout.data(), qkv.data(), o2.data(), lse.data(), sp, s.B, s.T, s.NH, s.NKV, s.HS);
  EXPECT_EQ(o1, o2);
  EXPECT_EQ(d1, d2);
}
}  // namespace

TEST(Attention, MultiHeadCausal) { run({2, 37, 4, 4, 16, false}); }
TEST(Attention, GroupedQueryOddLength) { run({1, 133, 4, 2, 8, false}); }  // 133 = 2 tiles + 5
TEST(Attention, MultiQueryWithSegments) { run({2, 70, 4, 1, 8, true}); }
