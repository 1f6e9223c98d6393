// Incremental detokenisation for streaming output: token ids in, text out as soon as it is whole.
// A byte-level BPE token may end inside a UTF-8 character; the tail bytes wait for the next token,
// so every chunk handed out is complete UTF-8 (invalid bytes become U+FFFD). Not the tokenizer.
#pragma once
#include <cstdint>
#include <string>

#include "smelt/tokenizer/tokenizer.hpp"

namespace smelt {

class TextStream {
 public:
  explicit TextStream(const Tokenizer& tok) : tok_(tok) {}
  // Decodes id and returns the text that is now complete ("" while a character is still open).
  std::string push(uint32_t id);
  // The held bytes at the end of the stream (an unfinished character becomes U+FFFD).
  std::string finish();
  const std::string& text() const { return text_; }  // everything returned so far

 private:
  const Tokenizer& tok_;
  std::string pending_, text_;
};

// Bytes at the end of s that start a UTF-8 character but do not finish it (0..3).
size_t utf8_incomplete_tail(const std::string& s);

}  // namespace smelt
