// Pre-tokenizer scanners against PCRE2 running the official pattern of each family, on real text
// (English, Chinese, poems, emoji/mixed, \r\n) and adversarial random strings; pieces always
// concatenate back to the input, including invalid UTF-8.
#include "smelt/tokenizer/pretokenizer.hpp"

#include <gtest/gtest.h>
#include <utf8proc.h>

#include "smelt/tokenizer/unicode_tables.hpp"
#include "tok_test_util.hpp"

namespace smelt {
namespace {

using namespace smelt::test;

const char* kFamilies[] = {"gpt2", "cl100k", "o200k", "llama3", "qwen2"};

std::string show(const std::vector<std::string_view>& p, size_t from) {
  std::string s;
  for (size_t i = from; i < p.size() && i < from + 6; i++) s += "[" + std::string(p[i]) + "] ";
  return s;
}

void expect_same_split(const std::string& family, const std::string& text, const std::string& where) {
  Status err;
  auto scan = Pretokenizer::create(family, err);
  ASSERT_TRUE(scan) << err.message();
  auto regex = Pretokenizer::create(scan->pattern(), err);
  ASSERT_TRUE(regex) << err.message();
  EXPECT_EQ(regex->name(), "regex");
  std::vector<std::string_view> a, b;
  scan->split(text, a);
  regex->split(text, b);
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i].data() == b[i].data() && a[i].size() == b[i].size()) i++;
  EXPECT_TRUE(i == a.size() && i == b.size())
      << family << " on " << where << ": first difference at piece " << i << "\n  scanner: " << show(a, i)
      << "\n  pcre2:   " << show(b, i);
}

TEST(Pretokenizer, ScannersMatchPcre2OnRealText) {
  for (const char* fam : kFamilies)
    for (const auto& f : sample_files()) {
      std::string text = read_file(std::string(SMELT_TEST_DATA) + "/tokenizer/" + f);
      expect_same_split(fam, text, f);
      for (const auto& line : docs_of(text, false)) expect_same_split(fam, line, f + " (a line)");
    }
}

TEST(Pretokenizer, ScannersMatchPcre2OnAdversarialText) {
  for (const char* fam : kFamilies)
    for (uint32_t seed = 0; seed < 300; seed++) {
      expect_same_split(fam, adversarial_text(seed, 1 + seed % 40), "adversarial seed " + std::to_string(seed));
      // PCRE2 10.42 has Unicode 14 tables, utf8proc (and tiktoken / HF) Unicode 15: compare on the BMP
      if (seed % 10 == 0) expect_same_split(fam, random_utf8(seed, 500, 0x10000), "random UTF-8 seed " + std::to_string(seed));
    }
}

TEST(Pretokenizer, KnownSplits) {
  Status err;
  auto cl = Pretokenizer::create("cl100k", err);
  std::vector<std::string_view> p;
  cl->split("Hello  world's 12345\n\n  x", p);
  std::vector<std::string> got(p.begin(), p.end());
  EXPECT_EQ(got, (std::vector<std::string>{"Hello", " ", " world", "'s", " ", "123", "45", "\n\n", " ", " x"}));
  auto o2 = Pretokenizer::create("o200k", err);
  p.clear();
  o2->split("HTTPServer don't", p);
  got.assign(p.begin(), p.end());
  EXPECT_EQ(got, (std::vector<std::string>{"HTTPServer", " don't"}));
  EXPECT_EQ(Pretokenizer::name_for_pattern(cl->pattern()), "llama3");
  EXPECT_EQ(Pretokenizer::name_for_pattern(o2->pattern()), "o200k");
  EXPECT_EQ(Pretokenizer::name_for_pattern("x+"), "");
  EXPECT_FALSE(Pretokenizer::create("(unclosed", err));
  EXPECT_FALSE(err);
}

// The class table (built with whole planes skipped) against utf8proc on every code point.
TEST(Pretokenizer, ClassTableAgreesWithUtf8procEverywhere) {
  using namespace uni;
  for (uint32_t cp = 0; cp < 0x110000; cp++) {
    uint16_t want = 0;
    switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
      case UTF8PROC_CATEGORY_LU: want = kL | kLu; break;
      case UTF8PROC_CATEGORY_LL: want = kL | kLl; break;
      case UTF8PROC_CATEGORY_LT: want = kL | kLt; break;
      case UTF8PROC_CATEGORY_LM: want = kL | kLm; break;
      case UTF8PROC_CATEGORY_LO: want = kL | kLo; break;
      case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: want = kM; break;
      case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO: want = kN; break;
      default: break;
    }
    ASSERT_EQ(flags_of(cp) & ~(kSpace | kCR | kLF), want) << "U+" << std::hex << cp;
  }
  EXPECT_EQ(flags_of(0x3000), kSpace);
  EXPECT_EQ(flags_of('\n'), kSpace | kLF);
}

TEST(Pretokenizer, InvalidUtf8PiecesCoverTheInput) {
  std::mt19937 rng(11);
  for (const char* fam : kFamilies) {
    Status err;
    auto t = Pretokenizer::create(fam, err);
    auto r = Pretokenizer::create(t->pattern(), err);
    for (int k = 0; k < 300; k++) {
      std::string s = adversarial_text(k, 8);
      for (int j = 0; j < 4; j++) s.insert(s.begin() + rng() % (s.size() + 1), static_cast<char>(rng() % 256));
      for (auto* pre : {t.get(), r.get()}) {
        std::vector<std::string_view> p;
        pre->split(s, p);
        std::string back;
        for (auto v : p) {
          ASSERT_FALSE(v.empty());
          back += v;
        }
        ASSERT_EQ(back, s) << fam;
      }
    }
  }
}

}  // namespace
}  // namespace smelt
