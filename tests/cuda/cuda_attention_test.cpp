// CUDA attention (kernels/cuda/attention.cu) against the CPU kernels: out against the (T,T)
// reference, lse against the CPU flash kernel, dqkv against the reference backward; plain causal,
// document segments, and documents followed by padding (-1). Also: dqkv fully overwritten, and the
// same bits on every run. Skipped without a CUDA device.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.hpp"
#include "kernels/kernel_check.hpp"
#include "smelt/kernels/kernels.hpp"

namespace smelt {
namespace {

using test::DeviceVec;
using test::norm_err;
using test::randn;
using test::report;

using test::AttnShape;
using test::count_non_finite;
using test::Mask;
using test::segments;
using Shape = AttnShape;

// fp32 on both sides with sums in different orders (the references sum in double, then round):
// normwise relative error ||gpu - cpu||_2 / ||cpu||_2 <= 1e-5 for out, lse and dqkv, and the
// largest elementwise error <= 1e-5 of the tensor's largest magnitude. A CPU emulation of these
// kernels measured 1e-8 to 4e-7 on both measures.
constexpr double kBound = 1e-5;

// max |a - b| / max |b|.
double max_err_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0, s = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); i++) {
    m = std::max(m, std::fabs((double)a[i] - b[i]));
    s = std::max(s, (double)std::fabs(b[i]));
  }
  return s > 0 ? m / s : m;
}


void check(const Shape& s, Mask mask) {
  const int B = s.B, T = s.T, NH = s.NH, NKV = s.NKV, HS = s.HS;
  const int N = B * T, QKV = (NH + 2 * NKV) * HS, OC = NH * HS;
  const char* mask_name[] = {"causal", "documents", "documents+padding"};
  const std::string tag = "B" + std::to_string(B) + " T" + std::to_string(T) + " NH" + std::to_string(NH) +
                          " NKV" + std::to_string(NKV) + " HS" + std::to_string(HS) + " " + mask_name[(int)mask];
  std::printf("%s\n", tag.c_str());
  const auto qkv = randn((size_t)N * QKV, 31), dout = randn((size_t)N * OC, 32);
  const auto seg = segments(s, mask, 33);
  const int32_t* sp = mask == Mask::kCausal ? nullptr : seg.data();

  std::vector<float> out_ref((size_t)N * OC), out_cpu((size_t)N * OC), lse_cpu((size_t)B * NH * T);
  std::vector<float> dqkv_ref((size_t)N * QKV), scratch((size_t)T * T);
  attention_forward_ref(out_ref.data(), qkv.data(), sp, scratch.data(), B, T, NH, NKV, HS);
  attention_forward(out_cpu.data(), lse_cpu.data(), qkv.data(), sp, B, T, NH, NKV, HS);
  attention_backward_ref(dqkv_ref.data(), dout.data(), qkv.data(), sp, scratch.data(), B, T, NH, NKV, HS);

  DeviceVec<float> d_qkv(qkv), d_dout(dout), d_out((int64_t)N * OC), d_lse((int64_t)B * NH * T);
  DeviceVec<float> d_delta((int64_t)B * NH * T), d_dqkv((int64_t)N * QKV);
  DeviceVec<int32_t> d_seg(seg);
  const int32_t* dsp = sp ? d_seg.p : nullptr;
  ASSERT_NE(d_qkv.p, nullptr);
  ASSERT_NE(d_dqkv.p, nullptr);

  cuda::attention_forward(d_out.p, d_lse.p, d_qkv.p, dsp, B, T, NH, NKV, HS, nullptr);
  ASSERT_EQ(cuda::stream_sync(nullptr), "");
  const auto out = d_out.download(), lse = d_lse.download();
  EXPECT_EQ(count_non_finite(out), 0);
  EXPECT_EQ(count_non_finite(lse), 0);
  report("attention_forward out (vs reference)", norm_err(out, out_ref), kBound);
  report("attention_forward out, max error / max |out|", max_err_rel(out, out_ref), kBound);
  report("attention_forward lse (vs CPU flash kernel)", norm_err(lse, lse_cpu), kBound);
  report("attention_forward lse, max error / max |lse|", max_err_rel(lse, lse_cpu), kBound);

  // dqkv starts as NaN (all bytes 0xFF): every element must be written.
  const int64_t dqkv_bytes = (int64_t)N * QKV * (int64_t)sizeof(float);
  cuda::memset_device(d_dqkv.p, 0xFF, dqkv_bytes, nullptr);
  cuda::attention_backward(d_dqkv.p, d_delta.p, d_dout.p, d_qkv.p, d_out.p, d_lse.p, dsp, B, T, NH, NKV, HS,
                           nullptr);
  ASSERT_EQ(cuda::stream_sync(nullptr), "");
  const auto dqkv = d_dqkv.download();
  EXPECT_EQ(count_non_finite(dqkv), 0) << "dqkv elements left unwritten (or not finite)";
  report("attention_backward dqkv (vs reference)", norm_err(dqkv, dqkv_ref), kBound);
  report("attention_backward dqkv, max error / max |dqkv|", max_err_rel(dqkv, dqkv_ref), kBound);

  // The same inputs give the same bits: forward and backward again, on NaN-filled buffers.
  cuda::memset_device(d_out.p, 0xFF, (int64_t)N * OC * (int64_t)sizeof(float), nullptr);
  cuda::attention_forward(d_out.p, d_lse.p, d_qkv.p, dsp, B, T, NH, NKV, HS, nullptr);
  ASSERT_EQ(cuda::stream_sync(nullptr), "");
  const auto out2 = d_out.download(), lse2 = d_lse.download();
  EXPECT_EQ(std::memcmp(out2.data(), out.data(), out.size() * sizeof(float)), 0) << "forward out not deterministic";
  EXPECT_EQ(std::memcmp(lse2.data(), lse.data(), lse.size() * sizeof(float)), 0) << "forward lse not deterministic";
  cuda::memset_device(d_dqkv.p, 0xFF, dqkv_bytes, nullptr);
  cuda::attention_backward(d_dqkv.p, d_delta.p, d_dout.p, d_qkv.p, d_out.p, d_lse.p, dsp, B, T, NH, NKV, HS,
                           nullptr);
  ASSERT_EQ(cuda::stream_sync(nullptr), "");
  const auto dqkv2 = d_dqkv.download();
  EXPECT_EQ(std::memcmp(dqkv2.data(), dqkv.data(), dqkv.size() * sizeof(float)), 0) << "backward not deterministic";
}

