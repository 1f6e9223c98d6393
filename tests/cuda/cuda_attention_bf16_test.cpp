// CUDA bf16 attention (kernels/cuda/attention_bf16.cu) against the CPU bf16 kernel (the same
// rounding points) and the fp32 references; plain causal, document segments, and documents
// followed by padding (-1). Also: dqkv fully overwritten, and the same bits on every run. Skipped
// without a CUDA device.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.hpp"
#include "kernels/kernel_check.hpp"
#include "smelt/kernels/cuda/cuda_kernels.hpp"
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

// Bounds, normwise relative ||gpu - cpu||_2 / ||cpu||_2:
// - against the CPU bf16 kernel, out and dqkv 5e-3: both round the same bf16 Q, K, V, dO, but P
//   (and so dS) is rounded at slightly different values (the GPU rounds exp(s - running max)
//   before dividing by the sum, the CPU the normalised P; fp32 sums in other orders), and a value
//   near a bf16 midpoint then lands on the neighbour (2^-9 relative). A CPU emulation of these
//   kernels and a run on an H200 measured 1.7e-3 to 2.0e-3 (out), 1.2e-3 to 1.7e-3 (dqkv).
// - lse 1e-5: fp32 softmax statistics of the same bf16-operand scores (measured 3e-8 to 6e-8).
// - against the fp32 references, out and dqkv 2e-2 (bf16's 2^-8 relative per operand; measured
//   2.4e-3 to 4.0e-3, as the CPU bf16 kernel's own 2.7e-3 to 4.0e-3), so that the kernel is held
//   right even if the CPU bf16 kernel were wrong.
constexpr double kBoundBf16 = 5e-3, kBoundLse = 1e-5, kBoundFp32 = 2e-2;


void check(const Shape& s, Mask mask) {
  const int B = s.B, T = s.T, NH = s.NH, NKV = s.NKV, HS = s.HS;
  const int N = B * T, QKV = (NH + 2 * NKV) * HS, OC = NH * HS;
  const char* mask_name[] = {"causal", "documents", "documents+padding"};
  const std::string tag = "B" + std::to_string(B) + " T" + std::to_string(T) + " NH" + std::to_string(NH) +
                          " NKV" + std::to_string(NKV) + " HS" + std::to_string(HS) + " " + mask_name[(int)mask];
  std::printf("%s\n", tag.c_str());
  ASSERT_TRUE(cuda::attention_bf16_supported(HS));
  const auto qkv = randn((size_t)N * QKV, 31), dout = randn((size_t)N * OC, 32);
  const auto seg = segments(s, mask, 33);
  const int32_t* sp = mask == Mask::kCausal ? nullptr : seg.data();

  // The CPU bf16 kernel on one thread (its scratch is per thread), then the fp32 references.
  kernels_set_threads(1);
  std::vector<float> out_cpu((size_t)N * OC), lse_cpu((size_t)B * NH * T), dqkv_cpu((size_t)N * QKV);
  std::vector<float> scratch(attention_bf16_scratch_floats(T, 1));
  std::vector<uint16_t> qkv16((size_t)N * QKV), dout16((size_t)N * OC);
  attention_forward_bf16(out_cpu.data(), lse_cpu.data(), qkv16.data(), scratch.data(), qkv.data(), sp, B, T, NH, NKV,
                         HS);
  attention_backward_bf16(dqkv_cpu.data(), qkv16.data(), dout16.data(), scratch.data(), dout.data(), qkv.data(),
                          out_cpu.data(), lse_cpu.data(), sp, B, T, NH, NKV, HS);
  std::vector<float> out_ref((size_t)N * OC), dqkv_ref((size_t)N * QKV), ref_scratch((size_t)T * T);
  attention_forward_ref(out_ref.data(), qkv.data(), sp, ref_scratch.data(), B, T, NH, NKV, HS);
  attention_backward_ref(dqkv_ref.data(), dout.data(), qkv.data(), sp, ref_scratch.data(), B, T, NH, NKV, HS);

  DeviceVec<float> d_qkv(qkv), d_dout(dout), d_out((int64_t)N * OC), d_lse((int64_t)B * NH * T);
  DeviceVec<float> d_delta((int64_t)B * NH * T), d_dqkv((int64_t)N * QKV);
  DeviceVec<uint16_t> d_qkv16((int64_t)N * QKV), d_dout16((int64_t)N * OC);
  DeviceVec<int32_t> d_seg(seg);
  const int32_t* dsp = sp ? d_seg.p : nullptr;
  ASSERT_NE(d_qkv.p, nullptr);
  ASSERT_NE(d_dqkv.p, nullptr);

  // out and lse start as NaN (all bytes 0xFF): every element must be written.
  const int64_t out_bytes = (int64_t)N * OC * (int64_t)sizeof(float);
  const int64_t lse_bytes = (int64_t)B * NH * T * (int64_t)sizeof(float);
  cuda::memset_device(d_out.p, 0xFF, out_bytes, nullptr);
  cuda::memset_device(d_lse.p, 0xFF, lse_bytes, nullptr);
  cuda::attention_forward_bf16(d_out.p, d_lse.p, d_qkv16.p, d_qkv.p, dsp, B, T, NH, NKV, HS, nullptr);
  ASSERT_EQ(cuda::stream_sync(nullptr), "");
  const auto out = d_out.download(), lse = d_lse.download();
  EXPECT_EQ(count_non_finite(out), 0);
  EXPECT_EQ(count_non_finite(lse), 0);
  report("attention_forward_bf16 out (vs CPU bf16)", norm_err(out, out_cpu), kBoundBf16);
  report("attention_forward_bf16 lse (vs CPU bf16)", norm_err(lse, lse_cpu), kBoundLse);
  report("attention_forward_bf16 out (vs fp32 reference)", norm_err(out, out_ref), kBoundFp32);

  // dqkv starts as NaN: every element must be written.
  const int64_t dqkv_bytes = (int64_t)N * QKV * (int64_t)sizeof(float);
  cuda::memset_device(d_dqkv.p, 0xFF, dqkv_bytes, nullptr);
  cuda::attention_backward_bf16(d_dqkv.p, d_delta.p, d_qkv16.p, d_dout16.p, d_dout.p, d_qkv.p, d_out.p, d_lse.p, dsp,
                                B, T, NH, NKV, HS, nullptr);
  ASSERT_EQ(cuda::stream_sync(nullptr), "");
  const auto dqkv = d_dqkv.download();
  EXPECT_EQ(count_non_finite(dqkv), 0) << "dqkv elements left unwritten (or not finite)";
  report("attention_backward_bf16 dqkv (vs CPU bf16)", norm_err(dqkv, dqkv_cpu), kBoundBf16);
  report("attention_backward_bf16 dqkv (vs fp32 reference)", norm_err(dqkv, dqkv_ref), kBoundFp32);

  // The same inputs give the same bits: forward and backward again, on NaN-filled buffers.
  cuda::memset_device(d_out.p, 0xFF, out_bytes, nullptr);
  cuda::memset_device(d_lse.p, 0xFF, lse_bytes, nullptr);
  cuda::attention_forward_bf16(d_out.p, d_lse.p, d_qkv16.p, d_qkv.p, dsp, B, T, NH, NKV, HS, nullptr);
  ASSERT_EQ(cuda::stream_sync(nullptr), "");
  const auto out2 = d_out.download(), lse2 = d_lse.download();
  EXPECT_EQ(std::memcmp(out2.data(), out.data(), out.size() * sizeof(float)), 0) << "forward out not deterministic";
  EXPECT_EQ(std::memcmp(lse2.data(), lse.data(), lse.size() * sizeof(float)), 0) << "forward lse not deterministic";
  cuda::memset_device(d_dqkv.p, 0xFF, dqkv_bytes, nullptr);
  cuda::attention_backward_bf16(d_dqkv.p, d_delta.p, d_qkv16.p, d_dout16.p, d_dout.p, d_qkv.p, d_out.p, d_lse.p, dsp,
                                B, T, NH, NKV, HS, nullptr);
  ASSERT_EQ(cuda::stream_sync(nullptr), "");
  const auto dqkv2 = d_dqkv.download();
  EXPECT_EQ(std::memcmp(dqkv2.data(), dqkv.data(), dqkv.size() * sizeof(float)), 0) << "backward not deterministic";
}

