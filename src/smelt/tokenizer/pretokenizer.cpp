// Pre-tokenizers: hand-written scanners that split exactly as the GPT-2, cl100k/Llama-3, Qwen2 and
// o200k regexes do (leftmost match, alternatives in order, with the regex's backtracking worked out
// per alternative), and PCRE2 for any other pattern. Tested against PCRE2 running the official
// patterns. Not BPE (bpe_encode.cpp).
#include "smelt/tokenizer/pretokenizer.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "smelt/tokenizer/unicode_tables.hpp"

namespace smelt {

namespace {

using namespace uni;
using uchar = unsigned char;

const std::string kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const std::string kCl100kPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const std::string kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const std::string kO200kPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

constexpr uint16_t kU = kLu | kLt | kLm | kLo | kM;  // o200k's upper-ish class
constexpr uint16_t kW = kLl | kLm | kLo | kM;        // o200k's lower-ish class
constexpr uint16_t kNl = kCR | kLF;

struct Text {
  const uchar* s;
  size_t n;
  uint16_t at(size_t i, int& len) const { return i < n ? char_at(s, i, n, len) : (len = 0, uint16_t(0xFFFF)); }
  bool has(size_t i) const { return i < n; }
  // end of the run of characters from i whose flags intersect `want` (and not 0xFFFF past the end)
  size_t run(size_t i, uint16_t want) const {
    int len;
    while (i < n) {
      uint16_t f = char_at(s, i, n, len);
      if (!(f & want)) break;
      i += len;
    }
    return i;
  }
  size_t run_other(size_t i) const {  // [^\s\p{L}\p{N}]+
    int len;
    while (i < n) {
      uint16_t f = char_at(s, i, n, len);
      if (f & (kL | kN | kSpace)) break;
      i += len;
    }
    return i;
  }
};

inline bool is_other(uint16_t f) { return f != 0xFFFF && !(f & (kL | kN | kSpace)); }

// 's 't 're 've 'm 'll 'd at i (s[i] == '\''); case-insensitive also folds s/S/U+017F. Returns length or 0.
size_t contraction(const Text& t, size_t i, bool ci) {
  if (i + 1 >= t.n) return 0;
  auto low = [&](uchar c) -> uchar { return ci && c >= 'A' && c <= 'Z' ? c + 32 : c; };
  uchar c = low(t.s[i + 1]);
  if (c == 's' || c == 't' || c == 'm' || c == 'd') return 2;
  if (ci && t.s[i + 1] == 0xC5 && i + 2 < t.n && t.s[i + 2] == 0xBF) return 3;  // U+017F long s
  if (i + 2 < t.n) {
    uchar d = low(t.s[i + 2]);
    if ((c == 'r' || c == 'v') && d == 'e') return 3;
    if (c == 'l' && d == 'l') return 3;
  }
  return 0;
}

// \s*[\r\n]+ | \s+(?!\S) | \s+ at a whitespace character i; `newline_alt` for the cl100k family.
size_t whitespace(const Text& t, size_t i, bool newline_alt) {
  size_t e = i, last_start = i, nl_end = 0;
  int len;
  while (e < t.n) {
    uint16_t f = char_at(t.s, e, t.n, len);
    if (!(f & kSpace)) break;
    last_start = e;
    e += len;
    if (f & kNl) nl_end = e;
  }
  if (newline_alt && nl_end) return nl_end;
  if (e == t.n) return e;
  if (last_start > i) return last_start;  // leave the last one to prefix the next word
  return e;
}

size_t next_gpt2(const Text& t, size_t i) {
  int len;
  uint16_t c = t.at(i, len);
  if (t.s[i] == '\'') {
    if (size_t k = contraction(t, i, false)) return i + k;
  }
  size_t j = t.s[i] == ' ' ? i + 1 : i;
  int l2;
  uint16_t f = t.at(j, l2);
  if (f != 0xFFFF) {
    if (f & kL) return t.run(j, kL);
    if (f & kN) return t.run(j, kN);
    if (is_other(f)) return t.run_other(j);
  }
  (void)c;
  return whitespace(t, i, false);
}

template <int kMaxDigits>
size_t next_cl100k(const Text& t, size_t i) {
  int len;
  uint16_t c = t.at(i, len);
  if (t.s[i] == '\'') {
    if (size_t k = contraction(t, i, true)) return i + k;
  }
  if (c & kL) return t.run(i, kL);
  if (!(c & (kNl | kN))) {
    int l2;
    uint16_t f = t.at(i + len, l2);
    if (f != 0xFFFF && (f & kL)) return t.run(i + len, kL);
  }
  if (c & kN) {
    size_t j = i + len;
    for (int d = 1; d < kMaxDigits && j < t.n; d++) {
      int l2;
      if (!(char_at(t.s, j, t.n, l2) & kN)) break;
      j += l2;
    }
    return j;
  }
  size_t j = t.s[i] == ' ' ? i + 1 : i;
  int l2;
  if (is_other(t.at(j, l2))) return t.run(t.run_other(j), kNl);
  return whitespace(t, i, true);
}

// [^\r\n\p{L}\p{N}]?[U]*[W]+ and [^\r\n\p{L}\p{N}]?[U]+[W]*, each with an optional contraction
size_t o200k_alt1(const Text& t, size_t p) {
  size_t j = p, last_w_end = 0;
  int len;
  while (j < t.n) {
    uint16_t f = char_at(t.s, j, t.n, len);
    if (!(f & kU)) break;
    j += len;
    if (f & kW) last_w_end = j;
  }
  if (j < t.n && (char_at(t.s, j, t.n, len) & kW)) return t.run(j, kW);
  return last_w_end;  // 0: no match
}

size_t o200k_alt2(const Text& t, size_t p) {
  size_t j = t.run(p, kU);
  if (j == p) return 0;
  return t.run(j, kW);
}

// o200k's letter alternatives when the letters are ASCII and end at an ASCII byte (most English):
// an optional prefix, [A-Z]*[a-z]* (at least one letter), then a contraction. Returns 0 when the
// text needs the general scanner (a non-ASCII byte next to the letters, no letter).
inline size_t o200k_ascii_word(const Text& t, size_t i) {
  const uchar* s = t.s;
  const uint16_t* ascii = g_tables->ascii;
  uchar c = s[i];
  if (c >= 0x80) return 0;
  size_t j = i;
  if (!(ascii[c] & kL)) {
    if (ascii[c] & (kN | kNl)) return 0;
    j = i + 1;  // a prefix character, if letters follow
  }
  size_t k = j;
  while (k < t.n && unsigned(s[k]) - 'A' < 26u) k++;
  while (k < t.n && unsigned(s[k]) - 'a' < 26u) k++;
  if (k == j || (k < t.n && s[k] >= 0x80)) return 0;
  if (k < t.n && s[k] == '\'') k += contraction(t, k, true);
  return k;
}

size_t next_o200k(const Text& t, size_t i) {
  if (size_t e = o200k_ascii_word(t, i)) return e;
  int len;
  uint16_t c = t.at(i, len);
  bool prefix = !(c & (kNl | kL | kN));
  size_t e = 0;
  if (prefix) e = o200k_alt1(t, i + len);
  if (!e) e = o200k_alt1(t, i);
  if (!e && prefix) e = o200k_alt2(t, i + len);
  if (!e) e = o200k_alt2(t, i);
  if (e) {
    if (e < t.n && t.s[e] == '\'') e += contraction(t, e, true);
    return e;
  }
  if (c & kN) {
    size_t j = i + len;
    for (int d = 1; d < 3 && j < t.n; d++) {
      int l2;
      if (!(char_at(t.s, j, t.n, l2) & kN)) break;
      j += l2;
    }
    return j;
  }
  size_t j = t.s[i] == ' ' ? i + 1 : i;
  int l2;
  if (is_other(t.at(j, l2))) {
    size_t k = t.run_other(j);
    while (k < t.n && (t.s[k] == '\r' || t.s[k] == '\n' || t.s[k] == '/')) k++;
    return k;
  }
  return whitespace(t, i, true);
}

using NextFn = size_t (*)(const Text&, size_t);

class ScanPretokenizer final : public Pretokenizer {
 public:
  ScanPretokenizer(std::string name, std::string pattern, NextFn fn)
      : name_(std::move(name)), pattern_(std::move(pattern)), fn_(fn) {}
  void split(std::string_view text, std::vector<std::string_view>& pieces) const override {
    Text t{reinterpret_cast<const uchar*>(text.data()), text.size()};
    size_t i = 0;
    while (i < t.n) {
      size_t e = fn_(t, i);
      if (e <= i) e = i + 1;  // cannot happen; keeps the loop finite whatever the input
      pieces.emplace_back(text.data() + i, e - i);
      i = e;
    }
  }
  const std::string& name() const override { return name_; }
  const std::string& pattern() const override { return pattern_; }

