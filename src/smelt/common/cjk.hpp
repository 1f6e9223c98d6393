// The one table of CJK code point ranges: Han ideographs, kana, and the block range extraction
// weights as wide text. Fast range tests, no Unicode database; not a script classifier (that is
// refine/language).
#pragma once

namespace smelt {

// Han ideographs: CJK Unified Ideographs (U+4E00..9FFF), extension A (U+3400..4DBF), extensions
// B..H (U+20000..323AF, taken whole with the few unassigned points between the extensions), and
// the compatibility ideographs (U+F900..FAFF, U+2F800..2FA1F).
inline bool is_han(char32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x323AF) || (cp >= 0xF900 && cp <= 0xFAFF) ||
         (cp >= 0x2F800 && cp <= 0x2FA1F);
}

// Kana: hiragana and katakana (U+3040..30FF), katakana phonetic extensions (U+31F0..31FF) and
// half-width katakana (U+FF66..FF9F).
inline bool is_kana(char32_t cp) {
  return (cp >= 0x3040 && cp <= 0x30FF) || (cp >= 0x31F0 && cp <= 0x31FF) ||
         (cp >= 0xFF66 && cp <= 0xFF9F);
}

// Ideograph-like symbols written among Han: the Kangxi radicals (U+2F00..2FD5) and the
// ideographic zero U+3007.
inline bool is_han_symbol(char32_t cp) { return (cp >= 0x2F00 && cp <= 0x2FD5) || cp == 0x3007; }

// What extraction counts as wide CJK text when it weighs a block's length: U+3000..9FFF (CJK
// punctuation, kana, extension A, unified ideographs: the 3-byte UTF-8 sequences led by
// 0xE3..0xE9) and U+FF00..FF3F (full-width forms led by 0xEF 0xBC).
inline bool is_cjk_wide(char32_t cp) {
  return (cp >= 0x3000 && cp <= 0x9FFF) || (cp >= 0xFF00 && cp <= 0xFF3F);
}

}  // namespace smelt