void check_all_masks(const Shape& s) {
  for (Mask m : {Mask::kCausal, Mask::kDocuments, Mask::kDocumentsPadded}) check(s, m);
}

TEST(CudaAttentionBf16, SupportedHeadSizes) {
  SMELT_REQUIRE_CUDA_DEVICE();
  EXPECT_TRUE(cuda::attention_bf16_supported(64));
  EXPECT_TRUE(cuda::attention_bf16_supported(128));
  EXPECT_TRUE(cuda::attention_bf16_supported(16));
  EXPECT_FALSE(cuda::attention_bf16_supported(40));   // not a multiple of 16
  EXPECT_FALSE(cuda::attention_bf16_supported(256));  // above 128
}

// T = 67: one full 64-row tile and a partial one; two query heads per kv head.
TEST(CudaAttentionBf16, GroupedQueryPartialTile) {
  SMELT_REQUIRE_CUDA_DEVICE();
  check_all_masks({2, 67, 4, 2, 64});
}

// T = 256: whole tiles only; one query head per kv head.
TEST(CudaAttentionBf16, MultiHeadWholeTiles) {
  SMELT_REQUIRE_CUDA_DEVICE();
  check_all_masks({1, 256, 8, 8, 64});
}

// HS 128 (the largest), three query heads per kv head, T = 2 tiles + 2 rows.
TEST(CudaAttentionBf16, GroupedQueryHeadSize128) {
  SMELT_REQUIRE_CUDA_DEVICE();
  check_all_masks({2, 130, 6, 2, 128});
}

// 16 tiles, one kv head for four query heads: long sums, many fully masked tiles with documents.
TEST(CudaAttentionBf16, MultiQueryLongSequence) {
  SMELT_REQUIRE_CUDA_DEVICE();
  check_all_masks({1, 1000, 4, 1, 64});
}

// Head sizes padded with zero columns inside the kernels: 16 (to 32), 48 (to 64), 80 (to 128).
TEST(CudaAttentionBf16, PaddedHeadSizes) {
  SMELT_REQUIRE_CUDA_DEVICE();
  check_all_masks({2, 300, 4, 4, 16});
  check_all_masks({1, 100, 2, 1, 48});
  check_all_masks({1, 90, 2, 2, 80});
}

}  // namespace
}  // namespace smelt
