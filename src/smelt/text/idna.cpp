// Punycode (RFC 3492, "Punycode: A Bootstring encoding of Unicode for IDNA") and the ASCII form
// of a host. The Bootstring parameters and both loops follow the RFC's sections 5 and 6 line by
// line; overflow is checked in 64-bit arithmetic against the RFC's 32-bit maxint.
#include "smelt/text/idna.hpp"

#include <cstdint>
#include <cstdlib>

#include <utf8proc.h>

#include "smelt/common/utf8.hpp"

namespace smelt {

namespace {

constexpr uint32_t kBase = 36, kTmin = 1, kTmax = 26, kSkew = 38, kDamp = 700;
constexpr uint32_t kInitialBias = 72, kInitialN = 128;
constexpr uint64_t kMaxInt = 0xFFFFFFFFu;

uint32_t adapt(uint32_t delta, uint32_t numpoints, bool first) {  // RFC 3492 section 6.1
  delta = first ? delta / kDamp : delta / 2;
  delta += delta / numpoints;
  uint32_t k = 0;
  while (delta > ((kBase - kTmin) * kTmax) / 2) {
    delta /= kBase - kTmin;
    k += kBase;
  }
  return k + (kBase - kTmin + 1) * delta / (delta + kSkew);
}

uint32_t threshold(uint32_t k, uint32_t bias) {
  return k <= bias ? kTmin : k >= bias + kTmax ? kTmax : k - bias;
}

char encode_digit(uint32_t d) { return static_cast<char>(d < 26 ? 'a' + d : '0' + (d - 26)); }

uint32_t decode_digit(char c) {  // kBase for "not a digit"
  if (c >= '0' && c <= '9') return static_cast<uint32_t>(c - '0') + 26;
  if (c >= 'a' && c <= 'z') return static_cast<uint32_t>(c - 'a');
  if (c >= 'A' && c <= 'Z') return static_cast<uint32_t>(c - 'A');
  return kBase;
}

// Appends the generalized variable-length integer q with the current bias (section 6.3).
void encode_integer(uint32_t q, uint32_t bias, std::string& out) {
  for (uint32_t k = kBase;; k += kBase) {
    uint32_t t = threshold(k, bias);
    if (q < t) break;
    out.push_back(encode_digit(t + (q - t) % (kBase - t)));
    q = (q - t) / (kBase - t);
  }
  out.push_back(encode_digit(q));
}

// UTS 46 mapping, approximated: lower case before and after NFKC (NFKC may yield capitals).
utf8proc_int32_t lower(utf8proc_int32_t c, void*) { return utf8proc_tolower(c); }

bool is_label_dot(char32_t c) { return c == '.' || c == 0x3002 || c == 0xFF0E || c == 0xFF61; }

void append_label(const std::u32string& label, std::string& out) {
  bool ascii = true;
  for (char32_t c : label) ascii = ascii && c < 0x80;
  if (ascii) {
    for (char32_t c : label) out.push_back(static_cast<char>(c));
  } else {
    out += "xn--";
    punycode_encode(label, out);  // mapped text holds valid code points only
  }
}

}  // namespace

bool punycode_encode(std::u32string_view in, std::string& out) {
  for (char32_t c : in)
    if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return false;
  uint32_t b = 0;
  for (char32_t c : in)
    if (c < 0x80) { out.push_back(static_cast<char>(c)); ++b; }
  if (b > 0) out.push_back('-');
  uint64_t n = kInitialN, delta = 0;
  uint32_t bias = kInitialBias, h = b;
  while (h < in.size()) {
    uint64_t m = kMaxInt;
    for (char32_t c : in)
      if (c >= n && c < m) m = c;
    delta += (m - n) * (h + 1);
    if (delta > kMaxInt) return false;
    n = m;
    for (char32_t c : in) {
      if (c < n && ++delta > kMaxInt) return false;
      if (c != n) continue;
      encode_integer(static_cast<uint32_t>(delta), bias, out);
      bias = adapt(static_cast<uint32_t>(delta), h + 1, h == b);
      delta = 0;
      ++h;
    }
    ++delta;
    ++n;
  }
  return true;
}

bool punycode_decode(std::string_view in, std::u32string& out) {
  out.clear();
  size_t b = in.rfind('-');
  if (b == std::string_view::npos) b = 0;
  for (size_t j = 0; j < b; ++j) {
    if (static_cast<unsigned char>(in[j]) >= 0x80) return false;
    out.push_back(static_cast<char32_t>(in[j]));
  }
  uint64_t n = kInitialN, i = 0;
  uint32_t bias = kInitialBias;
  for (size_t pos = b > 0 ? b + 1 : 0; pos < in.size();) {
    uint64_t old_i = i, w = 1;
    for (uint32_t k = kBase;; k += kBase) {
      if (pos >= in.size()) return false;
      uint32_t digit = decode_digit(in[pos++]);
      if (digit >= kBase) return false;
      i += digit * w;
      if (i > kMaxInt) return false;
      uint32_t t = threshold(k, bias);
      if (digit < t) break;
      w *= kBase - t;
      if (w > kMaxInt) return false;
    }
    uint64_t len = out.size() + 1;
    bias = adapt(static_cast<uint32_t>(i - old_i), static_cast<uint32_t>(len), old_i == 0);
    n += i / len;
    if (n > 0x10FFFF || (n >= 0xD800 && n <= 0xDFFF)) return false;
    i %= len;
    out.insert(out.begin() + static_cast<std::ptrdiff_t>(i), static_cast<char32_t>(n));
    ++i;
  }
  return true;
}

bool idna_to_ascii(std::string_view host, std::string& out) {
  bool ascii = true;
  for (char c : host) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) {  // the common case: no mapping beyond lower case
    for (char c : host) out.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c);
    return true;
  }
  utf8proc_uint8_t* mapped = nullptr;
  auto options = static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT |
                                                UTF8PROC_IGNORE);
  utf8proc_ssize_t len = utf8proc_map_custom(reinterpret_cast<const utf8proc_uint8_t*>(host.data()),
                                             static_cast<utf8proc_ssize_t>(host.size()), &mapped,
                                             options, lower, nullptr);
  if (len < 0) return false;
  std::string_view m(reinterpret_cast<const char*>(mapped), static_cast<size_t>(len));
  std::u32string label;
  for (size_t i = 0; i < m.size();) {
    char32_t c = static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(utf8_next(m, i))));
    if (!is_label_dot(c)) { label.push_back(c); continue; }
    append_label(label, out);
    out.push_back('.');
    label.clear();
  }
  append_label(label, out);
  std::free(mapped);
  return true;
}

}  // namespace smelt
