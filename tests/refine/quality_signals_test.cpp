// quality_compute: every signal on small constructed texts whose values are worked out by hand
// in the comments, a plain reference implementation of the Gopher repetition measures (std::string
// words, as datatrove writes them) checked against the fast path on real samples, and the JSON.
#include "smelt/refine/quality_signals.hpp"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "test_files.hpp"
#include <nlohmann/json.hpp>
#include <utf8proc.h>

#include "smelt/common/utf8.hpp"

using namespace smelt;

namespace {

std::string sample(const char* name) {
  return test::read_file(std::string(SMELT_TEST_DATA) + "/quality/" + name);
}

const char* kSamples[] = {"en_prose.txt", "zh_prose.txt", "zh_coc.txt", "it_prose.txt", "ja_prose.txt",
                          "link_list.txt", "lorem_headings.txt", "maintainers.txt", "terms_boilerplate.txt",
                          "code_listing.c"};

QualitySignals measure(std::string_view t) {
  QualitySignals q;
  quality_compute(t, nullptr, q);
  return q;
}

// ---- reference: the word/line/paragraph definitions of quality_signals.hpp, written plainly ----

bool ref_space(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= '\t' && c <= '\r');
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}
bool ref_punct(char32_t c) {
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_SO;
}

std::vector<std::string> ref_words(std::string_view t) {
  std::vector<char32_t> cps;
  for (size_t i = 0; i < t.size();) cps.push_back(utf8_next(t, i));
  std::vector<std::string> words;
  size_t i = 0;
  while (i < cps.size()) {
    if (ref_space(cps[i])) { ++i; continue; }
    if (is_han(cps[i])) {
      std::string w;
      utf8_append(cps[i], w);
      words.push_back(w);
      ++i;
      continue;
    }
    size_t j = i;
    bool only_punct = true;
    std::string w;
    while (j < cps.size() && !ref_space(cps[j]) && !is_han(cps[j])) {
      only_punct &= ref_punct(cps[j]);
      utf8_append(cps[j], w);
      ++j;
    }
    const bool touches_han = (i > 0 && is_han(cps[i - 1])) || (j < cps.size() && is_han(cps[j]));
    if (!(only_punct && touches_han)) words.push_back(w);
    i = j;
  }
  return words;
}

std::string trim(std::string_view s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return std::string(s.substr(a, b - a));
}

// datatrove's find_duplicates: (duplicate elements, their characters)
std::pair<size_t, size_t> ref_find_duplicates(const std::vector<std::string>& x) {
  std::set<std::string> seen;
  size_t n = 0, c = 0;
  for (const auto& e : x) {
    if (!seen.insert(e).second) { ++n; c += utf8_length(e); }
  }
  return {n, c};
}

std::string ref_join(const std::vector<std::string>& w, size_t i, size_t n) {
  std::string s;
  for (size_t k = i; k < i + n; ++k) { s += w[k]; s += '\x01'; }  // a separator no word holds
  return s;
}
size_t ref_chars(const std::vector<std::string>& w, size_t i, size_t n) {
  size_t c = 0;
  for (size_t k = i; k < i + n; ++k) c += utf8_length(w[k]);
  return c;
}

// top n-gram: count of the most frequent (ties: first seen) times its characters; 0 below 2
double ref_top(const std::vector<std::string>& w, size_t n, double total) {
  if (w.size() < n) return 0;
  std::map<std::string, std::pair<size_t, size_t>> cnt;  // gram -> (count, first)
  for (size_t i = 0; i + n <= w.size(); ++i) {
    auto [it, fresh] = cnt.try_emplace(ref_join(w, i, n), 0, i);
    ++it->second.first;
  }
  size_t best = 0, first = 0;
  for (auto& [g, cf] : cnt)
    if (cf.first > best || (cf.first == best && cf.second < first)) { best = cf.first; first = cf.second; }
  if (best < 2) return 0;
  return std::min(1.0, static_cast<double>(best * ref_chars(w, first, n)) / total);
}

