// Unicode character classes for the pre-tokenizers (\p{L}, \p{N}, \p{Lu}..., \p{M}, \s), built once
// from utf8proc into a two-level table, and a strict UTF-8 decoder that never fails. Internal to
// tokenizer/; not a general Unicode library (common/utf8 is).
#pragma once
#include <cstddef>
#include <cstdint>

namespace smelt::uni {

enum : uint16_t {
  kL = 1, kN = 2, kSpace = 4,  // \p{L}, \p{N}, \s (Unicode White_Space, as Rust's regex)
  kLu = 8, kLl = 16, kLt = 32, kLm = 64, kLo = 128, kM = 256,
  kCR = 512, kLF = 1024,
};

struct Tables {
  uint16_t ascii[128];
  const uint16_t* stage1;  // [cp >> 8] -> offset of a 256-entry block in stage2
  const uint16_t* stage2;
};
const Tables& tables();
extern const Tables* g_tables;  // = &tables(), set during static initialisation

inline uint16_t flags_of(char32_t cp) {
  const Tables& t = *g_tables;
  if (cp < 128) return t.ascii[cp];
  if (cp >= 0x110000) return 0;
  return t.stage2[(static_cast<uint32_t>(t.stage1[cp >> 8]) << 8) | (cp & 0xFF)];
}

// Decodes the character at s[i] (i < n): returns its flags and sets len. A byte that does not
// start a valid, shortest-form UTF-8 sequence is one character of length 1 with no class (0):
// like punctuation for every pattern.
__attribute__((always_inline)) inline uint16_t char_at(const unsigned char* s, size_t i, size_t n, int& len) {
  unsigned c = s[i];
  if (c < 0x80) { len = 1; return g_tables->ascii[c]; }
  char32_t cp;
  if (c >= 0xC2 && c <= 0xDF) {
    if (i + 1 < n && (s[i + 1] & 0xC0) == 0x80) { len = 2; cp = ((c & 0x1F) << 6) | (s[i + 1] & 0x3F); return flags_of(cp); }
  } else if (c >= 0xE0 && c <= 0xEF) {
    if (i + 2 < n && (s[i + 1] & 0xC0) == 0x80 && (s[i + 2] & 0xC0) == 0x80) {
      cp = ((c & 0x0F) << 12) | ((s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
      if (cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF)) { len = 3; return flags_of(cp); }
    }
  } else if (c >= 0xF0 && c <= 0xF4) {
    if (i + 3 < n && (s[i + 1] & 0xC0) == 0x80 && (s[i + 2] & 0xC0) == 0x80 && (s[i + 3] & 0xC0) == 0x80) {
      cp = ((c & 0x07) << 18) | ((s[i + 1] & 0x3F) << 12) | ((s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
      if (cp >= 0x10000 && cp < 0x110000) { len = 4; return flags_of(cp); }
    }
  }
  len = 1;
  return 0;
}

}  // namespace smelt::uni
