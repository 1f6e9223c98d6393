// The CUDA kernels (kernels/cuda/) against the CPU kernels on random inputs: fp32 within 1e-5
// normwise relative error (||gpu - cpu|| / ||cpu||) unless a test states another bound and why;
// bf16 rounding bit for bit; every reduction deterministic. Skipped without a CUDA device.
#include <cstring>
#include <limits>
#include <random>

#include "cuda/cuda_test_util.hpp"
#include "kernels/kernel_check.hpp"
#include "smelt/kernels/kernels.hpp"

namespace smelt {
namespace {

using test::DeviceVec;
using test::norm_err;
using test::randn;
using test::report;

std::vector<int32_t> random_tokens(int n, int V, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = (int32_t)(g() % (uint64_t)V);
  return t;
}

TEST(CudaKernels, GemmF32AllTransposesMatchTheCpu) {
  SMELT_REQUIRE_CUDA_DEVICE();
  cuda::Blas* blas = cuda::blas_create(nullptr);
  const int M = 67, N = 130, K = 96;
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      const auto A = randn((size_t)M * K, 1 + ta), B = randn((size_t)K * N, 3 + tb), C0 = randn((size_t)M * N, 5);
      const int lda = ta ? M : K, ldb = tb ? K : N;
      std::vector<float> want = C0;
      gemm_f32(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 0.75f, want.data(), N);
      DeviceVec<float> a(A), b(B), c(C0);
      cuda::gemm_f32(blas, ta, tb, M, N, K, 0.5f, a.p, lda, b.p, ldb, 0.75f, c.p, N);
      report("gemm_f32 ta=" + std::to_string(ta) + " tb=" + std::to_string(tb), norm_err(c.download(), want), 1e-5);
    }
  cuda::blas_destroy(blas);
}

TEST(CudaKernels, MatmulBf16MatchesTheCpuBf16Reference) {
  SMELT_REQUIRE_CUDA_DEVICE();
  cuda::Blas* blas = cuda::blas_create(nullptr);
  const int N = 96, IC = 128, OC = 160;
  const auto inp = randn((size_t)N * IC, 7), w = randn((size_t)OC * IC, 8), dout = randn((size_t)N * OC, 9);
  std::vector<uint16_t> w16(w.size());
  bf16_from_f32(w16.data(), w.data(), (int64_t)w.size());
  std::vector<float> out((size_t)N * OC), dinp((size_t)N * IC), dw((size_t)OC * IC, 0.0f);
  matmul_forward_bf16_ref(out.data(), inp.data(), w16.data(), N, IC, OC);
  matmul_backward_bf16_ref(dinp.data(), dw.data(), dout.data(), inp.data(), w16.data(), N, IC, OC);
  DeviceVec<float> d_inp(inp), d_dout(dout), d_out((int64_t)out.size()), d_dinp((int64_t)dinp.size());
  DeviceVec<float> d_dw(std::vector<float>(dw.size(), 0.0f));
  DeviceVec<uint16_t> d_w16(w16), x16((int64_t)N * IC), g16((int64_t)N * OC);
  cuda::matmul_forward_bf16(blas, d_out.p, x16.p, d_inp.p, d_w16.p, N, IC, OC, 0.0f);
  cuda::matmul_backward_bf16(blas, d_dinp.p, d_dw.p, g16.p, x16.p, d_dout.p, d_inp.p, d_w16.p, N, IC, OC);
  // The same bf16 products; only the fp32 summation order differs from the double reference.
  report("matmul_forward_bf16", norm_err(d_out.download(), out), 1e-5);
  report("matmul_backward_bf16 dinp", norm_err(d_dinp.download(), dinp), 1e-5);
  report("matmul_backward_bf16 dweight", norm_err(d_dw.download(), dw), 1e-5);
  cuda::blas_destroy(blas);
}

TEST(CudaKernels, Bf16RoundingIsBitEqualToTheCpu) {
  SMELT_REQUIRE_CUDA_DEVICE();
  auto x = randn(100003, 11, 3.0f);
  const float specials[] = {0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), 1.00390625f /* a tie */, 1.01171875f,
                            std::numeric_limits<float>::denorm_min(), 3.4e38f};
  std::copy(std::begin(specials), std::end(specials), x.begin() + 1);  // odd offsets: the unaligned tail too
  std::vector<uint16_t> want(x.size());
  bf16_from_f32(want.data(), x.data(), (int64_t)x.size());
  DeviceVec<float> d(x);
  DeviceVec<uint16_t> out((int64_t)x.size());
  cuda::bf16_from_f32(out.p, d.p, (int64_t)x.size(), nullptr);
  EXPECT_EQ(out.download(), want);
}

