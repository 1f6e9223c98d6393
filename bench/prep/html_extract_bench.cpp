// Benchmark driver for HTML extraction: reads HTML files, converts their charset, extracts the main
// text (or all visible text with --dump), writes each result to an output folder and prints MB/s
// (HTML bytes per CPU second, best and mean of N repetitions) on one thread. Not the comparison itself: bench/prep/extract_bench.py is.
//
// usage: html_extract_bench [--dump] [--reps N] [--out DIR] FILE...   (or --list FILE, one path a line)
#include <time.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "smelt/text/charset.hpp"
#include "smelt/text/html_extract.hpp"

namespace {

// CPU time of this (single-threaded) process: steady under a loaded machine, unlike wall time.
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

bool read_file(const std::string& path, std::string& out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  out = ss.str();
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> files;
  std::string out_dir;
  int reps = 5;
  smelt::HtmlExtractOptions opt;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--dump") {
      opt.remove_boilerplate = false;
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--out" && i + 1 < argc) {
      out_dir = argv[++i];
    } else if (a == "--list" && i + 1 < argc) {
      std::ifstream l(argv[++i]);
      std::string line;
      while (std::getline(l, line))
        if (!line.empty() && line[0] != '#') files.push_back(line);
    } else if (a == "-h" || a == "--help") {
      std::printf("usage: html_extract_bench [--dump] [--reps N] [--out DIR] [--list FILE] FILE...\n");
      return 0;
    } else {
      files.push_back(a);
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "html_extract_bench: no input files (see --help)\n");
    return 2;
  }
  std::vector<std::string> pages(files.size());
  uint64_t total = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    if (!read_file(files[i], pages[i])) {
      std::fprintf(stderr, "html_extract_bench: cannot read %s\n", files[i].c_str());
      return 1;
    }
    total += pages[i].size();
  }
  if (!out_dir.empty()) std::filesystem::create_directories(out_dir);

  std::string utf8;
  smelt::HtmlExtractResult res;
  uint64_t out_bytes = 0;
  double best = 1e30, sum = 0;
  for (int r = 0; r < reps + 1; ++r) {  // the first round warms caches and writes the outputs
    const double t0 = cpu_seconds();
    for (size_t i = 0; i < pages.size(); ++i) {
      smelt::charset_to_utf8(pages[i], "", utf8);
      smelt::html_extract(utf8, opt, res);
      if (r == 0) {
        out_bytes += res.text.size();
        if (!out_dir.empty()) {
          std::string name = std::filesystem::path(files[i]).stem().string() + ".txt";
          std::ofstream o(std::filesystem::path(out_dir) / name, std::ios::binary);
          o << res.text << '\n';
        }
      }
    }
    const double s = cpu_seconds() - t0;
    if (r > 0) {
      best = std::min(best, s);
      sum += s;
    }
  }
  const double mb = total / 1e6;
  std::printf("{\"tool\": \"smelt%s\", \"pages\": %zu, \"html_bytes\": %llu, \"text_bytes\": %llu, "
              "\"reps\": %d, \"best_s\": %.6f, \"mean_s\": %.6f, \"mb_per_s\": %.2f, \"mb_per_s_mean\": %.2f}\n",
              opt.remove_boilerplate ? "" : "-dump", pages.size(),
              static_cast<unsigned long long>(total), static_cast<unsigned long long>(out_bytes), reps, best,
              sum / reps, mb / best, mb / (sum / reps));
  return 0;
}
