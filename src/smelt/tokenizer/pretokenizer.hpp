// Pre-tokenizers: split text into the pieces BPE merges within, exactly as the regex of a
// tokenizer family does (GPT-2, cl100k, o200k, Llama-3, Qwen2), by hand-written scanners, with a
// PCRE2 fallback for any other pattern. Not BPE itself (bpe_encode) and not byte-level mapping.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "smelt/common/status.hpp"

namespace smelt {

class Pretokenizer {
 public:
  virtual ~Pretokenizer() = default;
  // name: "gpt2" (also used by r50k/p50k), "cl100k", "o200k", "llama3", "qwen2"; anything else is
  // taken as a regex pattern (PCRE2, UTF mode). Returns null and sets err on a bad pattern.
  static std::unique_ptr<Pretokenizer> create(const std::string& name_or_pattern, Status& err);
  // The family name whose regex is exactly `pattern`, or "" (used when loading tokenizer.json).
  static std::string name_for_pattern(const std::string& pattern);

  // Appends the pieces of text; they are contiguous and concatenate back to text. Thread-safe.
  virtual void split(std::string_view text, std::vector<std::string_view>& pieces) const = 0;
  virtual const std::string& name() const = 0;     // family name, or "regex"
  virtual const std::string& pattern() const = 0;  // the regex text it implements
};

}  // namespace smelt
