// decode_linear_f32, _f16, _bf16 and _q8_0 at a 125M Llama's linear shapes for n = 1, 2, 4, 16 rows,
// beside OpenBLAS sgemm as the model calls it (matmul_forward: single-threaded sgemm per
// OpenMP tile). Weights come from memory, not cache: each call takes the next of enough copies
// to fill 1 GiB (more than this machine's L3), as a decoder walking its layers would. Not a test.
// Usage: decode_linear_bench [--threads 1,2] [--seconds S] [--isa portable|avx2|avx512-vnni] [--hot]
//        [--cpu-clock] (one thread's CPU time instead of wall time: for a loaded machine, 1 thread)
// Prints the CPU and path, a streaming-read bandwidth for scale, then one line per (shape, n,
// threads): weight GB/s and GFLOP/s of each kernel, and the ratio to sgemm's time.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <time.h>

#include "smelt/hw/cpu_info.hpp"
#include "smelt/kernels/decode_linear.hpp"
#include "smelt/kernels/kernels.hpp"
#include "smelt/machine/mem_probe.hpp"

using namespace smelt;

namespace {

constexpr size_t kPoolBytes = size_t(1) << 30;

// Wall time, or with --cpu-clock this thread's CPU time: on a machine shared with other jobs a
// one-thread run then counts only the time it was scheduled (caches and memory stay shared).
bool g_cpu_clock = false;
double now() {
  if (g_cpu_clock) {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best (lowest) mean seconds per call over rounds of `calls` calls, for at least `seconds`.
template <typename F>
double best_time(int calls, double seconds, F&& f) {
  f(0);  // warm-up
  double best = 1e30, t_end = now() + seconds;
  for (int round = 0; round < 3 || now() < t_end; round++) {
    const double t0 = now();
    for (int i = 0; i < calls; i++) f(i);
    best = std::min(best, (now() - t0) / calls);
    if (round > 200) break;
  }
  return best;
}

struct Shape {
  const char* name;
  int IC, OC;
};

}  // namespace

int main(int argc, char** argv) {
  blas_core_fix(argc, argv);  // OpenBLAS on this CPU's own kernels, as smelt-full runs it
  std::vector<int> thread_counts = {1, 2};
  double seconds = 0.3;
  bool hot = false;
  for (int i = 1; i < argc; i++) {
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) {
      thread_counts.clear();
      for (char* p = argv[++i]; *p;) {
        thread_counts.push_back(std::atoi(p));
        while (*p && *p != ',') p++;
        if (*p) p++;
      }
    } else if (!std::strcmp(argv[i], "--seconds") && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--hot")) {
      hot = true;
    } else if (!std::strcmp(argv[i], "--cpu-clock")) {
      g_cpu_clock = true;
    } else if (!std::strcmp(argv[i], "--isa") && i + 1 < argc) {
      const std::string s = argv[++i];
      const DecodeIsa isa = s == "portable" ? DecodeIsa::kPortable : s == "avx2" ? DecodeIsa::kAvx2 : DecodeIsa::kAvx512Vnni;
      if (!decode_linear_set_isa(isa)) {
        std::fprintf(stderr, "[decode_linear_bench] this CPU cannot run --isa %s\n", s.c_str());
        return 1;
      }
    } else {
      std::fprintf(stderr, "usage: decode_linear_bench [--threads 1,2] [--seconds S] [--isa portable|avx2|avx512-vnni] [--hot] [--cpu-clock]\n");
      return 2;
    }
  }
  gemm_set_backend(GemmBackend::kOpenBlas);
  const CpuInfo& cpu = cpu_info();
  std::printf("cpu: %s (%d logical CPUs; %s)\ndecode_linear path: %s; sgemm: OpenBLAS %s via matmul_forward\n",
              cpu.model.c_str(), cpu.logical_cpus, cpu.flags().c_str(), decode_linear_isa(), blas_core().name.c_str());
  std::printf("weights: %s; clock: %s\n", hot ? "hot (one copy, cache-resident when it fits)"
                                   : "cold (rotating copies over 1 GiB, more than the L3)",
              g_cpu_clock ? "this thread's CPU time" : "wall");
  if (g_cpu_clock && (thread_counts.size() != 1 || thread_counts[0] != 1)) {
    std::fprintf(stderr, "[decode_linear_bench] --cpu-clock measures one thread: use it with --threads 1\n");
    return 2;
  }

  // The pool: 1 GiB of fp32 weights (and their Q8_0 copies), filled with copies of one random matrix.
  std::vector<float> pool(kPoolBytes / sizeof(float));
  std::vector<BlockQ8_0> poolq(kPoolBytes / 4 / sizeof(BlockQ8_0) + 1);
  std::vector<uint16_t> poolh(kPoolBytes / sizeof(uint16_t));
  for (int t : thread_counts) {  // smelt machine's probe (wall clock, whatever --cpu-clock says)
    const ReadBandwidth bw = read_bandwidth(t);
    std::printf("stream read, %d thread%s: %.1f GB/s\n", t, t > 1 ? "s" : "", bw.gb_s);
  }

  const Shape shapes[] = {{"qkv 768->2304", 768, 2304},
                          {"gate/up 768->4096", 768, 4096},
                          {"down 2048->768", 2048, 768},
                          {"lm head 768->32000", 768, 32000}};
  std::printf("\n%-20s %3s %3s | %22s | %22s | %22s | %22s | %16s | %12s\n", "shape", "n", "thr", "f32 GB/s  GFLOP/s",
              "f16 GB/s  GFLOP/s", "bf16 GB/s  GFLOP/s", "q8_0 GB/s  GFLOP/s", "sgemm GFLOP/s", "f32 q8 x sgemm");
  std::mt19937 g(1);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  for (const Shape& s : shapes) {
    const size_t wn = (size_t)s.IC * s.OC, wq = wn / kQ8Block;
    const int copies = hot ? 1 : (int)std::max<size_t>(2, pool.size() / wn);
    const int copies_q = hot ? 1 : (int)std::max<size_t>(2, poolq.size() / wq);
    const int copies_h = hot ? 1 : (int)std::max<size_t>(2, poolh.size() / wn);
    if (wn * copies > pool.size() || wq * copies_q > poolq.size() || wn * copies_h > poolh.size()) {
      pool.resize(wn * copies);
      poolq.resize(wq * copies_q);
      poolh.resize(wn * copies_h);
    }
    for (size_t i = 0; i < wn; i++) pool[i] = nd(g);
    for (size_t i = 0; i < wn; i++) poolh[i] = fp16_from_f32(pool[i]);
    for (int c = 1; c < copies_h; c++) std::memcpy(poolh.data() + c * wn, poolh.data(), wn * sizeof(uint16_t));
    quantize_row_q8_0(poolq.data(), pool.data(), (int64_t)wn);
    for (int c = 1; c < copies; c++) std::memcpy(pool.data() + c * wn, pool.data(), wn * sizeof(float));
    for (int c = 1; c < copies_q; c++) std::memcpy(poolq.data() + c * wq, poolq.data(), wq * sizeof(BlockQ8_0));
    for (int n : {1, 2, 4, 16}) {
      std::vector<float> x((size_t)n * s.IC), out((size_t)n * s.OC);
      for (auto& v : x) v = nd(g) * 50;
      std::vector<BlockQ8_0> xq((size_t)n * s.IC / kQ8Block);
      quantize_row_q8_0(xq.data(), x.data(), (int64_t)x.size());
      for (int t : thread_counts) {
        kernels_set_threads(t);
        const double tf = best_time(copies, seconds, [&](int i) {
          decode_linear_f32(out.data(), s.OC, x.data(), pool.data() + (size_t)(i % copies) * wn, n, s.IC, s.OC, 0.0f);
        });
        const double th = best_time(copies_h, seconds, [&](int i) {
          decode_linear_f16(out.data(), s.OC, x.data(), poolh.data() + (size_t)(i % copies_h) * wn, n, s.IC, s.OC, 0.0f);
        });
        const double tb = best_time(copies_h, seconds, [&](int i) {  // the f16 pool's bits read as bf16
          decode_linear_bf16(out.data(), s.OC, x.data(), poolh.data() + (size_t)(i % copies_h) * wn, n, s.IC, s.OC, 0.0f);
        });
        const double tq = best_time(copies_q, seconds, [&](int i) {
          decode_linear_q8_0(out.data(), s.OC, xq.data(), poolq.data() + (size_t)(i % copies_q) * wq, n, s.IC, s.OC, 0.0f);
        });
        const double ts = best_time(copies, seconds, [&](int i) {
          matmul_forward(out.data(), x.data(), pool.data() + (size_t)(i % copies) * wn, n, s.IC, s.OC, 0.0f);
        });
        const double flop = 2.0 * n * s.IC * s.OC;
        std::printf("%-20s %3d %3d | %9.1f %12.1f | %9.1f %12.1f | %9.1f %12.1f | %9.1f %12.1f | %16.1f | %5.2f %6.2f\n",
                    s.name, n, t, wn * 4 / tf / 1e9, flop / tf / 1e9, wn * 2 / th / 1e9, flop / th / 1e9,
                    wn * 2 / tb / 1e9, flop / tb / 1e9, wq * sizeof(BlockQ8_0) / tq / 1e9, flop / tq / 1e9,
                    flop / ts / 1e9, ts / tf, ts / tq);
        std::fflush(stdout);
      }
    }
  }
  std::printf("\nGB/s: weight bytes per second (fp32 4 B, f16 and bf16 2 B, Q8_0 34 B per 32 weights); x sgemm: sgemm time / kernel time\n");
  return 0;
}
