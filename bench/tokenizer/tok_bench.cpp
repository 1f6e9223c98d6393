// Tokenizer micro-benchmark driver: load time, pre-tokenizer alone, and encode of every line of a
// file on one thread, in MB/s. The side-by-side table comes from `run` (whole processes).
//   tok_bench TOKENIZER FILE [REPEAT]
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "smelt/tokenizer/tokenizer.hpp"

int main(int argc, char** argv) {
  if (argc < 3) { std::fputs("usage: tok_bench TOKENIZER FILE [REPEAT]\n", stderr); return 2; }
  using clk = std::chrono::steady_clock;
  auto sec = [](clk::time_point a, clk::time_point b) { return std::chrono::duration<double>(b - a).count(); };
  int repeat = argc > 3 ? std::atoi(argv[3]) : 1;
  auto t0 = clk::now();
  smelt::Tokenizer tok;
  if (auto s = smelt::Tokenizer::load(argv[1], tok); !s) { std::fprintf(stderr, "%s\n", s.message().c_str()); return 1; }
  auto t1 = clk::now();
  std::ifstream f(argv[2], std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  std::vector<std::string_view> lines;
  for (size_t s = 0; s < text.size();) {
    size_t e = text.find('\n', s);
    if (e == std::string::npos) e = text.size();
    lines.emplace_back(text.data() + s, e - s);
    s = e + 1;
  }
  std::vector<std::string_view> pieces;
  auto t2 = clk::now();
  size_t np = 0;
  for (int r = 0; r < repeat; r++)
    for (auto l : lines) { pieces.clear(); tok.pretokenizer().split(l, pieces); np += pieces.size(); }
  auto t3 = clk::now();
  std::vector<uint32_t> ids;
  size_t nt = 0;
  for (int r = 0; r < repeat; r++)
    for (auto l : lines) { ids.clear(); tok.encode(l, ids); nt += ids.size(); }
  auto t4 = clk::now();
  double mb = text.size() * repeat / 1e6;
  std::printf("load %.3f s | pretokenize %.1f MB/s (%zu pieces) | encode %.1f MB/s (%zu tokens)\n", sec(t0, t1),
              mb / sec(t2, t3), np, mb / sec(t3, t4), nt);
}
