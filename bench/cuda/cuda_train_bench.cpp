// Training throughput of the CUDA backend (docs/cuda.md): tokens/s and model FLOPs utilisation of
// full steps (forward, backward, clip, AdamW) on one GPU at a model config's size, against the
// GPU's datasheet bf16 peak and against the bf16 GEMM rate measured here (cuBLAS, 8192^3).
// Also the attention's forward and backward alone at the same shape, so the step's time can be
// split. Random tokens (throughput does not depend on them). Prints a table and one JSON line.
//   cuda_train_bench CONFIG.toml [--batch B] [--seq T] [--precision bf16|fp32] [--steps N]
//                    [--peak-tflops 989]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "smelt/kernels/cuda/cuda_kernels.hpp"
#include "smelt/model/cuda/cuda_model.hpp"
#include "smelt/model/model.hpp"
#include "smelt/model/params.hpp"

using namespace smelt;

namespace {
struct Args {
  std::string config;
  int B = 8, T = 1024, steps = 20;
  Precision precision = Precision::kBf16;
  double peak_tflops = 989.0;  // H100/H200 SXM dense bf16, NVIDIA's datasheet
};

int usage(const char* msg) {
  std::fprintf(stderr, "cuda_train_bench: %s\nusage: cuda_train_bench CONFIG.toml [--batch B] [--seq T] "
                       "[--precision bf16|fp32] [--steps N] [--peak-tflops X]\n", msg);
  return 2;
}

double gemm_tflops(cuda::Stream s) {
  const int n = 8192;
  auto* a = static_cast<uint16_t*>(cuda::device_alloc((int64_t)n * n * 2));
  auto* b = static_cast<uint16_t*>(cuda::device_alloc((int64_t)n * n * 2));
  auto* c = static_cast<float*>(cuda::device_alloc((int64_t)n * n * 4));
  std::vector<float> host((size_t)n * n);
  std::mt19937 g(1);
  std::uniform_real_distribution<float> d(-1, 1);
  for (auto& x : host) x = d(g);
  auto* f = static_cast<float*>(cuda::device_alloc((int64_t)n * n * 4));
  cuda::copy_to_device(f, host.data(), (int64_t)n * n * 4, s);
  cuda::bf16_from_f32(a, f, (int64_t)n * n, s);
  cuda::bf16_from_f32(b, f, (int64_t)n * n, s);
  cuda::Blas* blas = cuda::blas_create(s);
  for (int i = 0; i < 3; i++) cuda::gemm_bf16(blas, false, true, n, n, n, a, n, b, n, 0.0f, c, n);
  cuda::Timer* t = cuda::timer_create();
  cuda::timer_start(t, s);
  const int reps = 10;
  for (int i = 0; i < reps; i++) cuda::gemm_bf16(blas, false, true, n, n, n, a, n, b, n, 0.0f, c, n);
  const double sec = cuda::timer_stop_seconds(t, s);
  cuda::timer_destroy(t);
  cuda::blas_destroy(blas);
  for (void* p : {(void*)a, (void*)b, (void*)c, (void*)f}) cuda::device_free(p);
  return 2.0 * n * n * (double)n * reps / sec / 1e12;
}

// Seconds per call of the attention's forward and backward at the model's shape.
std::pair<double, double> attention_seconds(const ModelConfig& c, int B, int T, bool bf16, cuda::Stream s) {
  const int64_t N = (int64_t)B * T, QKV = c.qkv_size(), A = (int64_t)c.n_heads * c.head_size();
  std::vector<float> host(N * QKV);
  std::mt19937 g(2);
  std::normal_distribution<float> d;
  for (auto& x : host) x = d(g);
  float* qkv = static_cast<float*>(cuda::device_alloc(N * QKV * 4));
  float* dqkv = static_cast<float*>(cuda::device_alloc(N * QKV * 4));
  float* out = static_cast<float*>(cuda::device_alloc(N * A * 4));
  float* dout = static_cast<float*>(cuda::device_alloc(N * A * 4));
  float* lse = static_cast<float*>(cuda::device_alloc(N * c.n_heads * 4));
  float* delta = static_cast<float*>(cuda::device_alloc(N * c.n_heads * 4));
  auto* qkv16 = static_cast<uint16_t*>(cuda::device_alloc(N * QKV * 2));
  auto* dout16 = static_cast<uint16_t*>(cuda::device_alloc(N * A * 2));
  const int NH = c.n_heads, NKV = c.n_kv_heads, HS = c.head_size();
  auto fwd = [&] {
    if (bf16) cuda::attention_forward_bf16(out, lse, qkv16, qkv, nullptr, B, T, NH, NKV, HS, s);
    else cuda::attention_forward(out, lse, qkv, nullptr, B, T, NH, NKV, HS, s);
  };
  auto bwd = [&] {
    if (bf16) cuda::attention_backward_bf16(dqkv, delta, qkv16, dout16, dout, qkv, out, lse, nullptr, B, T, NH, NKV, HS, s);
    else cuda::attention_backward(dqkv, delta, dout, qkv, out, lse, nullptr, B, T, NH, NKV, HS, s);
  };
  cuda::copy_to_device(qkv, host.data(), N * QKV * 4, s);
  cuda::copy_to_device(dout, host.data(), N * A * 4, s);
  cuda::Timer* t = cuda::timer_create();
  const int reps = 5;
  fwd();
  bwd();
  cuda::timer_start(t, s);
  for (int i = 0; i < reps; i++) fwd();
  const double f = cuda::timer_stop_seconds(t, s) / reps;
  cuda::timer_start(t, s);
  for (int i = 0; i < reps; i++) bwd();
  const double b = cuda::timer_stop_seconds(t, s) / reps;
  cuda::timer_destroy(t);
  for (float* p : {qkv, dqkv, out, dout, lse, delta}) cuda::device_free(p);
  cuda::device_free(qkv16), cuda::device_free(dout16);
  return {f, b};
}
// Fills a from the command line; -1 when it parsed, else the exit code (2: usage).
int parse_args(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; i++) {
    const std::string k = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (k == "--batch" && (v = next())) a.B = std::atoi(v);
    else if (k == "--seq" && (v = next())) a.T = std::atoi(v);
    else if (k == "--steps" && (v = next())) a.steps = std::atoi(v);
    else if (k == "--peak-tflops" && (v = next())) a.peak_tflops = std::atof(v);
    else if (k == "--precision" && (v = next())) {
      if (std::string(v) == "bf16") a.precision = Precision::kBf16;
      else if (std::string(v) == "fp32") a.precision = Precision::kFp32;
      else return usage("--precision: bf16 or fp32");
    } else if (k[0] != '-' && a.config.empty()) a.config = k;
    else return usage(("unknown or incomplete argument " + k).c_str());
  }
  if (a.config.empty()) return usage("no model config");
  return -1;
}

