// Throughput of quality_compute + quality_score on real text, single thread; with --json also the
// signals, score and failed rules of each input. Not a test: it asserts nothing.
// Usage: quality_bench [--json] [--seconds S] FILE...   (each file is one document; .gz is read too)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <zlib.h>

#include "smelt/refine/quality_score.hpp"

using namespace smelt;

static bool read_all(const char* path, std::string& out) {
  gzFile f = gzopen(path, "rb");  // reads plain files as they are
  if (!f) return false;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  const bool ok = n == 0;
  gzclose(f);
  return ok;
}

int main(int argc, char** argv) {
  bool json = false;
  double seconds = 2.0;
  std::vector<std::string> docs;
  std::vector<const char*> names;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json")) { json = true; continue; }
    if (!std::strcmp(argv[i], "--seconds") && i + 1 < argc) { seconds = std::atof(argv[++i]); continue; }
    std::string d;
    if (!read_all(argv[i], d)) { std::fprintf(stderr, "quality_bench: cannot read %s\n", argv[i]); return 1; }
    docs.push_back(std::move(d));
    names.push_back(argv[i]);
  }
  if (docs.empty()) {
    std::fprintf(stderr, "usage: quality_bench [--json] [--seconds S] FILE...\n");
    return 2;
  }
  QualityConfig cfg;
  QualitySignals q;
  if (json) {
    for (size_t k = 0; k < docs.size(); ++k) {
      quality_compute(docs[k], nullptr, q);
      std::string js;
      q.append_json(js);
      std::printf("%s\n  score %.4f  hard '%s'  failed '%s'\n  %s\n", names[k], quality_score(q, cfg),
                  quality_hard_filter(q, cfg).c_str(), quality_failed_rules(q, cfg).c_str(), js.c_str());
    }
  }
  size_t bytes_per_round = 0;
  for (auto& d : docs) bytes_per_round += d.size();
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  double sink = 0, elapsed = 0;
  size_t rounds = 0;
  do {
    for (auto& d : docs) {
      quality_compute(d, nullptr, q);
      sink += quality_score(q, cfg);
    }
    ++rounds;
    elapsed = std::chrono::duration<double>(clock::now() - t0).count();
  } while (elapsed < seconds);
  const double mb = static_cast<double>(bytes_per_round) * rounds / 1e6;
  std::printf("quality_compute+score: %zu docs, %.2f MB per round, %zu rounds, %.1f MB/s (1 thread)  [%g]\n",
              docs.size(), bytes_per_round / 1e6, rounds, mb / elapsed, sink > 0 ? 1.0 : 0.0);
  return 0;
}