 private:
  std::string name_, pattern_;
  NextFn fn_;
};

// Any other pattern, by PCRE2 (UTF + UCP, JIT). Text between matches (bytes that are not valid
// UTF-8, or text the pattern does not match) becomes pieces of its own, as HF's Split(Isolated).
class RegexPretokenizer final : public Pretokenizer {
 public:
  ~RegexPretokenizer() override {
    if (code_) pcre2_code_free(code_);
  }
  Status init(const std::string& pattern) {
    pattern_ = pattern;
    int err = 0;
    PCRE2_SIZE off = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &off, nullptr);
    if (!code_) {
      PCRE2_UCHAR buf[256];
      pcre2_get_error_message(err, buf, sizeof buf);
      return Status::error("pre-tokenizer regex: " + std::string(reinterpret_cast<char*>(buf)) + " at offset " +
                           std::to_string(off) + " of " + pattern);
    }
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
    return Status::ok();
  }
  void split(std::string_view text, std::vector<std::string_view>& pieces) const override {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_, nullptr);
    auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t pos = 0, emitted = 0;
    while (pos <= text.size()) {
      int rc = pcre2_match(code_, subject, text.size(), pos, 0, md, nullptr);
      if (rc < 0) break;
      PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      size_t s = ov[0], e = ov[1];
      if (s > emitted) pieces.emplace_back(text.data() + emitted, s - emitted);
      if (e > s) pieces.emplace_back(text.data() + s, e - s);
      emitted = std::max(emitted, e);
      if (e == s) {  // empty match: step over one character
        pos = e + 1;
        while (pos < text.size() && (static_cast<uchar>(text[pos]) & 0xC0) == 0x80) pos++;
      } else {
        pos = e;
      }
      if (pos >= text.size()) break;
    }
    if (emitted < text.size()) pieces.emplace_back(text.data() + emitted, text.size() - emitted);
    pcre2_match_data_free(md);
  }
  const std::string& name() const override { return name_; }
  const std::string& pattern() const override { return pattern_; }