// Random N(0, 0.02) matrices and unit norms, as the CPU model initialises them (the speed does not
// depend on the values).
void upload_random_params(CudaModel& m) {
  std::vector<float> p(m.layout().total);
  std::mt19937 g(3);
  std::normal_distribution<float> d(0.0f, 0.02f);
  for (auto& x : p) x = d(g);
  for (const ParamTensor& t : m.layout().tensors)
    if (t.cols == 1) std::fill(p.begin() + t.offset, p.begin() + t.offset + t.size(), 1.0f);
  m.upload_params(p.data());
}

// Where the step's time goes: 3 more steps (from step t0 + 1) with an event between op families.
void print_profile(CudaModel& m, const Batch& b, const CudaAdamW& o, int t0) {
  m.set_profiling(true);
  float loss = 0;
  for (int s = 1; s <= 3; s++) {
    if (!m.forward(b, loss)) return;
    m.zero_grad();
    m.backward();
    (void)m.optimizer_step(o, t0 + s);
    (void)m.sync();
  }
  auto prof = m.profile_ms();
  double prof_total = 0;
  for (const auto& [name, ms] : prof) prof_total += ms;
  std::sort(prof.begin(), prof.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
  std::printf("profile (GPU time per step by op family, %.2f ms in all):\n", prof_total / 3);
  for (const auto& [name, ms] : prof)
    if (ms > 0) std::printf("  %-22s %8.2f ms  %5.1f%%\n", name.c_str(), ms / 3, 100 * ms / prof_total);
}
}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (int rc = parse_args(argc, argv, a); rc >= 0) return rc;
  if (cuda::device_count() == 0) {
    std::fprintf(stderr, "cuda_train_bench: no CUDA device (%s)\n", cuda::built() ? "none found" : "no CUDA build");
    return 1;
  }
  ModelConfig c;
  toml::table root;
  try {
    root = toml::parse_file(a.config);
  } catch (const toml::parse_error& e) {
    std::fprintf(stderr, "cuda_train_bench: %s: %s\n", a.config.c_str(), e.what());
    return 1;
  }
  if (auto s = model_config_read(root, c); !s) {
    std::fprintf(stderr, "cuda_train_bench: %s: %s\n", a.config.c_str(), s.message().c_str());
    return 1;
  }
  c.max_seq_len = std::max(c.max_seq_len, a.T);
  const std::string gpu = cuda::device_name(0);
  const double gemm = gemm_tflops(nullptr);

  CudaModel m;
  if (auto s = m.init(c, a.B, a.T, a.precision); !s) {
    std::fprintf(stderr, "cuda_train_bench: %s\n", s.message().c_str());
    return 1;
  }
  upload_random_params(m);
  Batch b;
  b.B = a.B, b.T = a.T;
  const int N = a.B * a.T;
  std::mt19937 g(4);
  b.inputs.resize(N), b.targets.resize(N);
  for (int n = 0; n < N; n++) b.inputs[n] = (int32_t)(g() % c.vocab_size), b.targets[n] = (int32_t)(g() % c.vocab_size);
  CudaAdamW o;
  cuda::Timer* t = cuda::timer_create();
  float loss = 0;
  double total = 0, fwd = 0;
  const int warm = 3;
  for (int s = 1; s <= warm + a.steps; s++) {
    cuda::timer_start(t, nullptr);  // (the model's own stream is synchronised by forward's loss read-back)
    if (auto st = m.forward(b, loss); !st) {
      std::fprintf(stderr, "cuda_train_bench: %s\n", st.message().c_str());
      return 1;
    }
    const double f = cuda::timer_stop_seconds(t, nullptr);
    m.zero_grad();
    m.backward();
    (void)m.optimizer_step(o, s);
    if (auto e = m.sync(); !e.empty()) {
      std::fprintf(stderr, "cuda_train_bench: %s\n", e.c_str());
      return 1;
    }
    const double all = cuda::timer_stop_seconds(t, nullptr);
    if (s > warm) total += all, fwd += f;
    if (s == 1 || s % 10 == 0) std::printf("step %3d  loss %.4f  %.1f ms\n", s, loss, all * 1e3);
  }
  cuda::timer_destroy(t);
  print_profile(m, b, o, warm + a.steps);
  const bool attn16 = a.precision == Precision::kBf16 && cuda::attention_bf16_supported(c.head_size());
  const auto [af, ab] = attention_seconds(c, a.B, a.T, attn16, nullptr);
  const double step = total / a.steps, tok_s = N / step;
  const double flops = train_flops_per_token(c, a.T) * tok_s;
  const char* prec = a.precision == Precision::kBf16 ? "bf16" : "fp32";
  std::printf("\n%s  %s  params %.1fM  B=%d T=%d  %s\n", gpu.c_str(), a.config.c_str(), param_count(c) / 1e6, a.B, a.T,
              prec);
  std::printf("device memory:\n%s\n", m.memory_report().c_str());
  std::printf("step %.2f ms (forward %.2f ms)   %.0f tokens/s   %.1f TFLOP/s\n", step * 1e3, fwd / a.steps * 1e3,
              tok_s, flops / 1e12);
  std::printf("MFU %.1f%% of the %.0f TFLOP/s datasheet peak; %.1f%% of the %.0f TFLOP/s bf16 GEMM rate measured here\n",
              100 * flops / (a.peak_tflops * 1e12), a.peak_tflops, 100 * flops / (gemm * 1e12), gemm);
  std::printf("attention (%s) per step, all %d layers: forward %.2f ms, backward %.2f ms = %.1f%% of the step\n",
              attn16 ? "bf16 tensor cores" : "fp32", c.n_layers, af * c.n_layers * 1e3, ab * c.n_layers * 1e3, 100 * (af + ab) * c.n_layers / step);
  std::printf("{\"gpu\":\"%s\",\"config\":\"%s\",\"precision\":\"%s\",\"B\":%d,\"T\":%d,\"step_ms\":%.3f,"
              "\"tokens_per_s\":%.0f,\"tflops\":%.2f,\"mfu_peak\":%.4f,\"gemm_tflops\":%.1f,\"attn_fwd_ms\":%.3f,"
              "\"attn_bwd_ms\":%.3f,\"loss\":%.4f}\n",
              gpu.c_str(), a.config.c_str(), prec, a.B, a.T, step * 1e3, tok_s, flops / 1e12,
              flops / (a.peak_tflops * 1e12), gemm, af * 1e3, ab * 1e3, loss);
  return 0;
}