// datatrove's find_all_duplicate
double ref_dup(const std::vector<std::string>& w, size_t n, double total) {
  std::set<std::string> seen;
  size_t rep = 0, i = 0;
  while (w.size() >= n && i < w.size() - n + 1) {
    std::string g = ref_join(w, i, n);
    if (seen.count(g)) { rep += ref_chars(w, i, n); i += n; } else { seen.insert(g); ++i; }
  }
  return rep ? std::min(1.0, rep / total) : 0.0;
}

}  // namespace

TEST(QualitySignals, WordsAroundHanAndPunctuation) {
  // Words: "Hello," "world!" 你 好 世 界 "foo". "，" and "。" touch Han characters: not words.
  QualitySignals q = measure("Hello, world! 你好，世界。 foo");
  EXPECT_EQ(q.words, 7u);
  EXPECT_EQ(q.han_words, 4u);
  EXPECT_EQ(q.chars, 24u);
  EXPECT_DOUBLE_EQ(q.alpha_word_fraction, 1.0);
  // non-Han lengths without edge punctuation: Hello 5, world 5, foo 3
  EXPECT_DOUBLE_EQ(q.mean_word_length, 13.0 / 3.0);
  // a space-separated punctuation token is a word: "-" below
  q = measure("abc 123 $$$ d4 -");
  EXPECT_EQ(q.words, 5u);
  EXPECT_DOUBLE_EQ(q.alpha_word_fraction, 2.0 / 5.0);  // abc, d4
  // mean over words that are not all punctuation: abc 3, 123 3, d4 2
  EXPECT_DOUBLE_EQ(q.mean_word_length, 8.0 / 3.0);
  // "（见下文）": the brackets touch Han; "(see)" is one word of length 3
  q = measure("（见下文） (see)");
  EXPECT_EQ(q.words, 4u);
  EXPECT_EQ(q.han_words, 3u);
  EXPECT_DOUBLE_EQ(q.mean_word_length, 3.0);
}

TEST(QualitySignals, LinesAndParagraphs) {
  // lines: "a b", "c", "d" (the whitespace-only line is blank); paragraphs: "a b\n  c", "d"
  QualitySignals q = measure("a b\n  c  \n \t \nd\n");
  EXPECT_EQ(q.lines, 3u);
  EXPECT_EQ(q.paragraphs, 2u);
  EXPECT_EQ(q.chars, 16u);
  q = measure("");
  EXPECT_EQ(q.lines, 0u);
  EXPECT_EQ(q.paragraphs, 0u);
  EXPECT_EQ(q.words, 0u);
  EXPECT_EQ(q.chars, 0u);
}

TEST(QualitySignals, SymbolRatio) {
  // "#" 1; ellipses: "..." 1, "…" 1, "......" 2 (non-overlapping, as str.count) -> 5 over 7 words
  QualitySignals q = measure("# a ... b … c ......");
  EXPECT_EQ(q.words, 7u);
  EXPECT_DOUBLE_EQ(q.symbol_word_ratio, 5.0 / 7.0);
  q = measure("a.... b");  // one "..." in "....": 1 over 2 words
  EXPECT_DOUBLE_EQ(q.symbol_word_ratio, 0.5);
}

TEST(QualitySignals, BulletLines) {
  // bullets: • - 1. 2) (3) 一、 （二） a) ● = 9; not: "-5 degrees", "*args", "plain", "2021 was"
  const char* t =
      "• item\n- item\n-5 degrees\n1. first\n2) second\n(3) third\n一、中文\n（二）中文\n*args\nplain\n"
      "a) letter\n●item\n2021 was a year\n";
  QualitySignals q = measure(t);
  EXPECT_EQ(q.lines, 13u);
  EXPECT_DOUBLE_EQ(q.bullet_line_fraction, 9.0 / 13.0);
}

