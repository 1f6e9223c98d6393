// Forward+backward(+AdamW) throughput of the decoder on random tokens: tokens/s, CPU seconds,
// MFU against a given sgemm rate, and a per-op time breakdown of Smelt's step.
// Usage: model_bench CONFIG.toml [--threads N] [--steps S] [--no-optim] [--profile]
//                    [--sgemm-gflops G] [--precision fp32|bf16] [--gemm auto|openblas|onednn|blis]
// --precision: the linear layers' numerics (Model::set_precision; bf16 = bf16 GEMM inputs, fp32
// accumulation, fp32 master weights and AdamW state); printed in the result line.
// --gemm: the GEMM back end, chosen as `smelt train` chooses it (machine/gemm_select; auto
// measures at the model's shapes or reads this machine's cache).
// CONFIG has [model] and [bench] batch, seq_len (configs/bench-small.toml). Not a trainer; the
// side-by-side run with PyTorch and the sgemm ceiling is bench/train/run.
//
// FLOPs per token (the PaLM / nanoGPT count, so MFU compares with other reports): 6 x matmul
// parameters (every linear layer and the LM head, not the embedding or norms) + 12 x L x C x T
// (attention scores and values, forward and backward, counted as if not causal).
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../bench_model.hpp"
#include "smelt/kernels/kernels.hpp"
#include "smelt/machine/gemm_select.hpp"
#include "smelt/model/model.hpp"
#include "smelt/train/optimizer.hpp"

using namespace smelt;

namespace {
double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: model_bench CONFIG.toml [--threads N] [--steps S] [--no-optim] "
                         "[--profile] [--sgemm-gflops G] [--precision fp32|bf16] [--gemm auto|openblas|onednn|blis]\n");
    return 2;
  }
  int threads = 1, steps = 5;
  bool optim = true, profile = false;
  double sgemm_gflops = 0;
  Precision precision = Precision::kFp32;
  std::string gemm = "auto";
  for (int i = 2; i < argc; i++) {
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--no-optim")) optim = false;
    else if (!std::strcmp(argv[i], "--profile")) profile = true;
    else if (!std::strcmp(argv[i], "--sgemm-gflops") && i + 1 < argc) sgemm_gflops = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--precision") && i + 1 < argc) {
      std::string p = argv[++i];
      if (p != "fp32" && p != "bf16") {
        std::fprintf(stderr, "model_bench: --precision %s: expected fp32 or bf16\n", p.c_str());
        return 2;
      }
      precision = p == "bf16" ? Precision::kBf16 : Precision::kFp32;
    } else if (!std::strcmp(argv[i], "--gemm") && i + 1 < argc) gemm = argv[++i];
  }
  ModelConfig c;
  int B = 4, T = 512;
  if (!bench::read_bench_config(argv[1], c, B, T)) return 1;
  GemmChoice gc;
  if (auto s = gemm_select(gemm, c, B, T, precision, threads, gc); !s) { std::fprintf(stderr, "%s\n", s.message().c_str()); return 1; }
  std::printf("gemm: %s\n", gc.report().c_str());
  Model m;
  m.set_precision(precision);
  if (auto s = m.init(c, B, T, threads, 1); !s) { std::fprintf(stderr, "%s\n", s.message().c_str()); return 1; }
  AdamW opt;
  opt.init(m.layout(), threads);
  const Batch b = bench::random_batch(B, T, c.vocab_size);
  // matmul parameters: everything in the layout that is a matrix, except the embedding (a
  // gather) unless it is tied to the head (then it is the head's matrix)
  int64_t matmul_params = 0;
  for (const auto& t : m.layout().tensors)
    if (t.cols > 1 && (t.name != "model.embed_tokens.weight" || c.tie_embeddings)) matmul_params += t.size();
  const double flop_per_token = 6.0 * matmul_params + 12.0 * c.n_layers * c.d_model * T;
  const double flop_per_step = flop_per_token * B * T;

  AdamWConfig h;
  double best = 1e30, total = 0, cpu_total = 0;
  double optim_s = 0;  // the profile's last row: grad norm + AdamW (the optimizer is not the model's)
  for (int s = 0; s <= steps; s++) {  // step 0 warms up
    if (s == 1) {
      m.set_profiling(profile);
      m.profile_reset();
    }
    double c0 = cpu_seconds();
    auto t0 = std::chrono::steady_clock::now();
    float loss;
    const float dloss = 1.0f / (float)(B * T);  // every target counts, as smelt train passes it
    if (auto st = m.forward(b, loss, dloss); !st) { std::fprintf(stderr, "%s\n", st.message().c_str()); return 1; }
    m.zero_grad();
    m.backward(dloss);
    if (optim) {
      auto o0 = std::chrono::steady_clock::now();
      opt.step(m.params(), m.grads(), h);
      if (s > 0) optim_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - o0).count();
    }
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double dc = cpu_seconds() - c0;
    if (s > 0) { best = std::min(best, dt); total += dt; cpu_total += dc; }
    std::printf("step %d loss %.4f %.3f s (cpu %.3f s)\n", s, loss, dt, dc);
    std::fflush(stdout);
  }
  if (profile) {
    double sum = 0;
    for (int i = 0; i < Model::profile_count(); i++) sum += m.profile_seconds(i);
    sum += optim_s;
    std::printf("per-op wall time, mean of %d steps (%.3f s per step timed):\n", steps, sum / steps);
    for (int i = 0; i < Model::profile_count(); i++)
      std::printf("  %-22s %8.1f ms  %5.1f%%\n", Model::profile_name(i),
                  m.profile_seconds(i) / steps * 1e3, 100.0 * m.profile_seconds(i) / sum);
    if (optim) std::printf("  %-22s %8.1f ms  %5.1f%%\n", "grad norm + adamw", optim_s / steps * 1e3, 100.0 * optim_s / sum);
  }
  double tps_best = B * T / best, tps_mean = B * T * steps / total;
  std::printf("flops: %.1f MFLOP per token (6 x %.2f M matmul params + 12 x L x C x T), "
              "%.1f GFLOP per step\n", flop_per_token * 1e-6, matmul_params * 1e-6,
              flop_per_step * 1e-9);
  std::printf("threads %d batch %dx%d: mean %.0f tokens/s, best %.0f tokens/s, cpu %.2f s per "
              "step (%s, %s, GEMMs on %s)\n", threads, B, T, tps_mean, tps_best, cpu_total / steps,
              optim ? "fwd+bwd+adamw" : "fwd+bwd", precision_name(precision), gc.engine.c_str());
  double achieved = flop_per_step / best * 1e-9;
  std::string engine = gc.engine;
  std::replace(engine.begin(), engine.end(), ' ', '_');
  std::printf("result smelt threads %d precision %s best_tps %.1f mean_tps %.1f cpu_s_per_step "
              "%.3f gflops %.1f mfu %.3f gemm_engine %s gemm_gflops %.1f\n", threads,
              precision_name(precision), tps_best, tps_mean, cpu_total / steps, achieved,
              sgemm_gflops > 0 ? achieved / sgemm_gflops : 0.0, engine.c_str(), gc.gflops);
  return 0;
}
