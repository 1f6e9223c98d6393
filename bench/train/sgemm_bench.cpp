// The GEMM ceiling of this machine, measured in the same run as the model benchmark: OpenBLAS
// sgemm GFLOP/s on a large square and on the model's own GEMM shapes (forward, dinp, dweight of
// every linear layer at N = B*T rows), for 1 and 2 threads. Not the model (model_bench.cpp).
// Usage: sgemm_bench CONFIG.toml [--threads 1,2] [--seconds S]
// Prints one line per (shape, threads) and a `ceiling` summary line that `run` parses.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <time.h>

#include <cblas.h>

#include "smelt/common/config.hpp"
#include "smelt/model/config.hpp"

extern "C" void openblas_set_num_threads(int);

using namespace smelt;

namespace {

struct Shape {
  std::string name;
  int M, N, K;
  bool ta, tb;  // row-major: C (M,N) = op(A) op(B)
  double weight;  // times per training step (for the step-weighted mean)
};

// Best-of-repeats GFLOP/s for one shape. mode 0: one sgemm call with OpenBLAS on `threads`
// threads; mode 1: OpenBLAS single-threaded, C cut along its larger dimension into `blocks`
// fixed tiles (one sgemm each) taken in turn by `threads` threads (Smelt's scheme,
// kernels/cpu/matmul.cpp, with std::thread: bench/ is built without OpenMP).
double cpu_now() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// cpu_gflops (optional): FLOPs per CPU second of the best call by CPU time (all threads' CPU,
// spinning included): what one core does when it is not time-shared with other jobs.
double measure(const Shape& s, int threads, int mode, int blocks, double seconds,
               double* cpu_gflops = nullptr) {
  std::vector<float> A((size_t)s.M * s.K), B((size_t)s.K * s.N), C((size_t)s.M * s.N);
  for (size_t i = 0; i < A.size(); i++) A[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
  for (size_t i = 0; i < B.size(); i++) B[i] = (float)((i * 104729) % 1000) * 1e-3f - 0.5f;
  int lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
  const CBLAS_TRANSPOSE ta = s.ta ? CblasTrans : CblasNoTrans, tb = s.tb ? CblasTrans : CblasNoTrans;
  auto call = [&] {
    if (mode == 0) {
      cblas_sgemm(CblasRowMajor, ta, tb, s.M, s.N, s.K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f,
                  C.data(), s.N);
      return;
    }
    const bool rows = s.M >= s.N;
    const int len = rows ? s.M : s.N, step = (len + blocks - 1) / blocks;
    std::atomic<int> next{0};
    auto work = [&] {
      for (int b; (b = next.fetch_add(1)) < blocks;) {
      int x0 = b * step, n = std::min(step, len - x0);
      if (n <= 0) continue;
      if (rows) {
        const float* a = s.ta ? A.data() + x0 : A.data() + (size_t)x0 * s.K;
        cblas_sgemm(CblasRowMajor, ta, tb, n, s.N, s.K, 1.0f, a, lda, B.data(), ldb, 0.0f,
                    C.data() + (size_t)x0 * s.N, s.N);
      } else {
        const float* bp = s.tb ? B.data() + (size_t)x0 * s.K : B.data() + x0;
        cblas_sgemm(CblasRowMajor, ta, tb, s.M, n, s.K, 1.0f, A.data(), lda, bp, ldb, 0.0f,
                    C.data() + x0, s.N);
      }
      }
    };
    std::vector<std::thread> team;
    for (int t = 1; t < threads; t++) team.emplace_back(work);
    work();
    for (auto& t : team) t.join();
  };
  openblas_set_num_threads(mode == 0 ? threads : 1);
  call();  // warm-up: pages, packing buffers, threads
  double flop = 2.0 * s.M * s.N * s.K, best = 1e30, best_cpu = 1e30, spent = 0;
  int reps = 0;
  while ((spent < seconds || reps < 2) && reps < 1000) {
    double c0 = cpu_now();
    auto t0 = std::chrono::steady_clock::now();
    call();
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best_cpu = std::min(best_cpu, cpu_now() - c0);
    best = std::min(best, dt);
    spent += dt;
    reps++;
  }
  openblas_set_num_threads(1);
  if (cpu_gflops) *cpu_gflops = flop / best_cpu * 1e-9;
  return flop / best * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: sgemm_bench CONFIG.toml [--threads 1,2] [--seconds S]\n");
    return 2;
  }
  std::vector<int> thread_counts = {1, 2};
  double seconds = 1.0;
  for (int i = 2; i < argc; i++) {
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) {
      thread_counts.clear();
      for (char* p = argv[++i]; *p;) {
        thread_counts.push_back(std::atoi(p));
        while (*p && *p != ',') p++;
        if (*p) p++;
      }
    } else if (!std::strcmp(argv[i], "--seconds") && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    }
  }
  toml::table root;
  if (auto s = config_load(argv[1], root); !s) { std::fprintf(stderr, "%s\n", s.message().c_str()); return 1; }
  ConfigSection bs(root, "bench");
  int Bt = 4, T = 512;
  bs.get("batch", Bt);
  bs.get("seq_len", T);
  root.erase("bench");
  ModelConfig c;
  if (auto s = model_config_read(root, c); !s) { std::fprintf(stderr, "%s\n", s.message().c_str()); return 1; }
  const int N = Bt * T, C = c.d_model, H = c.ffn_hidden, V = c.vocab_size, QKV = c.qkv_size();
  const int A = c.n_heads * c.head_size(), L = c.n_layers;

