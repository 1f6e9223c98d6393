// The bf16 engines side by side at a model's linear-layer shapes: oneDNN's matmul and Smelt's own
// packed AVX512-BF16 kernel (kernels/cpu/gemm_bf16_packed.cpp), each product of each layer kind
// (forward, dinp, dweight) timed by the same function the trainer's choice uses
// (gemm_bf16_product_seconds, 1 thread), with the ratio and which engine the choice would take.
// Not a test. Usage: gemm_bf16_bench [bench-small|demo] [--rows R] [--seconds S] [--only LAYER]
// (--only: one layer kind, e.g. "ffn down", for a profiler)
// Shapes: bench-small (configs/bench-small.toml: C 512, 8 heads, 8 kv heads, FFN 1376, V 32000)
// and demo (configs/demo.toml: C 256, 4 heads, 2 kv heads, FFN 704, V 16384); rows default 512,
// the count the trainer's choice measures at.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "smelt/hw/cpu_info.hpp"
#include "smelt/kernels/kernels.hpp"
#include "smelt/machine/gemm_select.hpp"

using namespace smelt;

int main(int argc, char** argv) {
  ModelConfig c;
  std::string name = "bench-small";
  int rows = 512;
  double seconds = 1.0;
  std::string only;
  for (int i = 1; i < argc; i++) {
    if (!std::strcmp(argv[i], "--rows") && i + 1 < argc) rows = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--seconds") && i + 1 < argc) seconds = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else if (argv[i][0] != '-') name = argv[i];
    else {
      std::fprintf(stderr, "usage: gemm_bf16_bench [bench-small|demo] [--rows R] [--seconds S] [--only LAYER]\n");
      return 2;
    }
  }
  if (name == "bench-small") c.d_model = 512, c.n_heads = 8, c.n_kv_heads = 8, c.ffn_hidden = 1376, c.vocab_size = 32000;
  else if (name == "demo") c.d_model = 256, c.n_heads = 4, c.n_kv_heads = 2, c.ffn_hidden = 704, c.vocab_size = 16384;
  else {
    std::fprintf(stderr, "gemm_bf16_bench: unknown shapes \"%s\" (expected bench-small or demo)\n", name.c_str());
    return 2;
  }
  std::printf("cpu: %s\nbf16 units: %s; packed kernel: %s\n", cpu_info().model.c_str(), gemm_bf16_isa(),
              gemm_bf16_packed_available() ? "available" : "not on this CPU (no AVX512-BF16)");
  if (!gemm_bf16_native() || !gemm_bf16_packed_available()) return 0;
  const int C = c.d_model, A = c.n_heads * c.head_size();
  struct L {
    const char* what;
    int in, out;
  };
  std::vector<L> ls = {{"qkv", C, c.qkv_size()}, {"attn out", A, C}, {"ffn up", C, 2 * c.ffn_hidden},
                             {"ffn down", c.ffn_hidden, C}, {"lm head", C, c.vocab_size}};
  if (!only.empty()) std::erase_if(ls, [&](const L& l) { return only != l.what; });
  std::vector<GemmShape> shapes;
  for (const L& l : ls) shapes.push_back({rows, l.in, l.out});
  const std::vector<double> one = gemm_bf16_product_seconds(shapes, Bf16Engine::kOneDnn, seconds);
  const std::vector<double> own = gemm_bf16_product_seconds(shapes, Bf16Engine::kPacked, seconds);
  std::printf("%s shapes, rows %d, 1 thread, GFLOP/s\n%-9s %-8s %6s %6s %8s %8s %7s\n", name.c_str(), rows, "layer",
              "product", "in", "out", "onednn", "packed", "ratio");
  const char* products[] = {"forward", "dinp", "dweight"};
  double t1 = 0, t2 = 0, tb = 0, flop = 0;
  for (size_t i = 0; i < one.size(); i++) {
    const L& l = ls[i / 3];
    const double f = 2.0 * rows * l.in * l.out;
    std::printf("%-9s %-8s %6d %6d %8.1f %8.1f %6.2fx\n", l.what, products[i % 3], l.in, l.out, f / one[i] / 1e9,
                f / own[i] / 1e9, one[i] / own[i]);
    flop += f, t1 += one[i], t2 += own[i], tb += std::min(one[i], own[i]);
  }
  std::printf("the set (each product once): onednn %.1f, packed %.1f (%.2fx), per product the faster %.1f GFLOP/s\n",
              flop / t1 / 1e9, flop / t2 / 1e9, t1 / t2, flop / tb / 1e9);
  return 0;
}
