// Language-ID accuracy and speed: CLD2 and (optionally) a fastText model on held-out real text, per
// language, by whole document and by snippet length, and MB/s on one thread (CPU time).
// Not a test (tests/refine/langid_test.cpp); bench/prep/langid-bench.sh renders the text, splits it
// and trains the fastText model first.
//
//   langid_bench TEXT_DIR [MODEL.bin]
// TEXT_DIR/<iso>/*.txt: one document per file, its language the folder's name.
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "smelt/refine/langid.hpp"

using namespace smelt;
namespace fs = std::filesystem;

namespace {

struct Doc {
  std::string lang, text;
};

// Snippet length buckets, in bytes: <=20, 21-50, 51-200, 201-1000, >1000.
constexpr size_t kBucketMax[] = {20, 50, 200, 1000, SIZE_MAX};
constexpr const char* kBucketName[] = {"<=20", "21-50", "51-200", "201-1000", ">1000"};
constexpr int kBuckets = 5;
constexpr size_t kCutAt[] = {20, 50, 200, 1000, 4000};  // the longest snippet each bucket cuts

double cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

std::vector<Doc> read_docs(const fs::path& dir) {
  std::vector<Doc> out;
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".txt") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    out.push_back({f.parent_path().filename().string(), ss.str()});
  }
  return out;
}

// Consecutive pieces of text of at most max bytes, cut after the last space or newline (or, in text
// without spaces such as Chinese, at the last character boundary), whitespace trimmed.
std::vector<std::string> cut(const std::string& text, size_t max) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\n')) ++i;
    size_t end = std::min(text.size(), i + max);
    if (end < text.size()) {
      size_t sp = text.find_last_of(" \n", end);
      if (sp != std::string::npos && sp > i) end = sp;
      else
        while (end > i && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
    }
    if (end <= i) break;
    out.push_back(text.substr(i, end - i));
    i = end;
  }
  return out;
}

int bucket_of(size_t n) {
  int b = 0;
  while (n > kBucketMax[b]) ++b;
  return b;
}

struct Tally {
  int n = 0, right = 0;
  void add(bool ok) { ++n, right += ok; }
  std::string text() const { return n ? std::to_string(100.0 * right / n).substr(0, 5) : "-"; }
};

void run_backend(const char* name, const LanguageIdentifier& id, const std::vector<Doc>& docs) {
  std::map<std::string, Tally> by_doc;
  std::map<std::string, std::vector<Tally>> by_len;
  Tally all_doc, all_len[kBuckets];
  constexpr double kThresholds[] = {0.3, 0.5, 0.65, 0.8};
  int kept[4] = {};  // right documents whose score reaches kThresholds[i] (what a min_score keeps)
  for (const auto& d : docs) {
    const LangGuess g = id.identify(d.text);
    const bool ok = g.lang == d.lang;
    for (int i = 0; i < 4; ++i) kept[i] += ok && g.score >= kThresholds[i];
    by_doc[d.lang].add(ok);
    all_doc.add(ok);
    auto& row = by_len[d.lang];
    row.resize(kBuckets);
    for (size_t max : kCutAt)
      for (const auto& s : cut(d.text, max)) {
        const bool sok = id.identify(s).lang == d.lang;
        const int b = bucket_of(s.size());
        row[b].add(sok);
        all_len[b].add(sok);
      }
  }
  // speed: whole documents, one thread, CPU time, at least 1 s
  size_t bytes = 0;
  const double t0 = cpu_s();
  double t = 0;
  do {
    for (const auto& d : docs) bytes += d.text.size(), (void)id.identify(d.text);
  } while ((t = cpu_s() - t0) < 1.0);
  std::printf("\n%s: %.1f MB/s per core (whole documents, 1 thread)\n\n", name, bytes / t / 1e6);
  std::printf("| lang | docs | doc %% |");
  for (const char* b : kBucketName) std::printf(" %s B %% |", b);
  std::printf("\n|---|---|---|---|---|---|---|---|\n");
  for (const auto& [lang, t] : by_doc) {
    std::printf("| %s | %d | %s |", lang.c_str(), t.n, t.text().c_str());
    for (const auto& b : by_len[lang]) std::printf(" %s |", b.text().c_str());
    std::printf("\n");
  }
  std::printf("| all | %d | %s |", all_doc.n, all_doc.text().c_str());
  for (const auto& b : all_len) std::printf(" %s |", b.text().c_str());
  std::printf("\n| snippets | | |");
  for (const auto& b : all_len) std::printf(" %d |", b.n);
  std::printf("\n\nright documents (of %d) with score >=", all_doc.right);
  for (int i = 0; i < 4; ++i) std::printf(" %.2f: %.1f%%;", kThresholds[i], 100.0 * kept[i] / std::max(1, all_doc.right));
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: langid_bench TEXT_DIR [MODEL.bin]\n");
    return 2;
  }
  const std::vector<Doc> docs = read_docs(argv[1]);
  size_t bytes = 0;
  for (const auto& d : docs) bytes += d.text.size();
  std::printf("%zu documents, %.2f MB, from %s\n", docs.size(), bytes / 1e6, argv[1]);
  std::vector<LangIdConfig> configs(1);
  if (argc == 3) configs.push_back({argv[2], {}});
  for (const auto& c : configs) {
    std::unique_ptr<LanguageIdentifier> id;
    if (Status s = LanguageIdentifier::load(c, id); !s) {
      std::fprintf(stderr, "langid_bench: %s\n", s.message().c_str());
      return 1;
    }
    run_backend(id->describe().c_str(), *id, docs);
  }
  return 0;
}
