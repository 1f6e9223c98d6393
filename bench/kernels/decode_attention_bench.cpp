// decode_attention_group, one query row of G heads on one kv head over n cached positions, on each
// path this CPU runs (its own, AVX2's, the portable reference), alternating on the same caches. Not
// a test. The caches are those of `layers` layers of 4 kv heads (rows of ld = 4 HS), visited as a
// one-thread decode visits them: layer by layer, in each the 4 kv heads in turn. With the default
// 12 layers (model-125m-gqa's) at 3000 positions they come from L3 or memory; --layers 1 keeps
// them cache-resident (the arithmetic alone).
// Usage: decode_attention_bench [--n N] [--heads G,G,...] [--hs HS] [--kv f32|f16|bf16] [--layers L]
//        [--seconds S]
// Prints the CPU, then one line per (G, path): microseconds a call, nanoseconds a (key, head), and
// the K and V bytes read a second.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "smelt/hw/cpu_info.hpp"
#include "smelt/kernels/decode_attention.hpp"
#include "smelt/kernels/decode_linear.hpp"

using namespace smelt;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::vector<int> parse_list(const char* s) {
  std::vector<int> v;
  for (const char* p = s; *p;) {
    v.push_back(std::atoi(p));
    while (*p && *p != ',') p++;
    if (*p) p++;
  }
  return v;
}

int usage() {
  std::fprintf(stderr, "usage: decode_attention_bench [--n N] [--heads G,G,...] [--hs HS] [--kv f32|f16|bf16] "
                       "[--layers L] [--seconds S]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int n = 3000, HS = 64, layers = 12;
  constexpr int kKvHeads = 4;
  std::vector<int> groups = {1, 3, 4, 8};
  KvFormat f = KvFormat::kBf16;
  double seconds = 0.5;
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    if (a == "--n") n = std::atoi(argv[++i]);
    else if (a == "--heads") groups = parse_list(argv[++i]);
    else if (a == "--hs") HS = std::atoi(argv[++i]);
    else if (a == "--layers") layers = std::atoi(argv[++i]);
    else if (a == "--seconds") seconds = std::atof(argv[++i]);
    else if (a == "--kv") {
      const std::string k = argv[++i];
      f = k == "f32" ? KvFormat::kF32 : k == "f16" ? KvFormat::kF16 : KvFormat::kBf16;
    } else return usage();
  }
  for (int G : groups)
    if (G < 1 || G > kMaxGroup) return usage();
  if (n < 1 || HS < 1 || layers < 1) return usage();

  const int64_t ld = kKvHeads * (int64_t)HS, esz = kv_format_bytes(f), layer_bytes = (int64_t)n * ld * esz;
  std::vector<char> K((size_t)layers * layer_bytes), V(K.size());
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> row(ld);
  for (int64_t j = 0; j < (int64_t)layers * n; j++)
    for (std::vector<char>* c : {&K, &V}) {
      for (float& x : row) x = d(rng);
      kv_store(c->data() + j * ld * esz, row.data(), (int)ld, f);
    }
  const CpuInfo& cpu = cpu_info();
  std::printf("cpu: %s (%s)\nn %d, HS %d, %s cache, %d layers of %d kv heads (%.1f MiB)\n", cpu.model.c_str(),
              cpu.flags().c_str(), n, HS, kv_format_name(f), layers, kKvHeads, 2.0 * layers * layer_bytes / (1 << 20));

  const DecodeIsa own = decode_linear_current_isa();
  std::vector<DecodeIsa> paths = {own};
  if (own == DecodeIsa::kAvx512Vnni) paths.push_back(DecodeIsa::kAvx2);
  paths.push_back(DecodeIsa::kPortable);
  for (int G : groups) {
    std::vector<float> q((size_t)G * HS), out(q.size()), s((size_t)G * n);
    for (float& x : q) x = d(rng);
    std::vector<double> best(paths.size(), 1e30);
    const int calls = layers * kKvHeads;
    const auto call = [&](int c) {
      const size_t at = (size_t)(c / kKvHeads) * layer_bytes + (size_t)(c % kKvHeads) * HS * esz;
      decode_attention_group(out.data(), q.data(), G, K.data() + at, V.data() + at, f, ld, n, HS, 0.125f, s.data());
    };
    // Rounds of one pass over the layers, the paths taking turns, until `seconds` a path.
    for (const double t_end = now() + seconds * paths.size(); now() < t_end;)
      for (size_t p = 0; p < paths.size(); p++) {
        decode_linear_set_isa(paths[p]);
        const double t0 = now();
        for (int c = 0; c < calls; c++) call(c);
        best[p] = std::min(best[p], (now() - t0) / calls);
      }
    decode_linear_set_isa(own);
    for (size_t p = 0; p < paths.size(); p++) {
      decode_linear_set_isa(paths[p]);
      std::printf("G %2d  %-12s %9.2f us a call  %7.3f ns a (key, head)  %6.1f GB/s of K and V  %5.2fx portable\n",
                  G, decode_linear_isa(), best[p] * 1e6, best[p] * 1e9 / ((double)n * G),
                  2.0 * n * HS * esz / best[p] / 1e9, best.back() / best[p]);
    }
    decode_linear_set_isa(own);
  }
  return 0;
}
