// Dedup throughput and memory: dedup_signature MB/s on one thread over real documents, index
// verdicts and bytes per kept document, and the flat index against std::unordered_set at scale.
// Not a test (tests/refine/dedup_test.cpp) and not multi-threaded: per-core numbers only.
//
//   dedup_bench [--cjk] [--repeat N] [--synthetic N] [--list PATHS_FILE] [FILE ...]
// Each FILE (plain or .gz) is one document; --list reads more paths, one per line.
#include <malloc.h>
#include <zlib.h>

#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <unordered_set>
#include <vector>

#include "bench_input.hpp"
#include "smelt/common/hash.hpp"
#include "smelt/refine/dedup.hpp"

using namespace smelt;

namespace {

size_t heap_bytes() { struct mallinfo2 m = mallinfo2(); return m.uordblks + m.hblkhd; }  // + mmapped blocks

}  // namespace

int main(int argc, char** argv) {
  bool cjk = false;
  int repeat = 3;
  size_t synthetic = 1000000;
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--cjk") cjk = true;
    else if (a == "--repeat" && i + 1 < argc) repeat = std::atoi(argv[++i]);
    else if (a == "--synthetic" && i + 1 < argc) synthetic = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--list" && i + 1 < argc) {
      std::ifstream l(argv[++i]);
      for (std::string p; std::getline(l, p);) if (!p.empty()) paths.push_back(p);
    } else paths.push_back(a);
  }
  if (paths.empty()) {
    std::fprintf(stderr, "usage: dedup_bench [--cjk] [--repeat N] [--synthetic N] [--list FILE] FILE...\n");
    return 2;
  }
  std::vector<std::string> docs;
  size_t bytes = 0;
  for (const std::string& p : paths) {
    std::string s;
    if (!bench::read_any(p, s)) { std::fprintf(stderr, "%s: cannot read\n", p.c_str()); return 1; }
    bytes += s.size();
    docs.push_back(std::move(s));
  }
  DedupConfig c;
  std::printf("documents %zu, %.1f MB, cjk=%d, bands %d x rows %d, shingle %d\n", docs.size(),
              bytes / 1e6, cjk, c.bands, c.rows, cjk ? c.cjk_shingle : c.shingle);

  // 1. normalisation alone, then full signatures (best of `repeat` passes, one thread)
  std::string norm;
  double best_norm = 1e30, best_sig = 1e30;
  std::vector<DedupSignature> sigs(docs.size());
  for (int r = 0; r < repeat; ++r) {
    double t0 = bench::thread_cpu_s();
    for (const std::string& d : docs) dedup_normalise(d, norm);
    double t1 = bench::thread_cpu_s();
    for (size_t i = 0; i < docs.size(); ++i) dedup_signature(docs[i], cjk, c, sigs[i]);
    double t2 = bench::thread_cpu_s();
    best_norm = std::min(best_norm, t1 - t0);
    best_sig = std::min(best_sig, t2 - t1);
  }
  std::printf("normalise        %8.1f MB/s\n", bytes / best_norm / 1e6);
  std::printf("dedup_signature  %8.1f MB/s  %10.0f docs/s  (1 thread)\n", bytes / best_sig / 1e6,
              docs.size() / best_sig);

  // 2. the index over these documents, in order
  DedupIndex idx(c);
  size_t counts[3] = {0, 0, 0};
  double t0 = bench::thread_cpu_s();
  for (const DedupSignature& s : sigs) ++counts[static_cast<int>(idx.check_and_insert(s))];
  double t1 = bench::thread_cpu_s();
  std::printf("index: unique %zu, exact %zu, near %zu; %.0f ns/doc; memory_bytes %zu = %.0f B per kept doc\n",
              counts[0], counts[1], counts[2], (t1 - t0) / docs.size() * 1e9, idx.memory_bytes(),
              static_cast<double>(idx.memory_bytes()) / std::max<size_t>(1, idx.size()));

  // 3. at scale: N synthetic unique signatures, flat index vs std::unordered_set (heap measured)
  if (synthetic > 0) {
    DedupSignature s;
    s.bands.resize(c.bands);
    auto fill = [&](size_t i) {
      s.exact = hash_mix(i * 16 + 1);
      for (int j = 0; j < c.bands; ++j) s.bands[j] = hash_mix(i * 16 + 2 + j);
    };
    size_t h0 = heap_bytes();
    double a0 = bench::thread_cpu_s();
    {
      DedupIndex big(c);
      for (size_t i = 0; i < synthetic; ++i) { fill(i); big.check_and_insert(s); }
      double a1 = bench::thread_cpu_s();
      size_t h1 = heap_bytes();
      std::printf("flat index, %zu docs: memory_bytes %.0f B/doc, heap %.0f B/doc, %.0f ns/doc\n",
                  synthetic, static_cast<double>(big.memory_bytes()) / synthetic,
                  static_cast<double>(h1 - h0) / synthetic, (a1 - a0) / synthetic * 1e9);
    }
    h0 = heap_bytes();
    a0 = bench::thread_cpu_s();
    {
      std::vector<std::unordered_set<uint64_t>> sets(c.bands + 1);
      for (size_t i = 0; i < synthetic; ++i) {
        fill(i);
        bool dup = sets[0].count(s.exact) > 0;
        for (int j = 0; j < c.bands && !dup; ++j) dup = sets[j + 1].count(s.bands[j]) > 0;
        if (dup) continue;
        sets[0].insert(s.exact);
        for (int j = 0; j < c.bands; ++j) sets[j + 1].insert(s.bands[j]);
      }
      double a1 = bench::thread_cpu_s();
      size_t h1 = heap_bytes();
      std::printf("unordered_set,   %zu docs: heap %.0f B/doc, %.0f ns/doc\n", synthetic,
                  static_cast<double>(h1 - h0) / synthetic, (a1 - a0) / synthetic * 1e9);
    }
  }
  return 0;
}
