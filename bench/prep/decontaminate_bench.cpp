// Decontamination cost on one thread: DecontamIndex::build over a synthetic benchmark set of
// about N distinct n-grams (rate, bytes per n-gram, heap growth), then find() MB/s over real
// documents against it, beside dedup_normalise alone (the floor find() stands on).
// Not a test (tests/refine/decontaminate_test.cpp) and not multi-threaded: per-core numbers.
//
//   decontaminate_bench [--ngrams N] [--repeat R] [--list PATHS_FILE] FILE...
// Each FILE (plain or .gz) is one document; --list reads more paths, one per line. The benchmark
// set's words are drawn from the documents' normalised words, so finds are misses (the full pass).
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench_input.hpp"
#include "smelt/common/hash.hpp"
#include "smelt/refine/decontaminate.hpp"
#include "smelt/refine/dedup.hpp"

using namespace smelt;

namespace {

size_t heap_bytes() { struct mallinfo2 m = mallinfo2(); return m.uordblks + m.hblkhd; }

double max_rss_mib() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024.0;
}

// A benchmark-like file of about `ngrams` distinct 13-grams: paragraphs of 60 words (48 13-grams)
// drawn at random from vocab (repeats of a random 13-word run are negligible).
std::string synthetic_set(const std::vector<std::string>& vocab, uint64_t ngrams) {
  const uint64_t words = (ngrams + 47) / 48 * 60;
  std::string out;
  for (uint64_t i = 0; i < words; ++i) {
    out += vocab[hash_mix(i * 0x9E3779B97F4A7C15ULL + 7) % vocab.size()];
    out += (i % 60 == 59) ? "\n\n" : " ";
  }
  return out;
}

// Best of `repeat` passes of fn over docs, in MB/s of document text.
template <class Fn>
double best_mb_s(const std::vector<std::string>& docs, size_t bytes, int repeat, Fn&& fn) {
  double best = 1e30;
  for (int r = 0; r < repeat; ++r) {
    double t0 = bench::thread_cpu_s();
    for (const std::string& d : docs) fn(d);
    best = std::min(best, bench::thread_cpu_s() - t0);
  }
  return bytes / 1e6 / best;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t ngrams = 1000000;
  int repeat = 5;
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--ngrams" && i + 1 < argc) ngrams = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--repeat" && i + 1 < argc) repeat = std::atoi(argv[++i]);
    else if (a == "--list" && i + 1 < argc) {
      std::ifstream l(argv[++i]);
      for (std::string p; std::getline(l, p);) if (!p.empty()) paths.push_back(p);
    }
    else paths.push_back(a);
  }
  if (paths.empty()) {
    std::fprintf(stderr, "usage: decontaminate_bench [--ngrams N] [--repeat R] [--list FILE] FILE...\n");
    return 2;
  }
  std::vector<std::string> docs, vocab;
  size_t bytes = 0;
  for (const std::string& p : paths) {
    std::string s;
    if (!bench::read_any(p, s)) { std::fprintf(stderr, "%s: cannot read\n", p.c_str()); return 1; }
    std::string norm;  // vocabulary: normalised words, so the set's n-grams are the ones counted
    dedup_normalise(s, norm);
    std::istringstream in(norm);
    for (std::string w; in >> w;) vocab.push_back(w);
    bytes += s.size();
    docs.push_back(std::move(s));
  }
  std::string set_path = "/tmp/decontaminate_bench-" + std::to_string(::getpid()) + ".txt";
  std::string set = synthetic_set(vocab, ngrams);
  std::ofstream(set_path, std::ios::binary) << set;

  // 1. build: rate and memory
  DecontamConfig c;
  c.files = {set_path};
  std::unique_ptr<DecontamIndex> ix;
  size_t heap0 = heap_bytes();
  double rss0 = max_rss_mib();
  double t0 = bench::thread_cpu_s();
  Status st = DecontamIndex::build(c, ix);
  double build_s = bench::thread_cpu_s() - t0;
  std::remove(set_path.c_str());
  if (!st) { std::fprintf(stderr, "%s\n", st.message().c_str()); return 1; }
  std::printf("build: %.1f MB of benchmark text, %llu %d-grams in %.2f s CPU: %.2f M n-grams/s, %.1f MB/s\n",
              set.size() / 1e6, static_cast<unsigned long long>(ix->ngrams()), c.ngram, build_s,
              ix->ngrams() / build_s / 1e6, set.size() / 1e6 / build_s);
  std::printf("memory: index %.1f MiB = %.2f bytes/n-gram; heap after build %+.1f MiB; peak RSS %+.1f MiB "
              "while building\n", ix->bytes() / 1048576.0, double(ix->bytes()) / ix->ngrams(),
              (double(heap_bytes()) - double(heap0)) / 1048576.0, max_rss_mib() - rss0);

  // 2. find over the documents, beside normalisation alone
  std::string norm;
  double norm_mb_s = best_mb_s(docs, bytes, repeat, [&](const std::string& d) { dedup_normalise(d, norm); });
  int hits = 0;
  double find_mb_s = best_mb_s(docs, bytes, repeat, [&](const std::string& d) { hits += ix->find(d).file >= 0; });
  std::printf("documents: %zu, %.2f MB; hits %d of %d finds\n", docs.size(), bytes / 1e6, hits,
              static_cast<int>(docs.size()) * repeat);
  std::printf("one thread: dedup_normalise %.0f MB/s, find %.0f MB/s (normalise + n-gram hashes + lookups)\n",
              norm_mb_s, find_mb_s);
  return 0;
}