void check_all_masks(const Shape& s) {
  for (Mask m : {Mask::kCausal, Mask::kDocuments, Mask::kDocumentsPadded}) check(s, m);
}

// T = 67: one full 64-row tile and a partial one; HS 16; two query heads per kv head.
TEST(CudaAttention, GroupedQueryHeadSize16PartialTile) {
  SMELT_REQUIRE_CUDA_DEVICE();
  check_all_masks({2, 67, 4, 2, 16});
}

// T = 256: whole tiles only; one query head per kv head.
TEST(CudaAttention, MultiHeadHeadSize64WholeTiles) {
  SMELT_REQUIRE_CUDA_DEVICE();
  check_all_masks({1, 256, 8, 8, 64});
}

// HS 128 (the largest), three query heads per kv head, T = 2 tiles + 2 rows.
TEST(CudaAttention, GroupedQueryHeadSize128) {
  SMELT_REQUIRE_CUDA_DEVICE();
  check_all_masks({2, 130, 6, 2, 128});
}

// 16 tiles, one kv head for four query heads: long sums, many fully masked tiles with documents.
TEST(CudaAttention, MultiQueryLongSequence) {
  SMELT_REQUIRE_CUDA_DEVICE();
  check_all_masks({1, 1000, 4, 1, 64});
}

// Head sizes that are not a power of two (zero-padded columns inside the kernels) nor, for 6, a
// multiple of 4.
TEST(CudaAttention, HeadSizesNotAPowerOfTwo) {
  SMELT_REQUIRE_CUDA_DEVICE();
  check_all_masks({1, 70, 3, 3, 6});
  check_all_masks({2, 100, 4, 2, 40});
}

}  // namespace
}  // namespace smelt
