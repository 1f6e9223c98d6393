// UTF-8 decoding and repair, scalar; the fast path for ASCII runs skips eight bytes at a time.
#include "smelt/common/utf8.hpp"

#include <cstring>

namespace smelt {

char32_t utf8_next(std::string_view s, size_t& i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  unsigned char c = p[i];
  if (c < 0x80) { ++i; return c; }
  int len; char32_t cp; char32_t min;
  if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; min = 0x80; }
  else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; min = 0x800; }
  else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; min = 0x10000; }
  else { ++i; return kReplacementChar; }
  if (i + len > n) { ++i; return kReplacementChar; }
  for (int k = 1; k < len; ++k) {
    unsigned char d = p[i + k];
    if ((d & 0xC0) != 0x80) { ++i; return kReplacementChar; }
    cp = (cp << 6) | (d & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) { ++i; return kReplacementChar; }
  i += len;
  return cp;
}

size_t utf8_first_invalid(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    if (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      if ((w & 0x8080808080808080ULL) == 0) { i += 8; continue; }
    }
    if (static_cast<unsigned char>(s[i]) < 0x80) { ++i; continue; }
    size_t j = i;
    char32_t cp = utf8_next(s, j);
    // U+FFFD itself is valid when encoded (EF BF BD: three bytes); a replacement from one byte is not
    if (cp == kReplacementChar && j == i + 1) return i;
    i = j;
  }
  return n;
}

bool utf8_valid(std::string_view s) { return utf8_first_invalid(s) == s.size(); }

void utf8_append(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {

// The length of the maximal ill-formed subpart at s[i] (Unicode 15, section 3.9, U+FFFD
// substitution): a lead byte and the continuation bytes after it that could still begin a
// well-formed sequence; 1 for a byte that cannot lead one.
size_t ill_formed_length(std::string_view s, size_t i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const unsigned char c = p[i];
  int need;                          // continuation bytes after the lead
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the first one
  if (c >= 0xC2 && c <= 0xDF) need = 1;
  else if (c >= 0xE0 && c <= 0xEF) need = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
  else if (c >= 0xF0 && c <= 0xF4) need = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
  else return 1;
  size_t len = 1;
  for (int k = 0; k < need && i + len < s.size(); k++, lo = 0x80, hi = 0xBF) {
    const unsigned char d = p[i + len];
    if (d < lo || d > hi) break;
    len++;
  }
  return len;
}

}  // namespace

size_t utf8_repair_append(std::string_view s, std::string& out) {
  size_t replaced = 0;
  size_t i = 0;
  while (i < s.size()) {
    size_t bad = utf8_first_invalid(s.substr(i));
    out.append(s.data() + i, bad);
    i += bad;
    if (i >= s.size()) break;
    utf8_append(kReplacementChar, out);
    ++replaced;
    i += ill_formed_length(s, i);
  }
  return replaced;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace smelt