 private:
  std::string name_ = "regex", pattern_;
  pcre2_code* code_ = nullptr;
};

}  // namespace

std::unique_ptr<Pretokenizer> Pretokenizer::create(const std::string& name_or_pattern, Status& err) {
  err = Status::ok();
  const std::string& n = name_or_pattern;
  if (n == "gpt2" || n == "r50k" || n == "p50k")
    return std::make_unique<ScanPretokenizer>("gpt2", kGpt2Pattern, next_gpt2);
  if (n == "cl100k" || n == "llama3")
    return std::make_unique<ScanPretokenizer>(n, kCl100kPattern, next_cl100k<3>);
  if (n == "qwen2") return std::make_unique<ScanPretokenizer>("qwen2", kQwen2Pattern, next_cl100k<1>);
  if (n == "o200k") return std::make_unique<ScanPretokenizer>("o200k", kO200kPattern, next_o200k);
  auto r = std::make_unique<RegexPretokenizer>();
  if (Status s = r->init(n); !s) {
    err = s;
    return nullptr;
  }
  return r;
}

std::string Pretokenizer::name_for_pattern(const std::string& pattern) {
  if (pattern == kGpt2Pattern) return "gpt2";
  if (pattern == kCl100kPattern) return "llama3";
  if (pattern == kQwen2Pattern) return "qwen2";
  if (pattern == kO200kPattern) return "o200k";
  return "";
}

}  // namespace smelt
