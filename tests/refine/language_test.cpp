// language_detect / language_decide on constructed strings whose script counts are known by hand,
// and on real English, Chinese, Italian and Japanese text from Debian's documentation.
#include "smelt/refine/language.hpp"

#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "test_files.hpp"

#include "smelt/refine/quality_signals.hpp"

using namespace smelt;

namespace {

std::string sample(const char* name) {
  return test::read_file(std::string(SMELT_TEST_DATA) + "/quality/" + name);
}

uint64_t pack(const char* w) {
  uint64_t k = 0;
  for (int i = 0; w[i]; ++i) k |= static_cast<uint64_t>(static_cast<unsigned char>(w[i])) << (8 * i);
  return k;
}

}  // namespace

TEST(Language, NoLettersIsUnknown) {
  for (const char* s : {"", "   \n", "12345 !!! ... 42", "。，！"}) {
    LanguageGuess g = language_detect(s);
    EXPECT_EQ(g.lang, "unknown") << s;
    EXPECT_EQ(g.confidence, 0) << s;
  }
}

TEST(Language, StopWordTables) {
  EXPECT_EQ(english_stop_id(pack("the")), 0);
  EXPECT_EQ(english_stop_id(pack("with")), 7);
  EXPECT_GE(english_stop_id(pack("because")), kGopherStopWords);
  EXPECT_EQ(english_stop_id(pack("cat")), -1);
  EXPECT_EQ(english_stop_id(pack("in")), -1);  // Italian/German too: not counted as English
  EXPECT_EQ(english_stop_id(0), -1);
  EXPECT_GE(zh_stop_id(U'的', 0), 0);
  EXPECT_GE(zh_stop_id(U'一', U'个'), 0);
  EXPECT_NE(zh_stop_id(U'一', U'个'), zh_stop_id(U'的', 0));
  EXPECT_EQ(zh_stop_id(U'猫', 0), -1);
  EXPECT_EQ(zh_stop_id(U'一', 0), -1);  // only the pair 一个 is listed
}

TEST(Language, ScriptOf) {
  EXPECT_EQ(script_of('a'), Script::kLatin);
  EXPECT_EQ(script_of('1'), Script::kNone);
  EXPECT_EQ(script_of(U'é'), Script::kLatin);
  EXPECT_EQ(script_of(U'中'), Script::kHan);
  EXPECT_EQ(script_of(U'㐀'), Script::kHan);        // CJK extension A
  EXPECT_EQ(script_of(U'\U00020000'), Script::kHan);  // extension B
  EXPECT_EQ(script_of(U'の'), Script::kKana);
  EXPECT_EQ(script_of(U'カ'), Script::kKana);
  EXPECT_EQ(script_of(U'・'), Script::kNone);  // katakana middle dot is punctuation
  EXPECT_EQ(script_of(U'한'), Script::kHangul);
  EXPECT_EQ(script_of(U'Ж'), Script::kCyrillic);
  EXPECT_EQ(script_of(U'ب'), Script::kArabic);
  EXPECT_EQ(script_of(U'λ'), Script::kOther);
  EXPECT_EQ(script_of(U'。'), Script::kNone);
}

TEST(Language, CountsByHand) {
  // "the cat and the dog": 15 Latin letters, 5 words, 3 English function words (the, and, the):
  // density 0.6 >= 2 * 0.12, so confidence = Latin share = 1.
  LanguageGuess g = language_detect("The cat and the dog.");
  EXPECT_EQ(g.lang, "en");
  EXPECT_DOUBLE_EQ(g.confidence, 1.0);
  EXPECT_DOUBLE_EQ(g.latin_fraction, 1.0);
  EXPECT_DOUBLE_EQ(g.han_fraction, 0.0);

  // "中文abc": 2 Han + 3 Latin letters. han_fraction 2/5; weighted Han 6 vs Latin 3 -> zh, 6/9.
  g = language_detect("中文abc");
  EXPECT_EQ(g.lang, "zh");
  EXPECT_DOUBLE_EQ(g.han_fraction, 0.4);
  EXPECT_DOUBLE_EQ(g.latin_fraction, 0.6);
  EXPECT_DOUBLE_EQ(g.confidence, 6.0 / 9.0);

  // Latin without English function words: "other"; confidence = share * (1 - density / 0.12).
  g = language_detect("gatto cane casa");
  EXPECT_EQ(g.lang, "other");
  EXPECT_DOUBLE_EQ(g.confidence, 1.0);
  // one hit in ten words: density 0.1 < 0.12 -> other, confidence 1 - 0.1/0.12
  g = language_detect("uno due tre quattro cinque sei sette otto nove the");
  EXPECT_EQ(g.lang, "other");
  EXPECT_NEAR(g.confidence, 1.0 - 0.1 / 0.12, 1e-12);
  // two hits in ten: density 0.2 -> en, confidence 0.2 / 0.24
  g = language_detect("uno due tre quattro cinque sei sette otto the and");
  EXPECT_EQ(g.lang, "en");
  EXPECT_NEAR(g.confidence, 0.2 / 0.24, 1e-12);

  // Kana with Han: Japanese, "other". Cyrillic, Hangul: "other".
  EXPECT_EQ(language_detect("これは日本語の文章です").lang, "other");
  EXPECT_EQ(language_detect("Привет, как дела?").lang, "other");
  EXPECT_EQ(language_detect("안녕하세요 여러분").lang, "other");
}

TEST(Language, DecideFromCounts) {
  LanguageCounts c;
  EXPECT_EQ(language_decide(c).lang, "unknown");
  c.han = 100;
  c.kana = 5;  // 5/105 < 10% kana: still Chinese
  LanguageGuess g = language_decide(c);
  EXPECT_EQ(g.lang, "zh");
  EXPECT_DOUBLE_EQ(g.confidence, 300.0 / 310.0);
  c.kana = 40;
  EXPECT_EQ(language_decide(c).lang, "other");
}

TEST(Language, RealText) {
  struct Case { const char* file; const char* lang; double min_conf; };
  for (const Case& k : {Case{"en_prose.txt", "en", 0.95}, Case{"zh_prose.txt", "zh", 0.85},
                        Case{"zh_coc.txt", "zh", 0.9}, Case{"it_prose.txt", "other", 0.7},
                        Case{"ja_prose.txt", "other", 0.9}}) {
    const std::string t = sample(k.file);
    ASSERT_FALSE(t.empty()) << k.file;
    LanguageGuess g = language_detect(t);
    EXPECT_EQ(g.lang, k.lang) << k.file;
    EXPECT_GE(g.confidence, k.min_conf) << k.file;
    EXPECT_LE(g.confidence, 1.0) << k.file;
  }
}

TEST(Language, SameAnswerAsQualityCompute) {
  // quality_compute counts scripts in its own pass; it must agree with language_detect exactly.
  for (const char* f : {"en_prose.txt", "zh_prose.txt", "zh_coc.txt", "it_prose.txt", "ja_prose.txt",
                        "link_list.txt", "lorem_headings.txt", "maintainers.txt", "terms_boilerplate.txt",
                        "code_listing.c"}) {
    const std::string t = sample(f);
    QualitySignals q;
    quality_compute(t, nullptr, q);
    LanguageGuess g = language_detect(t);
    EXPECT_EQ(q.language.lang, g.lang) << f;
    EXPECT_DOUBLE_EQ(q.language.confidence, g.confidence) << f;
    EXPECT_DOUBLE_EQ(q.language.han_fraction, g.han_fraction) << f;
    EXPECT_DOUBLE_EQ(q.language.latin_fraction, g.latin_fraction) << f;
  }
}
