// strip_terminal_codes: each kind of code from ECMA-48 (CSI, string commands, short escapes, C1
// controls), backspace overstrikes as man(1) writes them, and what must stay untouched.
#include "smelt/text/terminal_codes.hpp"

#include <string>

#include <gtest/gtest.h>

namespace smelt {
namespace {

std::string strip(std::string s, TerminalStrip* out = nullptr) {
  TerminalStrip r = strip_terminal_codes(s);
  if (out) *out = r;
  return s;
}

TEST(TerminalCodes, ColoursAndCursorMovesGo) {
  TerminalStrip r;
  // a fortunes-zh line as it is on disk
  EXPECT_EQ(strip("\x1b[33;1m      *\x1b[;m 承诺软件自由", &r), "      * 承诺软件自由");
  EXPECT_EQ(r.sequences, 2u);
  EXPECT_EQ(r.bytes, 11u);  // ESC [ 3 3 ; 1 m and ESC [ ; m
  EXPECT_EQ(strip("a\x1b[2J\x1b[1;1Hb\x1b[?25lc\x1b[0m"), "abc");
  EXPECT_EQ(strip("x\x1b[38;5;208my"), "xy");        // 256-colour
  EXPECT_EQ(strip("x\x1b[ qy"), "xy");               // an intermediate byte (cursor style)
  EXPECT_EQ(strip("x\xc2\x9b" "31my"), "xy");        // the 8-bit CSI, U+009B
}

TEST(TerminalCodes, StringCommandsEndAtTheirTerminatorOrTheLine) {
  EXPECT_EQ(strip("a\x1b]0;window title\x07" "b"), "ab");        // OSC ... BEL
  EXPECT_EQ(strip("a\x1b]8;;http://x/\x1b\\link\x1b]8;;\x1b\\b"), "alinkb");  // OSC 8 hyperlink, ESC \ ends
  EXPECT_EQ(strip("a\x1bPq#0;2;0;0;0\x1b\\b"), "ab");            // DCS
  EXPECT_EQ(strip("a\x1b]no terminator\nnext line"), "a\nnext line");  // never past a newline
}

TEST(TerminalCodes, ShortEscapesAndControlBytesGo) {
  EXPECT_EQ(strip("a\x1b(Bb\x1b" "7c\x1b=d"), "abcd");
  EXPECT_EQ(strip("bell\x07 nul\x01\x02\x7f end"), "bell nul end");
  EXPECT_EQ(strip("a\xc2\x85" "b"), "ab");  // C1 NEL
  EXPECT_EQ(strip("trailing escape\x1b"), "trailing escape");
  EXPECT_EQ(strip("\x1b[12"), "");  // a CSI cut off by the end
}

TEST(TerminalCodes, OverstrikesKeepTheCharacterPrintedLast) {
  TerminalStrip r;
  // man's bold (c\bc) and underline (_\bc), ASCII and a three-byte character
  EXPECT_EQ(strip("N\bNA\bAM\bME\bE _\bf_\bi_\bl_\be \xe5\x90\x8d\b\xe5\x90\x8d", &r), "NAME file 名");
  EXPECT_EQ(r.sequences, 9u);
  EXPECT_EQ(r.bytes, 4u * 2 + 4u * 2 + 4u);
  EXPECT_EQ(strip("\bstart\n\bline"), "start\nline");  // nothing to strike over
}

TEST(TerminalCodes, TextWithoutCodesIsUntouched) {
  TerminalStrip r;
  const std::string t = "tab\there\nCR\r\nform\ffeed\vvt, 中文「引号」, \xc2\xa0nbsp, \xc3\xa9, bad \xff\xfe utf-8";
  EXPECT_EQ(strip(t, &r), t);
  EXPECT_EQ(r.sequences, 0u);
  EXPECT_EQ(r.bytes, 0u);
  EXPECT_EQ(strip(""), "");
}

}  // namespace
}  // namespace smelt
