// utf8.hpp against hand-made byte sequences whose verdict is known by construction.
#include "smelt/common/utf8.hpp"

#include <gtest/gtest.h>

using namespace smelt;

TEST(Utf8, ValidAndInvalid) {
  EXPECT_TRUE(utf8_valid("plain ascii"));
  EXPECT_TRUE(utf8_valid("中文 and emoji 😀"));
  EXPECT_FALSE(utf8_valid(std::string("a\xff" "b")));
  EXPECT_FALSE(utf8_valid(std::string("\xc0\xaf")));          // overlong '/'
  EXPECT_FALSE(utf8_valid(std::string("\xed\xa0\x80")));      // surrogate
  EXPECT_FALSE(utf8_valid(std::string("\xe4\xb8")));          // truncated
  EXPECT_EQ(utf8_first_invalid(std::string("abcdefghij\xff")), 10u);
}

TEST(Utf8, RepairReplacesEachBadByte) {
  std::string out;
  EXPECT_EQ(utf8_repair_append(std::string("a\xff\xfe" "b中"), out), 2u);
  EXPECT_EQ(out, "a\xEF\xBF\xBD\xEF\xBF\xBD" "b中");
  EXPECT_TRUE(utf8_valid(out));
}

// One U+FFFD per maximal ill-formed subpart (Unicode 15, section 3.9, "U+FFFD Substitution of
// Maximal Subparts"; what Python's errors="replace", the WHATWG decoder and JSON writers do), so
// text repaired here equals the same bytes repaired by those.
TEST(Utf8, RepairReplacesEachMaximalSubpart) {
  const std::string r = "\xEF\xBF\xBD";
  const auto repaired = [](const std::string& s, size_t* n = nullptr) {
    std::string out;
    const size_t k = utf8_repair_append(s, out);
    if (n) *n = k;
    return out;
  };
  // the standard's own example: 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64
  size_t n = 0;
  EXPECT_EQ(repaired("a\xF1\x80\x80\xE1\x80\xC2" "b\x80" "c\x80\xBF" "d", &n), "a" + r + r + r + "b" + r + "c" + r + r + "d");
  EXPECT_EQ(n, 6u);
  EXPECT_EQ(repaired("\xE4\xB8"), r) << "a truncated sequence at the end is one subpart";
  EXPECT_EQ(repaired("\xE4\xB8x"), r + "x");
  EXPECT_EQ(repaired("\xE0\x80\x80"), r + r + r) << "E0 takes A0..BF next: 80 cannot continue it";
  EXPECT_EQ(repaired("\xED\xA0\x80"), r + r + r) << "a surrogate";
  EXPECT_EQ(repaired("\xF4\x90\x80\x80"), r + r + r + r) << "past U+10FFFF";
  EXPECT_EQ(repaired("\xF0\x9F\x98"), r) << "an emoji cut short";
  EXPECT_EQ(repaired("\xC0\xAF"), r + r) << "overlong";
  EXPECT_EQ(repaired("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");
}

TEST(Utf8, DecodeAndEncodeRoundTrip) {
  std::string s = "x中😀";
  size_t i = 0;
  std::string back;
  while (i < s.size()) utf8_append(utf8_next(s, i), back);
  EXPECT_EQ(back, s);
  EXPECT_EQ(utf8_length(s), 3u);
}