TEST(QualitySignals, EllipsisAndTerminalLines) {
  // ellipsis: "wait..." and "more…"; terminal: "done." "他说：“好。”" 'He said "yes."' "Done!)" "more…"
  // "wait..." (ends in "."); not terminal: "(see above)", "Title"
  QualitySignals q = measure("wait...\nmore…\ndone.\n他说：“好。”\nHe said \"yes.\"\nDone!)\n(see above)\nTitle\n");
  EXPECT_EQ(q.lines, 8u);
  EXPECT_DOUBLE_EQ(q.ellipsis_line_fraction, 2.0 / 8.0);
  EXPECT_DOUBLE_EQ(q.terminal_punct_line_fraction, 6.0 / 8.0);
  q = measure("问题？\n好！\n完了。\n没有");
  EXPECT_DOUBLE_EQ(q.terminal_punct_line_fraction, 3.0 / 4.0);
  EXPECT_EQ(q.paragraphs, 1u);
  EXPECT_DOUBLE_EQ(q.terminal_punct_para_fraction, 0.0);  // its last line has none
  // hard-wrapped text: 2 of 5 lines end a sentence, but both paragraphs do
  q = measure("This is a\nwrapped sentence that\nends here.\n\nAnother paragraph\nthat ends.\n");
  EXPECT_DOUBLE_EQ(q.terminal_punct_line_fraction, 2.0 / 5.0);
  EXPECT_DOUBLE_EQ(q.terminal_punct_para_fraction, 1.0);
}

TEST(QualitySignals, StopWords) {
  // English: distinct among Gopher's eight, case-insensitive, punctuation around ignored
  QualitySignals q = measure("The the THE of, and cat with-it");
  EXPECT_EQ(q.language.lang, "en");
  EXPECT_EQ(q.stop_words, 4u);  // the, of, and, with
  // Chinese: 我 们 的 人 也 是 and the pair 我们 -> 7 distinct
  q = measure("我们的人也是猫");
  EXPECT_EQ(q.language.lang, "zh");
  EXPECT_EQ(q.stop_words, 7u);
}

