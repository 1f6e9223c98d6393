// LoRA training throughput and memory on random tokens: the base frozen (held in fp32, bf16 or
// q8_0), adapters of a rank on every target trained by AdamW; tokens/s, the step's FLOPs (LoRA's
// count, train_flops_per_token with the adapters), the model's memory plan and this process's peak
// resident memory. The PyTorch side is lora_bench_torch.py; the side-by-side run is bench/lora/run.
// Usage: lora_bench CONFIG.toml [--threads N] [--steps S] [--rank R] [--base-dtype fp32|bf16|q8_0]
//                   [--precision fp32|bf16]
// CONFIG has [model] and [bench] batch, seq_len (bench/lora/1b.toml).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "../bench_model.hpp"
#include "smelt/machine/gemm_select.hpp"
#include "smelt/model/model.hpp"
#include "smelt/train/optimizer.hpp"

using namespace smelt;

namespace {
int64_t status_bytes(const char* key) {  // a /proc/self/status line in bytes (VmHWM: peak, VmRSS: now)
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(std::strlen(key))) * 1024;
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: lora_bench CONFIG.toml [--threads N] [--steps S] [--rank R] "
                         "[--base-dtype fp32|bf16|q8_0] [--precision fp32|bf16]\n");
    return 2;
  }
  int threads = 1, steps = 3;
  LoraConfig l;
  l.rank = 16;
  l.alpha = 32;
  Precision precision = Precision::kFp32;
  for (int i = 2; i < argc; i++) {
    const std::string a = argv[i];
    const bool more = i + 1 < argc;
    if (a == "--threads" && more) threads = std::atoi(argv[++i]);
    else if (a == "--steps" && more) steps = std::atoi(argv[++i]);
    else if (a == "--rank" && more) l.rank = std::atoi(argv[++i]), l.alpha = 2.0 * l.rank;
    else if (a == "--base-dtype" && more) l.base_dtype = argv[++i];
    else if (a == "--precision" && more) precision = std::string(argv[++i]) == "bf16" ? Precision::kBf16 : Precision::kFp32;
    else {
      std::fprintf(stderr, "lora_bench: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  ModelConfig c;
  int B = 1, T = 256;
  if (!bench::read_bench_config(argv[1], c, B, T)) return 1;
  GemmChoice gc;
  if (auto s = gemm_select("auto", c, B, T, precision, threads, gc); !s) { std::fprintf(stderr, "%s\n", s.message().c_str()); return 1; }
  const int64_t baseline = status_bytes("VmRSS:");  // the process before the model (binary, libraries)
  Model m;
  m.set_precision(precision);
  m.set_lora(l);
  auto t_init = std::chrono::steady_clock::now();
  if (auto s = m.init(c, B, T, threads, 1); !s) { std::fprintf(stderr, "%s\n", s.message().c_str()); return 1; }
  const double init_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_init).count();
  AdamW opt;
  opt.init(m.layout(), threads);
  const Batch b = bench::random_batch(B, T, c.vocab_size);
  const double flop_per_token = train_flops_per_token(c, T, l);
  std::printf("model: %lld base parameters (frozen, %s), %lld adapter parameters (rank %d on every target), "
              "batch %dx%d, %.1f GFLOP per step (LoRA count), init %.1f s\n",
              (long long)m.base_layout().total, l.base_dtype.c_str(), (long long)m.layout().total, l.rank, B, T,
              flop_per_token * B * T * 1e-9, init_s);
  AdamWConfig h;
  double best = 1e30, total = 0;
  for (int s = 0; s <= steps; s++) {  // step 0 warms up
    auto t0 = std::chrono::steady_clock::now();
    float loss;
    const float dloss = 1.0f / (float)(B * T);
    if (auto st = m.forward(b, loss, dloss); !st) { std::fprintf(stderr, "%s\n", st.message().c_str()); return 1; }
    m.zero_grad();
    m.backward(dloss);
    opt.step(m.params(), m.grads(), h);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0) best = std::min(best, dt), total += dt;
    std::printf("step %d loss %.4f %.3f s\n", s, loss, dt);
    std::fflush(stdout);
  }
  const MemoryPlan& p = m.plan();
  std::printf("%s", p.report().c_str());
  // planned: the process before the model plus the model's plan (the AdamW state it counts is the
  // adapters' moments, allocated here)
  std::printf("result smelt threads %d base %s precision %s best_tps %.1f mean_tps %.1f gflops %.1f planned_mib %.1f "
              "peak_rss_mib %.1f\n", threads, l.base_dtype.c_str(), precision_name(precision), B * T / best,
              B * T * steps / total, flop_per_token * B * T / best * 1e-9, (baseline + p.total()) / 1048576.0,
              status_bytes("VmHWM:") / 1048576.0);
  return 0;
}
