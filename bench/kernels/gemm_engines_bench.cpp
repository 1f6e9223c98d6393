// Every GEMM engine Smelt can run a linear layer on, side by side at a model's shapes: fp32 on
// OpenBLAS, oneDNN (dnnl_sgemm) and BLIS (where installed: kernels/cpu/gemm_blis.cpp opens it at
// run time), each through gemm_f32 as the trainer calls it; bf16 on oneDNN's matmul
// and Smelt's own packed AVX512-BF16 kernel (kernels/cpu/gemm_bf16_packed.cpp), the bf16 pair
// timed by the function the trainer's per-product choice uses (gemm_bf16_product_seconds).
// Each product (forward, dinp, dweight) of each layer kind, 1 thread, interleaved passes; the
// ratio to OpenBLAS (fp32) and to oneDNN (bf16), and the step-weighted set. Not a test.
// Usage: gemm_engines_bench CONFIG.toml [--rows R] [--seconds S] [--only LAYER] [--threads N]
//   rows: default 512, the count the trainer's choice measures at; --only: one layer kind
//   (qkv, attn_out, ffn_up, ffn_down, lm_head), for a profiler; --threads: the bf16 engines on
//   N threads (default 1, what the choice measures; fp32 is always 1 thread).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "smelt/common/clock.hpp"
#include "smelt/common/config.hpp"
#include "smelt/hw/cpu_info.hpp"
#include "smelt/kernels/kernels.hpp"
#include "smelt/machine/gemm_select.hpp"
#include "smelt/model/config.hpp"
#include "smelt/model/shard.hpp"

extern "C" char* openblas_get_corename();

using namespace smelt;