TEST(QualitySignals, DuplicateLinesAndParagraphs) {
  // lines "a b" "c d" "a b" "a b": 2 duplicates of 4; their chars 2 * 3 over 16 chars
  QualitySignals q = measure("a b\nc d\na b\na b\n");
  EXPECT_DOUBLE_EQ(q.dup_line_fraction, 0.5);
  EXPECT_DOUBLE_EQ(q.dup_line_char_fraction, 6.0 / 16.0);
  EXPECT_EQ(q.paragraphs, 1u);
  EXPECT_DOUBLE_EQ(q.dup_para_fraction, 0.0);
  // paragraphs "x y", "z", "x y": one duplicate of 3, 3 chars of 12
  q = measure("x y\n\nz\n\nx y\n");
  EXPECT_EQ(q.paragraphs, 3u);
  EXPECT_DOUBLE_EQ(q.dup_para_fraction, 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(q.dup_para_char_fraction, 3.0 / 12.0);
  EXPECT_DOUBLE_EQ(q.dup_line_fraction, 1.0 / 3.0);
}

TEST(QualitySignals, TopNgrams) {
  // words xx y xx y xx z (lengths 2 1 2 1 2 1, 9 chars)
  // 2-grams: (xx y) x2 first at 0, (y xx) x2 first at 1, (xx z) x1 -> tie, earliest: 2 * 3 / 9
  // 3-grams: (xx y xx) x2 -> 2 * 5 / 9 > 1 -> capped at 1 (overlapping copies)
  // 4-grams: all distinct -> 0
  QualitySignals q = measure("xx y xx y xx z");
  EXPECT_DOUBLE_EQ(q.top_ngram_char_fraction[0], 6.0 / 9.0);
  EXPECT_DOUBLE_EQ(q.top_ngram_char_fraction[1], 1.0);
  EXPECT_DOUBLE_EQ(q.top_ngram_char_fraction[2], 0.0);
  // no n-gram occurs twice: all 0
  q = measure("one two three four five six");
  for (double f : q.top_ngram_char_fraction) EXPECT_EQ(f, 0.0);
}

TEST(QualitySignals, DuplicateNgramsGreedy) {
  // "a b c d e" three times: 15 one-char words. The greedy scan (datatrove's find_all_duplicate):
  // n=5: new at 0..4, "a b c d e" again at 5 (+5, jump to 10), again at 10 (+5): 10/15
  // n=6..10: new at 0..4, the n-gram at 5 repeats the one at 0 (+n), the jump ends the scan: n/15
  QualitySignals q = measure("a b c d e a b c d e a b c d e");
  EXPECT_DOUBLE_EQ(q.dup_ngram_char_fraction[0], 10.0 / 15.0);
  for (int n = 6; n <= 10; ++n) EXPECT_DOUBLE_EQ(q.dup_ngram_char_fraction[n - 5], n / 15.0) << n;
  // Chinese: character n-grams. "天气很好" four times: 16 one-char words, 4-char period:
  // n=5: new at 0..3, at 4 "天气很好天" repeats 0 (+5, jump to 9), at 9..11 new? "气很好天气" at 9
  // equals the one at 1 -> +5, jump to 14 > 11: 10/16
  q = measure("天气很好天气很好天气很好天气很好");
  EXPECT_EQ(q.words, 16u);
  EXPECT_DOUBLE_EQ(q.dup_ngram_char_fraction[0], 10.0 / 16.0);
  EXPECT_DOUBLE_EQ(q.top_ngram_char_fraction[0], 4 * 2 / 16.0);  // 天气 x4
}

TEST(QualitySignals, C4Lines) {
  const char* t =
      "Please enable JavaScript.\n"
      "This site uses cookies.\n"
      "Read our Privacy Policy\n"
      "Lorem ipsum dolor.\n"
      "int main() { }\n"
      "本站隐私政策\n"
      "A normal line.\n"
      "Cookies are tasty; see our cookie policy and terms of use.\n";
  QualitySignals q = measure(t);
  EXPECT_EQ(q.lines, 8u);
  EXPECT_EQ(q.javascript_lines, 1u);
  EXPECT_EQ(q.policy_lines, 4u);  // uses cookies, Privacy Policy, 隐私政策, cookie policy + terms of use
  EXPECT_TRUE(q.has_lorem_ipsum);
  EXPECT_TRUE(q.has_curly_brace);
  EXPECT_DOUBLE_EQ(q.terminal_punct_line_fraction, 5.0 / 8.0);
  q = measure("We use cookies\nThe use of cookies\nno cookie here\nlorem\nipsum");
  EXPECT_EQ(q.policy_lines, 2u);
  EXPECT_FALSE(q.has_lorem_ipsum);
  EXPECT_FALSE(q.has_curly_brace);
}

TEST(QualitySignals, EntropyAndReplacement) {
  EXPECT_DOUBLE_EQ(measure("aabb").char_entropy, 1.0);
  EXPECT_DOUBLE_EQ(measure("abcd").char_entropy, 2.0);
  EXPECT_DOUBLE_EQ(measure("中中文文").char_entropy, 1.0);
  EXPECT_DOUBLE_EQ(measure("😀😀ab").char_entropy, 1.5);
  EXPECT_DOUBLE_EQ(measure("aaaa").char_entropy, 0.0);
  EXPECT_DOUBLE_EQ(measure("").char_entropy, 0.0);
  EXPECT_DOUBLE_EQ(measure("ab\xEF\xBF\xBD" "d").replacement_char_fraction, 0.25);
  // invalid bytes (the input should be valid UTF-8, but must not crash) count one U+FFFD each:
  // a b \xff, then the truncated \xe4\xb8 is two -> 3 of 5; an overlong 3-byte form is 3 more
  EXPECT_DOUBLE_EQ(measure("ab\xff\xe4\xb8").replacement_char_fraction, 3.0 / 5.0);
  QualitySignals q = measure("a\xe0\x80\x80");
  EXPECT_EQ(q.chars, 4u);
  EXPECT_DOUBLE_EQ(q.replacement_char_fraction, 3.0 / 4.0);
}

TEST(QualitySignals, RepetitionMatchesReferenceOnRealText) {
  for (const char* f : kSamples) {
    const std::string t = sample(f);
    ASSERT_FALSE(t.empty()) << f;
    QualitySignals q = measure(t);
    std::vector<std::string> w = ref_words(t);
    ASSERT_EQ(q.words, w.size()) << f;
    double total = 0;
    for (auto& x : w) total += utf8_length(x);
    for (size_t n = 2; n <= 4; ++n)
      EXPECT_DOUBLE_EQ(q.top_ngram_char_fraction[n - 2], ref_top(w, n, total)) << f << " n=" << n;
    for (size_t n = 5; n <= 10; ++n)
      EXPECT_DOUBLE_EQ(q.dup_ngram_char_fraction[n - 5], ref_dup(w, n, total)) << f << " n=" << n;
    // lines and paragraphs, trimmed and non-empty
    std::vector<std::string> lines, paras;
    std::string para;
    std::stringstream ss(t);
    for (std::string l; std::getline(ss, l);) {
      std::string tl = trim(l);
      if (tl.empty()) {
        if (!para.empty()) paras.push_back(trim(para));
        para.clear();
        continue;
      }
      lines.push_back(tl);
      para += l + "\n";
    }
    if (!para.empty()) paras.push_back(trim(para));
    ASSERT_EQ(q.lines, lines.size()) << f;
    ASSERT_EQ(q.paragraphs, paras.size()) << f;
    auto [dl, dlc] = ref_find_duplicates(lines);
    auto [dp, dpc] = ref_find_duplicates(paras);
    const double chars = static_cast<double>(utf8_length(t));
    EXPECT_EQ(q.chars, utf8_length(t)) << f;
    EXPECT_DOUBLE_EQ(q.dup_line_fraction, static_cast<double>(dl) / lines.size()) << f;
    EXPECT_DOUBLE_EQ(q.dup_line_char_fraction, dlc / chars) << f;
    EXPECT_DOUBLE_EQ(q.dup_para_fraction, static_cast<double>(dp) / paras.size()) << f;
    EXPECT_DOUBLE_EQ(q.dup_para_char_fraction, dpc / chars) << f;
  }
}

TEST(QualitySignals, RepetitionMatchesReferenceOnRandomRepetitiveText) {
  // Small vocabularies and copied stretches repeat n-grams often, which exercises the candidate
  // filtering and the greedy jumps far more than prose does. Fixed seed: the same documents every run.
  const char* pieces[] = {"a", "b", "cc", "的", "是", "中", "，", "。", "...", "#", "x.", "(", ")", "😀", "é"};
  const char* seps[] = {" ", " ", " ", "", "\n", "\n\n", "\t"};
  uint64_t state = 42;
  int repetitive = 0;
  auto next = [&] { state = state * 6364136223846793005ULL + 1442695040888963407ULL; return state >> 33; };
  for (int doc = 0; doc < 300; ++doc) {
    // (piece, separator) pairs; a third of the steps copy an earlier stretch of 3..16 pairs
    std::vector<std::pair<int, int>> toks;
    const size_t vocab = 2 + next() % 14, len = next() % 400;
    while (toks.size() < len) {
      if (toks.size() > 20 && next() % 3 == 0) {
        const size_t span = 3 + next() % 14, from = next() % (toks.size() - span);
        for (size_t k = 0; k < span; ++k) toks.push_back(toks[from + k]);
      } else {
        toks.emplace_back(static_cast<int>(next() % vocab), static_cast<int>(next() % 7));
      }
    }
    std::string t;
    for (auto [p, sp] : toks) {
      t += pieces[p];
      t += seps[sp];
    }
    QualitySignals q = measure(t);
    std::vector<std::string> w = ref_words(t);
    ASSERT_EQ(q.words, w.size()) << t;
    double total = 0;
    for (auto& x : w) total += utf8_length(x);
    for (size_t n = 2; n <= 4; ++n)
      ASSERT_DOUBLE_EQ(q.top_ngram_char_fraction[n - 2], ref_top(w, n, total)) << "n=" << n << " doc " << t;
    for (size_t n = 5; n <= 10; ++n)
      ASSERT_DOUBLE_EQ(q.dup_ngram_char_fraction[n - 5], ref_dup(w, n, total)) << "n=" << n << " doc " << t;
    repetitive += q.dup_ngram_char_fraction[5] > 0;
  }
  EXPECT_GT(repetitive, 150);  // most documents did repeat 10-grams
}

TEST(QualitySignals, RealSamples) {
  QualitySignals en = measure(sample("en_prose.txt"));
  EXPECT_EQ(en.language.lang, "en");
  EXPECT_GT(en.words, 700u);
  EXPECT_GT(en.mean_word_length, 4.0);
  EXPECT_LT(en.mean_word_length, 6.0);
  EXPECT_EQ(en.stop_words, 8u);
  EXPECT_GT(en.alpha_word_fraction, 0.95);
  EXPECT_GT(en.char_entropy, 4.0);
  QualitySignals zh = measure(sample("zh_prose.txt"));
  EXPECT_EQ(zh.language.lang, "zh");
  EXPECT_GT(zh.han_words * 10, zh.words * 9);  // > 90% of the words are Han characters
  EXPECT_GT(zh.stop_words, 20u);
  EXPECT_DOUBLE_EQ(zh.terminal_punct_line_fraction, 1.0);
  EXPECT_GT(zh.char_entropy, 7.0);  // many distinct characters
  QualitySignals lorem = measure(sample("lorem_headings.txt"));
  EXPECT_TRUE(lorem.has_lorem_ipsum);
  EXPECT_GT(lorem.dup_line_fraction, 0.3);
  QualitySignals code = measure(sample("code_listing.c"));
  EXPECT_TRUE(code.has_curly_brace);
  QualitySignals terms = measure(sample("terms_boilerplate.txt"));
  EXPECT_EQ(terms.policy_lines, 3u);  // "Terms of Use" x2, "privacy policy"
}

TEST(QualitySignals, ThreadSafe) {
  // two threads, opposite orders, reusing their thread-local scratch: same bytes as one thread
  std::vector<std::string> docs;
  for (const char* f : kSamples) docs.push_back(sample(f));
  std::vector<std::string> want(docs.size());
  for (size_t i = 0; i < docs.size(); ++i) measure(docs[i]).append_json(want[i]);
  int mismatches[2] = {0, 0};
  std::vector<std::thread> th;
  for (int t = 0; t < 2; ++t) {
    th.emplace_back([&, t] {
      for (int r = 0; r < 20; ++r)
        for (size_t k = 0; k < docs.size(); ++k) {
          const size_t i = t ? docs.size() - 1 - k : k;
          std::string js;
          measure(docs[i]).append_json(js);
          mismatches[t] += js != want[i];
        }
    });
  }
  for (auto& x : th) x.join();
  EXPECT_EQ(mismatches[0], 0);
  EXPECT_EQ(mismatches[1], 0);
}

TEST(QualitySignals, Json) {
  QualitySignals q = measure("The cat and the dog.\nThe cat and the dog.\n");
  std::string js = "prefix:";
  q.append_json(js);
  ASSERT_EQ(js.rfind("prefix:{", 0), 0u);
  auto j = nlohmann::json::parse(js.substr(7));
  EXPECT_EQ(j["lang"], "en");
  EXPECT_EQ(j["lang_score"], 1);
  EXPECT_EQ(j["chars"], 42);
  EXPECT_EQ(j["words"], 10);
  EXPECT_EQ(j["lines"], 2);
  EXPECT_EQ(j["dup_line_fraction"], 0.5);
  EXPECT_EQ(j["terminal_punct_line_fraction"], 1);
  EXPECT_EQ(j["lorem_ipsum"], false);
  EXPECT_FALSE(j.contains("html_tag_density"));
  for (const char* k : {"han_words", "paragraphs", "mean_word_length", "symbol_word_ratio", "bullet_line_fraction",
                        "ellipsis_line_fraction", "alpha_word_fraction", "stop_words", "dup_para_fraction",
                        "dup_line_char_fraction", "dup_para_char_fraction", "top_2gram_char_fraction",
                        "top_3gram_char_fraction", "top_4gram_char_fraction", "dup_5gram_char_fraction",
                        "dup_10gram_char_fraction", "terminal_punct_para_fraction", "javascript_lines",
                        "policy_lines", "curly_brace",
                        "char_entropy", "replacement_char_fraction", "mojibake_fraction"})
    EXPECT_TRUE(j.contains(k)) << k;
  // mean word length: The cat and the dog. -> 3 3 3 3 3 ("dog." without its period); 4 decimals
  EXPECT_EQ(j["mean_word_length"], 3);
  const double h = j["char_entropy"];
  EXPECT_DOUBLE_EQ(h, std::round(q.char_entropy * 1e4) / 1e4);
  // html keys only when present
  HtmlSignals html{true, 12.34567, 1.0 / 3.0};
  quality_compute("text", &html, q);
  js.clear();
  q.append_json(js);
  j = nlohmann::json::parse(js);
  EXPECT_EQ(j["html_tag_density"], 12.3457);
  EXPECT_EQ(j["html_link_text_ratio"], 0.3333);
  // deterministic: the same text gives the same bytes
  std::string a, b;
  measure(sample("zh_prose.txt")).append_json(a);
  measure(sample("zh_prose.txt")).append_json(b);
  EXPECT_EQ(a, b);
}

// Double-encoded UTF-8, written by Python's own codecs (UTF-8 bytes read as Windows-1252, the bytes
// it leaves undefined as C1 controls, as browsers read them): every byte of every non-ASCII
// character becomes one counted character; the clean texts count none.
TEST(QualitySignals, MojibakeIsCountedAndCleanTextIsNot) {
  const std::string dir = ::testing::TempDir() + "smelt-mojibake-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  const char* kDamage =
      "import sys; t = open(sys.argv[1], encoding='utf-8').read(); "
      "d = ''.join(bytes([b]).decode('cp1252', errors='ignore') or chr(b) for b in t.encode('utf-8')); "
      "open(sys.argv[2], 'w', encoding='utf-8').write(d); "
      "print(sum(len(c.encode('utf-8')) for c in t if ord(c) > 127))";
  for (const std::string f : {"quality/it_prose.txt", "quality/zh_prose.txt", "quality/ja_prose.txt", "tokenizer/mixed.txt"}) {
    const std::string path = std::string(SMELT_TEST_DATA) + "/" + f, damaged = dir + "/damaged.txt";
    const std::string clean = test::read_file(path);
    EXPECT_EQ(quality_mojibake_chars(clean), 0u) << f;
    int rc = 0;
    const std::string out = test::run_command(
        std::string("python3 -c \"") + kDamage + "\" '" + path + "' '" + damaged + "'", rc);
    ASSERT_EQ(rc, 0) << out;
    const std::string bad = test::read_file(damaged);
    EXPECT_EQ(quality_mojibake_chars(bad), std::stoull(out)) << f;
    QualitySignals q;
    quality_compute(bad, nullptr, q);
    EXPECT_GT(q.mojibake_fraction, 0.002) << f;
    quality_compute(clean, nullptr, q);
    EXPECT_EQ(q.mojibake_fraction, 0.0) << f;
  }
  std::filesystem::remove_all(dir);
  // the classic runs, one by one
  EXPECT_EQ(quality_mojibake_chars("caf\xC3\x83\xC2\xA9"), 2u);                 // "cafÃ©"
  EXPECT_EQ(quality_mojibake_chars("a \xC3\xA2\xE2\x82\xAC\xE2\x80\x9C b"), 3u);  // "â€“" (– read as 1252)
  EXPECT_EQ(quality_mojibake_chars("\xC3\x82\xC2\xA0"), 2u);                     // "Â" + no-break space
  EXPECT_EQ(quality_mojibake_chars("\xC3\x83 x \xC2\xA9"), 0u) << "a lead and a continuation apart are not a run";
}
