// TextStream (serve/text_stream.hpp): multi-byte UTF-8 characters split across tokens come out
// once complete, a token holding the end of one character and the start of the next releases the
// first, and an unfinished character at the end becomes U+FFFD.
#include <vector>

#include <gtest/gtest.h>

#include "smelt/serve/text_stream.hpp"

using namespace smelt;

namespace {

// 256 single-byte tokens plus token 256 = "\xAD\xE6" (the last byte of 中, the first of 文).
Tokenizer byte_tokenizer() {
  BpeModel m;
  for (int b = 0; b < 256; b++) m.vocab.push_back(std::string(1, (char)b));
  m.vocab.push_back("\xAD\xE6");
  m.merges.push_back({0xAD, 0xE6});
  Tokenizer t;
  Status s = Tokenizer::from_model(m, t);
  EXPECT_TRUE(s) << s.message();
  return t;
}

TEST(TextStream, SplitCharactersComeOutWhenComplete) {
  Tokenizer tok = byte_tokenizer();
  TextStream ts(tok);
  // "hé 中文": é = C3 A9, 中 = E4 B8 AD, 文 = E6 96 87
  std::vector<uint32_t> ids = {'h', 0xC3, 0xA9, ' ', 0xE4, 0xB8, 256, 0x96, 0x87};
  std::vector<std::string> want = {"h", "", "\xC3\xA9", " ", "", "", "\xE4\xB8\xAD", "", "\xE6\x96\x87"};
  for (size_t i = 0; i < ids.size(); i++) EXPECT_EQ(ts.push(ids[i]), want[i]) << "token " << i;
  EXPECT_EQ(ts.finish(), "");
  EXPECT_EQ(ts.text(), "h\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87");
}

TEST(TextStream, UnfinishedOrInvalidBytesBecomeReplacementCharacters) {
  Tokenizer tok = byte_tokenizer();
  TextStream ts(tok);
  EXPECT_EQ(ts.push('a'), "a");
  EXPECT_EQ(ts.push(0x96), "\xEF\xBF\xBD");  // a lone continuation byte: nothing to wait for
  EXPECT_EQ(ts.push(0xE4), "");
  EXPECT_EQ(ts.finish(), "\xEF\xBF\xBD");     // the stream ended inside a character
  EXPECT_EQ(utf8_incomplete_tail("ab\xF0\x9F\x98"), 3u);
  EXPECT_EQ(utf8_incomplete_tail("ab\xF0\x9F\x98\x80"), 0u);
  EXPECT_EQ(utf8_incomplete_tail(""), 0u);
}

}  // namespace