TEST(CudaKernels, EmbeddingForwardAndBackward) {
  SMELT_REQUIRE_CUDA_DEVICE();
  const int N = 300, C = 96, V = 50;  // a small vocabulary: every token repeats
  const auto inp = random_tokens(N, V, 12);
  const auto wte = randn((size_t)V * C, 13), dout = randn((size_t)N * C, 14), g0 = randn((size_t)V * C, 15);
  std::vector<float> out((size_t)N * C), dwte = g0;
  embedding_forward_ref(out.data(), inp.data(), wte.data(), N, C, V);
  embedding_backward_ref(dwte.data(), dout.data(), inp.data(), N, C, V);
  std::vector<int32_t> order(N), starts(N + 1), tokens(N), count(V);
  const int U = cuda::embedding_order(order.data(), starts.data(), tokens.data(), count.data(), inp.data(), N, V);
  DeviceVec<int32_t> d_inp(inp), d_order(order), d_starts(starts), d_tokens(tokens);
  DeviceVec<float> d_wte(wte), d_out((int64_t)out.size()), d_dout(dout), d_g(g0);
  cuda::embedding_forward(d_out.p, d_inp.p, d_wte.p, N, C, V, nullptr);
  cuda::embedding_backward(d_g.p, d_dout.p, d_order.p, d_starts.p, d_tokens.p, U, C, nullptr);
  EXPECT_EQ(d_out.download(), out);
  report("embedding_backward", norm_err(d_g.download(), dwte), 1e-6);
}