namespace {
using Linear = LinearShape;

void print_table(const char* title, const std::vector<Linear>& ls, int rows, const std::vector<std::string>& names,
                 const std::vector<std::vector<double>>& secs) {
  std::printf("\n%s, rows %d, GFLOP/s (ratio to %s)\n%-9s %-8s %6s %6s", title, rows, names[0].c_str(),
              "layer", "product", "in", "out");
  for (const auto& n : names) std::printf(" %16s", n.c_str());
  std::printf("\n");
  const char* products[] = {"forward", "dinp", "dweight"};
  std::vector<double> total(names.size(), 0.0);
  double flop = 0, best = 0;
  for (size_t i = 0; i < secs[0].size(); i++) {
    const Linear& l = ls[i / 3];
    const double f = 2.0 * rows * l.IC * l.OC;
    std::printf("%-9s %-8s %6d %6d", l.name, products[i % 3], l.IC, l.OC);
    double fastest = 1e30;
    for (size_t e = 0; e < names.size(); e++) {
      std::printf(" %8.1f (%.2fx)", f / secs[e][i] / 1e9, secs[0][i] / secs[e][i]);
      total[e] += secs[e][i] * l.count;
      fastest = std::min(fastest, secs[e][i]);
    }
    flop += f * l.count, best += fastest * l.count;
    std::printf("\n");
  }
  std::printf("the step's set (each product times its layer count):");
  for (size_t e = 0; e < names.size(); e++)
    std::printf(" %s %.1f (%.2fx);", names[e].c_str(), flop / total[e] / 1e9, total[0] / total[e]);
  std::printf(" per product the fastest %.1f GFLOP/s\n", flop / best / 1e9);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') {
    std::fprintf(stderr, "usage: gemm_engines_bench CONFIG.toml [--rows R] [--seconds S] [--only LAYER]\n");
    return 2;
  }
  int rows = 512;
  double seconds = 1.0;
  std::string only;
  int threads = 1;
  for (int i = 2; i < argc; i++) {
    if (!std::strcmp(argv[i], "--rows") && i + 1 < argc) rows = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--seconds") && i + 1 < argc) seconds = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = std::max(1, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "gemm_engines_bench: unknown argument \"%s\"\n", argv[i]);
      return 2;
    }
  }
  toml::table root;
  if (auto s = config_load(argv[1], root); !s) return std::fprintf(stderr, "%s\n", s.message().c_str()), 1;
  root.erase("bench");
  ModelConfig c;
  if (auto s = model_config_read(root, c); !s) return std::fprintf(stderr, "%s\n", s.message().c_str()), 1;
  std::vector<Linear> ls = linear_shapes(shard_dims(c, ModelShard{}));
  if (!only.empty()) std::erase_if(ls, [&](const Linear& l) { return only != l.name; });
  std::vector<GemmBackend> backends = {GemmBackend::kOpenBlas, GemmBackend::kOneDnn};
  if (gemm_backend_available(GemmBackend::kBlis)) backends.push_back(GemmBackend::kBlis);
  std::printf("cpu: %s\nfp32: openblas (core %s), onednn, %s\nbf16: %s; packed kernel %s\n", cpu_info().model.c_str(),
              openblas_get_corename(),
              backends.size() > 2 ? ("blis (" + gemm_blis_library() + ")").c_str()
                                  : "no blis (apt-get install libblis4-serial to measure it)",
              gemm_bf16_isa(), gemm_bf16_packed_available() ? "available" : "not on this CPU (no AVX512-BF16)");
  kernels_set_threads(1);

  // fp32: one weight, input and output gradient of the largest size, reused by every shape
  int64_t w = 1, x = 1, y = 1;
  for (const Linear& l : ls) {
    w = std::max<int64_t>(w, (int64_t)l.IC * l.OC);
    x = std::max<int64_t>(x, (int64_t)rows * l.IC);
    y = std::max<int64_t>(y, (int64_t)rows * l.OC);
  }
  std::vector<float> W(w), X(x), DY(y), Y(y), DX(x), DW(w);
  for (size_t i = 0; i < W.size(); i++) W[i] = (float)((i * 40503u) % 1000) * 1e-3f - 0.5f;
  for (size_t i = 0; i < X.size(); i++) X[i] = (float)((i * 7919u) % 1000) * 1e-3f - 0.5f;
  for (size_t i = 0; i < DY.size(); i++) DY[i] = (float)((i * 104729u) % 1000) * 1e-3f - 0.5f;
  std::vector<std::string> fnames;
  std::vector<std::vector<double>> fsecs;
  for (GemmBackend be : backends) {
    fnames.push_back(gemm_backend_name(be));
    gemm_set_backend(be);
    fsecs.push_back(interleaved_seconds(
        3 * ls.size(),
        [&](size_t i) {
          const int N = rows, IC = ls[i / 3].IC, OC = ls[i / 3].OC;
          if (i % 3 == 0) gemm_f32(false, true, N, OC, IC, 1.0f, X.data(), IC, W.data(), IC, 0.0f, Y.data(), OC);
          if (i % 3 == 1) gemm_f32(false, false, N, IC, OC, 1.0f, DY.data(), OC, W.data(), IC, 0.0f, DX.data(), IC);
          if (i % 3 == 2) gemm_f32(true, false, OC, IC, N, 1.0f, DY.data(), OC, X.data(), IC, 1.0f, DW.data(), IC);
        },
        seconds));
  }
  gemm_set_backend(GemmBackend::kOpenBlas);
  print_table("fp32, 1 thread", ls, rows, fnames, fsecs);

  if (gemm_bf16_native() && gemm_bf16_packed_available()) {
    std::vector<GemmShape> shapes;
    for (const Linear& l : ls) shapes.push_back({rows, l.IC, l.OC});
    const std::string title = "bf16 inputs, fp32 sums, " + std::to_string(threads) + " thread(s)";
    print_table(title.c_str(), ls, rows, {"onednn", "packed"},
                {gemm_bf16_product_seconds(shapes, Bf16Engine::kOneDnn, seconds, threads),
                 gemm_bf16_product_seconds(shapes, Bf16Engine::kPacked, seconds, threads)});
  }
  return 0;
}
