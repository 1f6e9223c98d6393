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

TEST(Utf8, DecodeAndEncodeRoundTrip) {
  std::string s = "x中😀";
  size_t i = 0;
  std::string back;
  while (i < s.size()) utf8_append(utf8_next(s, i), back);
  EXPECT_EQ(back, s);
  EXPECT_EQ(utf8_length(s), 3u);
}