TEST(CudaKernels, RmsnormForwardAndBackwardDeterministic) {
  SMELT_REQUIRE_CUDA_DEVICE();
  const int N = 517, C = 200;
  const auto x = randn((size_t)N * C, 16), w = randn(C, 17), dout = randn((size_t)N * C, 18);
  const auto dx0 = randn((size_t)N * C, 19), dw0 = randn(C, 20);
  std::vector<float> out((size_t)N * C), rstd(N), dx = dx0, dw = dw0;
  rmsnorm_forward_ref(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
  rmsnorm_backward_ref(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  DeviceVec<float> d_x(x), d_w(w), d_dout(dout), d_out((int64_t)out.size()), d_rstd(N), d_dx(dx0), d_dw(dw0);
  DeviceVec<float> scratch(cuda::rmsnorm_backward_scratch_floats(N, C));
  cuda::rmsnorm_forward(d_out.p, d_rstd.p, d_x.p, d_w.p, N, C, 1e-5f, nullptr);
  cuda::rmsnorm_backward(d_dx.p, d_dw.p, scratch.p, d_dout.p, d_x.p, d_w.p, d_rstd.p, N, C, nullptr);
  report("rmsnorm_forward out", norm_err(d_out.download(), out), 1e-5);
  report("rmsnorm_forward rstd", norm_err(d_rstd.download(), rstd), 1e-5);
  const auto dx1 = d_dx.download(), dw1 = d_dw.download();
  report("rmsnorm_backward dinp (added)", norm_err(dx1, dx), 1e-5);
  report("rmsnorm_backward dweight (added)", norm_err(dw1, dw), 1e-5);
  d_dx.upload(dx0), d_dw.upload(dw0);
  cuda::rmsnorm_backward(d_dx.p, d_dw.p, scratch.p, d_dout.p, d_x.p, d_w.p, d_rstd.p, N, C, nullptr);
  EXPECT_EQ(d_dx.download(), dx1);
  EXPECT_EQ(d_dw.download(), dw1);
}

TEST(CudaKernels, RopeForwardAndBackwardWithAndWithoutPositions) {
  SMELT_REQUIRE_CUDA_DEVICE();
  const int B = 3, T = 50, NH = 4, NKV = 2, HS = 32, QKV = (NH + 2 * NKV) * HS, N = B * T;
  std::vector<float> table((size_t)T * HS);
  const std::vector<double> freq = rope_theta_freq(HS, 10000.0f);
  rope_table(table.data(), T, HS, freq.data());
  std::vector<int32_t> pos(N);
  for (int n = 0; n < N; n++) pos[n] = (n * 7) % T;
  DeviceVec<float> d_table(table);
  DeviceVec<int32_t> d_pos(pos);
  for (int with_pos = 0; with_pos < 2; with_pos++) {
    const auto x = randn((size_t)N * QKV, 21 + with_pos);
    std::vector<float> f = x, b = x;
    const int32_t* p = with_pos ? pos.data() : nullptr;
    rope_forward_ref(f.data(), p, N, T, QKV, 0, NH, HS, freq.data());
    rope_forward_ref(f.data(), p, N, T, QKV, NH * HS, NKV, HS, freq.data());
    rope_backward_ref(b.data(), p, N, T, QKV, 0, NH, HS, freq.data());
    DeviceVec<float> d_f(x), d_b(x);
    const int32_t* dp = with_pos ? d_pos.p : nullptr;
    cuda::rope_forward(d_f.p, dp, d_table.p, N, T, QKV, 0, NH, HS, nullptr);
    cuda::rope_forward(d_f.p, dp, d_table.p, N, T, QKV, NH * HS, NKV, HS, nullptr);
    cuda::rope_backward(d_b.p, dp, d_table.p, N, T, QKV, 0, NH, HS, nullptr);
    report("rope_forward positions=" + std::to_string(with_pos), norm_err(d_f.download(), f), 1e-5);
    report("rope_backward positions=" + std::to_string(with_pos), norm_err(d_b.download(), b), 1e-5);
  }
}

TEST(CudaKernels, SwigluForwardAndBackward) {
  SMELT_REQUIRE_CUDA_DEVICE();
  const int N = 257, H = 176;
  const auto gu = randn((size_t)N * 2 * H, 23, 2.0f), dout = randn((size_t)N * H, 24);
  std::vector<float> out((size_t)N * H), dgu((size_t)N * 2 * H);
  swiglu_forward_ref(out.data(), gu.data(), N, H);
  swiglu_backward_ref(dgu.data(), dout.data(), gu.data(), N, H);
  DeviceVec<float> d_gu(gu), d_dout(dout), d_out((int64_t)out.size()), d_dgu((int64_t)dgu.size());
  cuda::swiglu_forward(d_out.p, d_gu.p, N, H, nullptr);
  cuda::swiglu_backward(d_dgu.p, d_dout.p, d_gu.p, N, H, nullptr);
  report("swiglu_forward", norm_err(d_out.download(), out), 1e-5);
  report("swiglu_backward", norm_err(d_dgu.download(), dgu), 1e-5);
}

TEST(CudaKernels, CrossEntropyForwardAndBackward) {
  SMELT_REQUIRE_CUDA_DEVICE();
  const int N = 70, V = 5003;
  const auto logits = randn((size_t)N * V, 25, 3.0f);
  auto targets = random_tokens(N, V, 26);
  targets[3] = targets[40] = -1;
  std::vector<float> losses(N), lse(N), dlogits((size_t)N * V);
  cross_entropy_forward_ref(losses.data(), logits.data(), targets.data(), N, V);
  cross_entropy_backward_ref(dlogits.data(), logits.data(), targets.data(), 0.25f, N, V);
  std::vector<float> cpu_lse(N), cpu_losses(N);
  cross_entropy_forward(cpu_losses.data(), cpu_lse.data(), logits.data(), targets.data(), N, V);
  DeviceVec<float> d_logits(logits), d_losses(N), d_lse(N);
  DeviceVec<int32_t> d_t(targets);
  cuda::cross_entropy_forward(d_losses.p, d_lse.p, d_logits.p, d_t.p, N, V, nullptr);
  const auto gl = d_losses.download();
  EXPECT_EQ(gl[3], 0.0f);
  report("cross_entropy_forward losses", norm_err(gl, losses), 1e-5);
  report("cross_entropy_forward lse", norm_err(d_lse.download(), cpu_lse), 1e-5);
  cuda::cross_entropy_backward(d_logits.p, d_lse.p, d_t.p, 0.25f, N, V, nullptr);
  const auto gd = d_logits.download();
  report("cross_entropy_backward", norm_err(gd, dlogits), 1e-5);
  for (int v = 0; v < V; v++) ASSERT_EQ(gd[(size_t)40 * V + v], 0.0f);
}

TEST(CudaKernels, AdamwAndGradNorm) {
  SMELT_REQUIRE_CUDA_DEVICE();
  const int64_t n = 3 * 4096 + 77;
  auto p = randn(n, 27), m = randn(n, 28, 0.01f), v = randn(n, 29, 0.01f);
  for (auto& x : v) x = x * x;
  const auto g = randn(n, 30);
  DeviceVec<float> dp(p), dm(m), dv(v), dg(g);
  adamw_step(p.data(), m.data(), v.data(), g.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 7);
  cuda::adamw_step(dp.p, dm.p, dv.p, dg.p, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 7, nullptr);
  report("adamw param", norm_err(dp.download(), p), 1e-6);
  report("adamw m", norm_err(dm.download(), m), 1e-6);
  report("adamw v", norm_err(dv.download(), v), 1e-6);
  DeviceVec<double> partials(cuda::grad_norm_scratch_doubles(n));
  std::vector<double> host_partials(cuda::grad_norm_scratch_doubles(n));
  const double want = grad_norm_squared_ref(g.data(), n);
  const double got = cuda::grad_norm_squared(dg.p, n, partials.p, host_partials.data(), nullptr);
  report("grad_norm_squared", std::fabs(got - want) / want, 1e-12);
  EXPECT_EQ(cuda::grad_norm_squared(dg.p, n, partials.p, host_partials.data(), nullptr), got);
}

}  // namespace
}  // namespace smelt
