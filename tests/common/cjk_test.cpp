// The one CJK table (common/cjk.hpp): the Han and kana ranges at their edges, and is_cjk_wide equal
// to the UTF-8 lead-byte rule extraction used before it read the table (0xE3..0xE9, or 0xEF 0xBC).
#include "smelt/common/cjk.hpp"

#include <string>

#include <gtest/gtest.h>

#include "smelt/common/utf8.hpp"

using namespace smelt;

TEST(Cjk, HanAtTheBlockEdges) {
  for (char32_t cp : {0x4E00u, 0x9FFFu, 0x3400u, 0x4DBFu, 0x20000u, 0x323AFu, 0xF900u, 0xFAFFu, 0x2F800u, 0x2FA1Fu})
    EXPECT_TRUE(is_han(cp)) << std::hex << static_cast<uint32_t>(cp);
  for (char32_t cp : {0x4DFFu, 0xA000u, 0x33FFu, 0x1FFFFu, 0x323B0u, 0xF8FFu, 0xFB00u, 0x40000u, 0x3007u,
                      0x3042u, 0xAC00u, 0x41u})
    EXPECT_FALSE(is_han(cp)) << std::hex << static_cast<uint32_t>(cp);
}

TEST(Cjk, KanaAndHanSymbols) {
  for (char32_t cp : {0x3042u, 0x30A2u, 0x30FFu, 0x31F0u, 0xFF66u, 0xFF9Fu}) EXPECT_TRUE(is_kana(cp));
  for (char32_t cp : {0x303Fu, 0x3100u, 0xFF65u, 0xFFA0u, 0x4E00u}) EXPECT_FALSE(is_kana(cp));
  for (char32_t cp : {0x2F00u, 0x2FD5u, 0x3007u}) EXPECT_TRUE(is_han_symbol(cp));
  for (char32_t cp : {0x2FD6u, 0x3006u, 0x4E00u}) EXPECT_FALSE(is_han_symbol(cp));
}

TEST(Cjk, WideIsTheLeadByteRuleOverEveryThreeByteCodePoint) {
  for (char32_t cp = 0x800; cp <= 0xFFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;  // surrogates have no UTF-8 form
    std::string u;
    utf8_append(cp, u);
    ASSERT_EQ(u.size(), 3u);
    const auto b0 = static_cast<unsigned char>(u[0]), b1 = static_cast<unsigned char>(u[1]);
    const bool by_bytes = (b0 >= 0xE3 && b0 <= 0xE9) || (b0 == 0xEF && b1 == 0xBC);
    ASSERT_EQ(is_cjk_wide(cp), by_bytes) << std::hex << static_cast<uint32_t>(cp);
  }
}
