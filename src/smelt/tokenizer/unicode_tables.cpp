// The class table behind uni::flags_of: utf8proc's general categories folded into the bits the
// pre-tokenizer patterns test, deduplicated 256-codepoint blocks, built once on first use.
#include "smelt/tokenizer/unicode_tables.hpp"

#include <algorithm>
#include <unordered_map>
#include <vector>

#include <utf8proc.h>

namespace smelt::uni {

namespace {

bool is_white_space(char32_t c) {  // the Unicode White_Space property
  return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

uint16_t compute(char32_t c) {
  uint16_t f = 0;
  if (is_white_space(c)) f |= kSpace;
  if (c == '\r') f |= kCR;
  if (c == '\n') f |= kLF;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU: f |= kL | kLu; break;
    case UTF8PROC_CATEGORY_LL: f |= kL | kLl; break;
    case UTF8PROC_CATEGORY_LT: f |= kL | kLt; break;
    case UTF8PROC_CATEGORY_LM: f |= kL | kLm; break;
    case UTF8PROC_CATEGORY_LO: f |= kL | kLo; break;
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: f |= kM; break;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO: f |= kN; break;
    default: break;
  }
  return f;
}

struct Built {
  Tables t;
  std::vector<uint16_t> s1, s2;
};

// Planes 4-13 are unassigned and planes 15-16 private use (categories Cn, Co): no class bit, so
// they are not asked of utf8proc (a test checks every code point against it).
bool plane_without_classes(uint32_t cp) { return (cp >= 0x40000 && cp < 0xE0000) || cp >= 0xF0000; }

Built* build() {
  auto* b = new Built();
  for (char32_t c = 0; c < 128; c++) b->t.ascii[c] = compute(c);
  b->s1.resize(0x110000 >> 8);
  std::unordered_multimap<uint64_t, uint16_t> seen;  // hash of a block -> its offset in s2 (>> 8)
  std::vector<uint16_t> block(256);
  for (uint32_t hi = 0; hi < b->s1.size(); hi++) {
    uint64_t h = 0;
    for (uint32_t lo = 0; lo < 256; lo++) {
      uint32_t cp = (hi << 8) | lo;
      block[lo] = plane_without_classes(cp) ? 0 : compute(cp);
      h = (h ^ block[lo]) * 0x100000001b3ULL;
    }
    uint16_t at = UINT16_MAX;
    auto [lo_it, hi_it] = seen.equal_range(h);
    for (auto it = lo_it; it != hi_it; ++it)
      if (std::equal(block.begin(), block.end(), b->s2.begin() + (size_t(it->second) << 8))) at = it->second;
    if (at == UINT16_MAX) {
      at = static_cast<uint16_t>(b->s2.size() >> 8);
      b->s2.insert(b->s2.end(), block.begin(), block.end());
      seen.emplace(h, at);
    }
    b->s1[hi] = at;
  }
  b->t.stage1 = b->s1.data();
  b->t.stage2 = b->s2.data();
  return b;
}

}  // namespace

const Tables& tables() {
  static Built* b = build();
  return b->t;
}

const Tables* g_tables = &tables();

}  // namespace smelt::uni
