// Flash-style attention vs the (T,T)-matrix reference: forward, lse-based backward, grouped-query
// heads, segment (document) masks, T not a multiple of the 64-key tile; finite differences;
// bit-identical results for 1 and 2 threads.
#include <cmath>
#include <cstdio>

#include "kernel_check.hpp"
#include "smelt/kernels/kernels.hpp"

using namespace smelt;
using namespace smelt::test;

namespace {
struct Shape { int B, T, NH, NKV, HS; bool seg; };

// Segment ids of three documents per row: [0, T/3), [T/3, T/2), [T/2, T).
std::vector<int32_t> three_documents(const Shape& s) {
  std::vector<int32_t> seg((size_t)s.B * s.T);
  for (size_t n = 0; n < seg.size(); n++) {
    const int t = (int)(n % s.T);
    seg[n] = t < s.T / 3 ? 0 : (t < s.T / 2 ? 1 : 2);
  }
  return seg;
}

void run(const Shape& s) {
  const int N = s.B * s.T, QKV = (s.NH + 2 * s.NKV) * s.HS, OC = s.NH * s.HS;
  auto qkv = randn((size_t)N * QKV, 11);
  const std::vector<int32_t> seg = three_documents(s);
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

// bf16 attention (attention_bf16.cpp) against the fp32 reference: products of bf16-rounded
// inputs (relative error 2^-8 each) summed in fp32 leave errors of a few 1e-3 of the tensor's
// scale (measured 4.2e-3 to 5.4e-3 forward, 3.3e-3 to 4.8e-3 backward); allowed 2e-2 forward and
// 3e-2 backward, and at least 1e-5 (the bf16 path must show).
// Query blocks of 128 rows: T = 37 (one partial block), 133 and 300 (several, the last partial),
// with segments; the lse it saves is the fp32 kernel's (so either backward can follow either
// forward); 1 and 2 threads give the same bits.
namespace {
void run_bf16(const Shape& s) {
  const int N = s.B * s.T, QKV = (s.NH + 2 * s.NKV) * s.HS, OC = s.NH * s.HS;
  auto qkv = randn((size_t)N * QKV, 21);
  const std::vector<int32_t> seg = three_documents(s);
  const int32_t* sp = s.seg ? seg.data() : nullptr;
  std::vector<float> out((size_t)N * OC), lse((size_t)s.B * s.NH * s.T), out_ref((size_t)N * OC);
  std::vector<float> lse32(lse.size()), out32((size_t)N * OC);
  std::vector<float> ref_scratch((size_t)s.T * s.T), scratch(attention_bf16_scratch_floats(s.T, 2));
  std::vector<uint16_t> qkv16((size_t)N * QKV), dout16((size_t)N * OC);
  attention_forward_bf16(out.data(), lse.data(), qkv16.data(), scratch.data(), qkv.data(), sp, s.B, s.T, s.NH,
                         s.NKV, s.HS);
  attention_forward_ref(out_ref.data(), qkv.data(), sp, ref_scratch.data(), s.B, s.T, s.NH, s.NKV, s.HS);
  attention_forward(out32.data(), lse32.data(), qkv.data(), sp, s.B, s.T, s.NH, s.NKV, s.HS);
  EXPECT_LT(max_err(out, out_ref), 2e-2);
  EXPECT_GT(max_err(out, out_ref), 1e-5);
  EXPECT_LT(max_err(lse, lse32), 2e-2);

  auto dout = randn((size_t)N * OC, 22);
  std::vector<float> dqkv((size_t)N * QKV, 9.0f), dqkv_ref((size_t)N * QKV);  // 9: overwrite
  attention_backward_bf16(dqkv.data(), qkv16.data(), dout16.data(), scratch.data(), dout.data(), qkv.data(),
                          out.data(), lse.data(), sp, s.B, s.T, s.NH, s.NKV, s.HS);
  attention_backward_ref(dqkv_ref.data(), dout.data(), qkv.data(), sp, ref_scratch.data(), s.B, s.T, s.NH, s.NKV,
                         s.HS);
  EXPECT_LT(max_err(dqkv, dqkv_ref), 3e-2);
  EXPECT_GT(max_err(dqkv, dqkv_ref), 1e-5);
  std::printf("bf16 attention T=%d: out err %.2e, dqkv err %.2e\n", s.T, max_err(out, out_ref), max_err(dqkv, dqkv_ref));

  std::vector<float> o[2], d[2];
  for (int t = 0; t < 2; t++) {
    kernels_set_threads(t + 1);
    o[t].assign((size_t)N * OC, 0.0f), d[t].assign((size_t)N * QKV, 0.0f);
    attention_forward_bf16(o[t].data(), lse.data(), qkv16.data(), scratch.data(), qkv.data(), sp, s.B, s.T, s.NH,
                           s.NKV, s.HS);
    attention_backward_bf16(d[t].data(), qkv16.data(), dout16.data(), scratch.data(), dout.data(), qkv.data(),
                            o[t].data(), lse.data(), sp, s.B, s.T, s.NH, s.NKV, s.HS);
  }
  EXPECT_EQ(o[0], o[1]);
  EXPECT_EQ(d[0], d[1]);
}
}  // namespace

TEST(AttentionBf16, MultiHeadCausal) { run_bf16({2, 37, 4, 4, 16, false}); }
TEST(AttentionBf16, GroupedQueryOddLength) { run_bf16({1, 133, 4, 2, 8, false}); }
TEST(AttentionBf16, MultiQueryWithSegmentsSeveralBlocks) { run_bf16({2, 300, 4, 1, 8, true}); }