  // The linear layers of one step: forward out = inp W^T (NoTrans, Trans), dinp = dout W
  // (NoTrans, NoTrans), dweight = dout^T inp (Trans, NoTrans).
  struct Linear { const char* name; int IC, OC; double count; };
  std::vector<Linear> lin = {{"qkv", C, QKV, (double)L}, {"o", A, C, (double)L},
                             {"gate_up", C, 2 * H, (double)L}, {"down", H, C, (double)L},
                             {"lm_head", C, V, 1.0}};
  std::vector<Shape> shapes;
  for (const auto& l : lin) {
    shapes.push_back({std::string(l.name) + ".fwd", N, l.OC, l.IC, false, true, l.count});
    shapes.push_back({std::string(l.name) + ".dinp", N, l.IC, l.OC, false, false, l.count});
    shapes.push_back({std::string(l.name) + ".dweight", l.OC, l.IC, N, true, false, l.count});
  }
  const int sq = 2048;
  std::printf("sgemm ceiling (OpenBLAS, best of >= %.1f s (square) and 2 calls per shape); N = %d rows\n", seconds, N);
  std::printf("%-16s %6s %6s %6s | %8s %8s\n", "shape", "M", "N", "K", "threads", "GFLOP/s");
  for (int th : thread_counts) {
    double sq_cpu = 0;
    double sq_gf = measure({"square", sq, sq, sq, false, true, 0}, th, 0, 1, seconds, &sq_cpu);
    std::printf("%-16s %6d %6d %6d | %8d %8.1f   (%.1f per CPU second)\n", "square", sq, sq, sq,
                th, sq_gf, sq_cpu);
    // Step-weighted rate: total FLOPs / total time if every model GEMM ran at its measured rate,
    // once as one threaded call, once as fixed tiles taken in turn (the best tile count).
    const int kTiles[] = {1, 2, 4};
    double flop = 0, t_one = 0, t_blk[3] = {0, 0, 0};
    std::printf("%-16s %6s %6s %6s | %8s %8s | fixed tiles, threads taking turns: 1 / 2 / 4\n", "", "", "",
                "", "", "one call");
    for (const auto& s : shapes) {
      double gf1 = measure(s, th, 0, 1, seconds / 6);
      double f = 2.0 * s.M * s.N * s.K * s.weight;
      flop += f;
      t_one += f / (gf1 * 1e9);
      std::printf("%-16s %6d %6d %6d | %8d %8.1f |", s.name.c_str(), s.M, s.N, s.K, th, gf1);
      for (int k = 0; k < 3; k++) {
        double gfb = measure(s, th, 1, kTiles[k], seconds / 6);
        t_blk[k] += f / (gfb * 1e9);
        std::printf(" %6.1f", gfb);
      }
      std::printf("\n");
    }
    std::printf("step-weighted over the model shapes, %d threads: one call %.1f, tiles 1/2/4: "
                "%.1f %.1f %.1f GFLOP/s\n", th, flop / t_one * 1e-9, flop / t_blk[0] * 1e-9,
                flop / t_blk[1] * 1e-9, flop / t_blk[2] * 1e-9);
    double t_best = std::min(t_blk[0], std::min(t_blk[1], t_blk[2]));
    std::printf("ceiling threads %d square %.1f model_shapes %.1f model_shapes_tiled %.1f "
                "GFLOP/s (model shapes: %.1f GFLOP per step of linear layers)\n",
                th, sq_gf, flop / t_one * 1e-9, flop / t_best * 1e-9, flop * 1e-9);
    std::fflush(stdout);
  }
  return 0;
}
