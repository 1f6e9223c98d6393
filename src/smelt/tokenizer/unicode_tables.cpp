// The class table behind uni::flags_of: utf8proc's general categories folded into the bits the
// pre-tokenizer patterns test, deduplicated 256-codepoint blocks, built once on first use.
#include "smelt/tokenizer/unicode_tables.hpp"

#include <map>
#include <mutex>
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

Built* build() {
  auto* b = new Built();
  for (char32_t c = 0; c < 128; c++) b->t.ascii[c] = compute(c);
  b->s1.resize(0x110000 >> 8);
  std::map<std::vector<uint16_t>, uint16_t> seen;
  std::vector<uint16_t> block(256);
  for (uint32_t hi = 0; hi < b->s1.size(); hi++) {
    for (uint32_t lo = 0; lo < 256; lo++) block[lo] = compute((hi << 8) | lo);
    auto [it, fresh] = seen.emplace(block, static_cast<uint16_t>(b->s2.size() >> 8));
    if (fresh) b->s2.insert(b->s2.end(), block.begin(), block.end());
    b->s1[hi] = it->second;
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
