// Personal-data masking: four hand-written finders (e-mail, IPv4, IPv6, phone) over the bytes of a
// document, their matches merged, then one rebuild of the text. Not a regex engine, not a PII
// classifier (names, street addresses and secrets pass), not the prep wiring.
//
// The rules (docs/quality.md, "Personal data"; each is a test in tests/refine/pii_test.cpp). All
// matches are ASCII; a non-ASCII byte is a boundary like a space, so Chinese text may touch an
// address on either side. "Word byte" below means an ASCII letter, digit or '_'.
//  e-mail  local@domain, found from each '@'. Local part: the run of RFC 5322 atext characters
//          but '/' (letters, digits, !#$%&'*+=?^_`{|}~-) and dots left of '@', stopped by any
//          other byte or by "..", at most 64 bytes (a longer run is not an address), then trimmed
//          on the left to its first letter or digit ("<a@b.org>", "=a@b.org", "...a@b.org" mask
//          "a@b.org"); it must not end with '.'. '/' is left out because on the web it is a path:
//          "http://host/contact/a@b.org" masks "a@b.org" only. Domain: >= 2 labels of
//          [A-Za-z0-9-] (1-63 bytes, no '-' at either end) joined by single dots, at most 253
//          bytes, the last label (TLD) >= 2 letters or an "xn--" label. The domain ends at the
//          first byte that cannot continue it, so "a@b.org." and "a@b.org," mask "a@b.org" and
//          "x.user@example.comfoo" masks all of it (it is one well-formed address). Not masked:
//          "user@localhost", "pkg@1.2.3", quoted or non-ASCII local parts ("josé@x.org"), IDN
//          domains not in punycode, and obfuscations ("name at host dot com", "name [at]
//          host.com"), as in datatrove.
//  IPv4    a.b.c.d, each a decimal 0-255 without leading zeros ("0" itself is fine). The byte
//          before must not be a word byte or '.', the byte after not a word byte nor '.' followed
//          by a word byte: "1.2.3.4.5", "v1.2.3.4", "10.0.0.256", "01.2.3.4" are not masked;
//          "1.2.3.4." (sentence end), "1.2.3.4:80", "1.2.3.4/24" mask the address.
//  IPv6    RFC 4291 text forms: 8 groups of 1-4 hex digits, or one "::" standing for >= 1 zero
//          groups, optionally ending in a dotted IPv4 (worth 2 groups: "::ffff:1.2.3.4"). Found
//          from each ':'. To leave times, MAC addresses and code alone it also needs >= 3 groups
//          and one group of 3-4 hex digits (or an IPv4 tail): "12:30:45", "00:1a:2b:3c:4d:5e",
//          "ab::cd", "fe80::1" and "::1" are not masked. Boundaries: no word byte, ':' or '.'
//          just before; no word byte, "::" or '.'+word byte just after ("fe80::1%eth0" and
//          "[2001:db8::1]:443" mask the address).
//  public  With public_ips_only (the default, datatrove's only_remove_public_ips), an IPv4 in
//          0/8, 10/8, 100.64/10, 127/8, 169.254/16, 172.16/12, 192.0.0/24, 192.0.2/24,
//          192.88.99/24, 192.168/16, 198.18/15, 198.51.100/24, 203.0.113/24 or 224/3 (multicast,
//          reserved, broadcast) is left; an IPv6 is public only inside 2000::/3 (global unicast,
//          the only block IANA allocates) outside 2001:db8::/32 and 3fff::/20 (documentation),
//          and an IPv4-mapped ::ffff:a.b.c.d is judged by its IPv4.
//  phone   (off by default) North American: an optional "+1" (then '-', '.', ' ' or nothing),
//          "1-" or "1 " before '(', an area code NXX (N = 2-9) bare or in parentheses (then ' ' or
//          nothing), 3 digits, one of '-', '.', ' ', 4 digits; a bare area code is followed by
//          the same separator as the exchange: "555-123-4567", "555.123.4567", "(555) 123-4567",
//          "+1 (555) 123-4567", "1-800-555-0199". International: '+', a country code of 1-3
//          digits, then groups of 1-8 digits, each after one '-', '.' or ' ', and at most one
//          group of 1-4 digits in parentheses ("+44 (0)20 7946 0958"), 8-15 digits in all
//          (E.164; groups stop before one that would pass 15 or that a letter follows); or '+'
//          and 8-15 digits in one run ("+14155552671"). The byte before must not be a word byte
//          nor '-'/'.' after a digit; the byte after not a word byte nor '-'/'.' before a digit.
//          Not masked: bare digit runs ("5551234567"), dates ("2024-01-15"), area codes 0xx/1xx
//          ("123-456-7890"), national forms without '+' outside North America ("020 7946 0958").
// A match equal to its placeholder is left as it is and not counted, each placeholder must not
// be masked again (pii_config_validate), and a pass that replaced something is followed by
// another (a replacement changes its neighbours' context), so masking twice equals masking once.
// Random glued strings of addresses need up to 3 passes; kPiiMaxPasses is 4.
// Speed: the e-mail, IPv4 and IPv6 finders start from '@', '.' and ':', found with memchr
// (string_view::find); the phone finder tests every byte. Measured in docs/quality.md.
#include "smelt/refine/pii.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "smelt/common/config_schema.hpp"
#include "smelt/common/utf8.hpp"

namespace smelt {

namespace {

// Byte classes; kPhone: a byte a phone number may start with.
enum : uint8_t {
  kDigit = 1, kHex = 2, kAlpha = 4, kWord = 8, kAtext = 16, kLabel = 32, kPhone = 64
};

struct ByteTable {
  uint8_t c[256];
  constexpr ByteTable() : c() {
    for (int i = 0; i < 256; ++i) {
      bool digit = i >= '0' && i <= '9';
      bool alpha = (i >= 'a' && i <= 'z') || (i >= 'A' && i <= 'Z');
      bool hex = digit || (i >= 'a' && i <= 'f') || (i >= 'A' && i <= 'F');
      bool atext = digit || alpha;  // RFC 5322 atext but '/' (see the top)
      for (const char* p = "!#$%&'*+=?^_`{|}~-"; *p; ++p) atext = atext || i == *p;
      c[i] = static_cast<uint8_t>((digit ? kDigit : 0) | (hex ? kHex : 0) | (alpha ? kAlpha : 0) |
                                  (digit || alpha || i == '_' ? kWord : 0) | (atext ? kAtext : 0) |
                                  (digit || alpha || i == '-' ? kLabel : 0) |
                                  (digit || i == '+' || i == '(' ? kPhone : 0));
    }
  }
};
constexpr ByteTable kBytes;

inline bool is(std::string_view t, size_t i, uint8_t cls) {
  return i < t.size() && (kBytes.c[static_cast<unsigned char>(t[i])] & cls);
}
inline bool at_char(std::string_view t, size_t i, char ch) { return i < t.size() && t[i] == ch; }
inline int hex_value(char ch) {
  return ch <= '9' ? ch - '0' : (ch | 0x20) - 'a' + 10;
}

// ---- e-mail ----

constexpr size_t kMaxLocal = 64, kMaxDomain = 253, kMaxLabel = 63;

// Start of the local part ending at t[at] == '@' (lo: first byte it may use); npos when none.
size_t email_local_begin(std::string_view t, size_t at, size_t lo) {
  size_t b = at;
  while (b > lo && (is(t, b - 1, kAtext) || t[b - 1] == '.')) {
    if (t[b - 1] == '.' && t[b] == '.') break;  // ".." ends the local part
    if (at - b >= kMaxLocal) return std::string_view::npos;
    --b;
  }
  while (b < at && !is(t, b, kDigit | kAlpha)) ++b;  // starts at a letter or digit
  if (b == at || t[at - 1] == '.') return std::string_view::npos;
  return b;
}

// End of the domain starting at t[from]; 0 when it is not a valid domain.
size_t email_domain_end(std::string_view t, size_t from) {
  size_t e = from, labels = 0, last = from;
  while (true) {
    size_t s = e;
    while (is(t, e, kLabel)) ++e;
    if (e - s > kMaxLabel || e - from > kMaxDomain || t[s] == '-' || t[e - 1] == '-') return 0;
    ++labels;
    last = s;
    if (at_char(t, e, '.') && is(t, e + 1, kLabel)) {
      ++e;
      continue;
    }
    break;
  }
  std::string_view tld = t.substr(last, e - last);
  bool letters = tld.size() >= 2 && std::all_of(tld.begin(), tld.end(), [](char ch) {
    return kBytes.c[static_cast<unsigned char>(ch)] & kAlpha;
  });
  bool puny = tld.size() >= 5 && (tld[0] | 0x20) == 'x' && (tld[1] | 0x20) == 'n' &&
              tld[2] == '-' && tld[3] == '-';
  return labels >= 2 && (letters || puny) ? e : 0;
}

void find_emails(std::string_view t, std::vector<PiiMatch>& out) {
  size_t lo = 0;
  for (size_t at = t.find('@'); at != std::string_view::npos; at = t.find('@', at + 1)) {
    size_t b = email_local_begin(t, at, lo);
    if (b == std::string_view::npos || !is(t, at + 1, kLabel)) continue;
    size_t e = email_domain_end(t, at + 1);
    if (e == 0) continue;
    out.push_back({b, e, PiiKind::kEmail});
    lo = e;
    at = e - 1;
  }
}

// ---- IPv4 ----

// One octet at t[i]: 1-3 digits, <= 255, no leading zero; i moves past its digits.
bool ipv4_octet(std::string_view t, size_t& i, uint32_t& v) {
  size_t s = i;
  v = 0;
  while (is(t, i, kDigit) && i - s < 4) v = v * 10 + static_cast<uint32_t>(t[i++] - '0');
  size_t len = i - s;
  return len >= 1 && len <= 3 && v <= 255 && !(len > 1 && t[s] == '0');
}

// a.b.c.d at t[i] (no boundary checks); end after d.
bool ipv4_parse(std::string_view t, size_t i, size_t& end, uint32_t& addr) {
  addr = 0;
  for (int k = 0; k < 4; ++k) {
    if (k > 0 && !at_char(t, i++, '.')) return false;
    uint32_t v;
    if (!ipv4_octet(t, i, v)) return false;
    addr = addr << 8 | v;
  }
  end = i;
  return true;
}

// Nothing after an address may continue it: no word byte, no '.' before a word byte.
bool ip_right_ok(std::string_view t, size_t e) {
  return !is(t, e, kWord) && !(at_char(t, e, '.') && is(t, e + 1, kWord));
}

bool ipv4_public(uint32_t a) {
  struct Net { uint32_t net; int bits; };
  static constexpr Net kNotPublic[] = {
      {0x00000000, 8},  {0x0A000000, 8},  {0x64400000, 10}, {0x7F000000, 8},
      {0xA9FE0000, 16}, {0xAC100000, 12}, {0xC0000000, 24}, {0xC0000200, 24},
      {0xC0586300, 24}, {0xC0A80000, 16}, {0xC6120000, 15}, {0xC6336400, 24},
      {0xCB007100, 24}, {0xE0000000, 3}};
  for (const Net& n : kNotPublic)
    if ((a >> (32 - n.bits)) == (n.net >> (32 - n.bits))) return false;
  return true;
}

// Found from each '.' between two digits (memchr is far faster than testing every byte for a
// digit): the candidate starts at the first of the 1-3 digits before it.
void find_ipv4(std::string_view t, bool public_only, std::vector<PiiMatch>& out) {
  for (size_t p = t.find('.', 1); p != std::string_view::npos; p = t.find('.', p + 1)) {
    if (!is(t, p - 1, kDigit) || !is(t, p + 1, kDigit)) continue;
    size_t b = p - 1;
    while (b > 0 && p - b < 4 && is(t, b - 1, kDigit)) --b;
    if (b > 0 && (is(t, b - 1, kWord) || t[b - 1] == '.')) continue;  // also a 4th digit
    size_t end;
    uint32_t addr;
    if (!ipv4_parse(t, b, end, addr) || !ip_right_ok(t, end)) continue;
    if (public_only && !ipv4_public(addr)) continue;
    out.push_back({b, end, PiiKind::kIpv4});
    p = end - 1;
  }
}

// ---- IPv6 ----

struct Ipv6 {
  uint16_t g[8] = {};
  int groups = 0;        // explicit groups (an IPv4 tail counts 2)
  bool long_group = false;  // a group of 3-4 hex digits, or an IPv4 tail
};

// The address at t[b] (a hex digit or "::"), RFC 4291 text forms; end after it.
bool ipv6_parse(std::string_view t, size_t b, size_t& end, Ipv6& a) {
  uint16_t head[8], tail[8];
  int nh = 0, nt = 0;
  bool dc = false;
  size_t i = b;
  if (at_char(t, i, ':')) {
    if (!at_char(t, i + 1, ':')) return false;
    dc = true;
    i += 2;
  }
  while (is(t, i, kHex)) {
    uint16_t* dst = dc ? tail : head;
    int& nd = dc ? nt : nh;
    size_t s = i;
    uint32_t v = 0;
    while (is(t, i, kHex) && i - s < 5) v = v * 16 + static_cast<uint32_t>(hex_value(t[i++]));
    if (i - s > 4) return false;
    if (at_char(t, i, '.') && is(t, i + 1, kDigit)) {  // an IPv4 tail ends the address
      uint32_t v4;
      if (nh + nt + 2 > 8 || !ipv4_parse(t, s, i, v4)) return false;
      dst[nd++] = static_cast<uint16_t>(v4 >> 16);
      dst[nd++] = static_cast<uint16_t>(v4 & 0xffff);
      a.long_group = true;
      break;
    }
    if (nh + nt == 8) return false;  // a ninth group
    dst[nd++] = static_cast<uint16_t>(v);
    a.long_group |= i - s >= 3;
    if (at_char(t, i, ':') && at_char(t, i + 1, ':')) {
      if (dc) return false;  // a second "::"
      dc = true;
      i += 2;
    } else if (at_char(t, i, ':') && is(t, i + 1, kHex)) {
      ++i;
    } else {
      break;
    }
  }
  a.groups = nh + nt;
  if (dc ? a.groups > 7 : a.groups != 8) return false;
  std::copy(head, head + nh, a.g);
  std::copy(tail, tail + nt, a.g + 8 - nt);
  end = i;
  return true;
}

bool ipv6_public(const Ipv6& a) {
  const uint16_t* g = a.g;
  if (g[0] == 0 && g[1] == 0 && g[2] == 0 && g[3] == 0 && g[4] == 0 && g[5] == 0xffff)
    return ipv4_public(static_cast<uint32_t>(g[6]) << 16 | g[7]);
  if ((g[0] & 0xE000) != 0x2000) return false;        // outside 2000::/3
  if (g[0] == 0x2001 && g[1] == 0x0db8) return false;  // 2001:db8::/32 documentation
  if (g[0] == 0x3fff && g[1] < 0x1000) return false;   // 3fff::/20 documentation (RFC 9637)
  return true;
}

void find_ipv6(std::string_view t, bool public_only, std::vector<PiiMatch>& out) {
  size_t lo = 0;
  for (size_t p = t.find(':'); p != std::string_view::npos; p = t.find(':', p + 1)) {
    size_t b = p;
    while (b > lo && p - b < 4 && is(t, b - 1, kHex)) --b;
    if (b > 0 && (is(t, b - 1, kWord) || t[b - 1] == ':' || t[b - 1] == '.')) continue;
    size_t end;
    Ipv6 a;
    if (!ipv6_parse(t, b, end, a) || a.groups < 3 || !a.long_group) continue;
    if (!ip_right_ok(t, end) || (at_char(t, end, ':') && at_char(t, end + 1, ':'))) continue;
    if (public_only && !ipv6_public(a)) continue;
    out.push_back({b, end, PiiKind::kIpv6});
    lo = end;
    p = end - 1;
  }
}

// ---- phone ----

inline bool is_phone_sep(std::string_view t, size_t i) {
  return at_char(t, i, '-') || at_char(t, i, '.') || at_char(t, i, ' ');
}
// n digits exactly (the next byte is not a digit).
inline bool digits(std::string_view t, size_t i, size_t n) {
  for (size_t k = 0; k < n; ++k)
    if (!is(t, i + k, kDigit)) return false;
  return !is(t, i + n, kDigit);
}

// North American number at t[b]; end after it.
bool nanp_at(std::string_view t, size_t b, size_t& end) {
  size_t i = b;
  if (at_char(t, i, '+')) {
    if (!at_char(t, i + 1, '1')) return false;
    i += 2;
    if (is_phone_sep(t, i)) ++i;
  } else if (at_char(t, i, '1') &&
             (at_char(t, i + 1, '-') || (at_char(t, i + 1, ' ') && at_char(t, i + 2, '(')))) {
    i += 2;
  }
  const bool paren = at_char(t, i, '(');
  if (paren) ++i;
  if (!digits(t, i, 3) || t[i] < '2') return false;
  i += 3;
  char sep = 0;
  if (paren) {
    if (!at_char(t, i++, ')')) return false;
    if (at_char(t, i, ' ')) ++i;
  } else {
    if (!is_phone_sep(t, i)) return false;
    sep = t[i++];
  }
  if (!digits(t, i, 3)) return false;
  i += 3;
  if (!is_phone_sep(t, i) || (sep && t[i] != sep)) return false;
  ++i;
  if (!digits(t, i, 4)) return false;
  end = i + 4;
  return true;
}

// '+', country code, groups (see the top of the file); end after the last digit group.
bool intl_at(std::string_view t, size_t b, size_t& end) {
  size_t i = b + 1, run = i;
  while (is(t, run, kDigit)) ++run;
  size_t total = run - i;
  if (total == 0) return false;
  if (total > 3) {  // one run: "+14155552671"
    end = run;
    return total >= 8 && total <= 15;
  }
  i = end = run;
  bool paren = false, after_paren = false;
  while (true) {
    size_t at = i;
    if (is_phone_sep(t, at)) ++at;
    if (at_char(t, at, '(') && !paren) {
      size_t r = at + 1;
      while (is(t, r, kDigit)) ++r;
      size_t nd = r - at - 1;
      if (nd == 0 || nd > 4 || !at_char(t, r, ')')) break;
      total += nd;
      i = r + 1;
      paren = after_paren = true;
      continue;
    }
    if (!is(t, at, kDigit) || (at == i && !after_paren)) break;
    size_t r = at;
    while (is(t, r, kDigit)) ++r;
    if (r - at > 8 || total + (r - at) > 15 || is(t, r, kAlpha)) break;  // "0958A1" is no group
    total += r - at;
    i = end = r;
    after_paren = false;
  }
  return total >= 8 && end > run;
}

void find_phones(std::string_view t, std::vector<PiiMatch>& out) {
  const size_t n = t.size();
  auto left_ok = [&](size_t i) {
    if (i == 0) return true;
    if (is(t, i - 1, kWord)) return false;
    return !((t[i - 1] == '-' || t[i - 1] == '.') && i >= 2 && is(t, i - 2, kDigit));
  };
  size_t i = 0;
  while (i < n) {
    while (i < n && !(kBytes.c[static_cast<unsigned char>(t[i])] & kPhone)) ++i;
    if (i >= n) break;
    size_t end = 0;
    bool ok = left_ok(i) && (nanp_at(t, i, end) || (t[i] == '+' && intl_at(t, i, end)));
    if (ok && !is(t, end, kWord) &&
        !((at_char(t, end, '-') || at_char(t, end, '.')) && is(t, end + 1, kDigit))) {
      out.push_back({i, end, PiiKind::kPhone});
      i = end;
      continue;
    }
    ++i;
    while (is(t, i, kDigit)) ++i;
  }
}

const std::string& placeholder(const PiiConfig& c, PiiKind k) {
  switch (k) {
    case PiiKind::kEmail: return c.email_placeholder;
    case PiiKind::kIpv4: return c.ipv4_placeholder;
    case PiiKind::kIpv6: return c.ipv6_placeholder;
    case PiiKind::kPhone: break;
  }
  return c.phone_placeholder;
}

uint64_t& count_of(PiiCounts& n, PiiKind k) {
  switch (k) {
    case PiiKind::kEmail: return n.emails;
    case PiiKind::kIpv4: return n.ipv4;
    case PiiKind::kIpv6: return n.ipv6;
    case PiiKind::kPhone: break;
  }
  return n.phones;
}

}  // namespace

PiiCounts& PiiCounts::operator+=(const PiiCounts& o) {
  emails += o.emails;
  ipv4 += o.ipv4;
  ipv6 += o.ipv6;
  phones += o.phones;
  return *this;
}

const char* pii_kind_name(PiiKind k) {
  switch (k) {
    case PiiKind::kEmail: return "email";
    case PiiKind::kIpv4: return "ipv4";
    case PiiKind::kIpv6: return "ipv6";
    case PiiKind::kPhone: break;
  }
  return "phone";
}

void pii_find(const PiiConfig& c, std::string_view text, std::vector<PiiMatch>& out) {
  out.clear();
  if (!c.enabled) return;
  if (c.emails) find_emails(text, out);
  if (c.ips) find_ipv6(text, c.public_ips_only, out);
  if (c.ips) find_ipv4(text, c.public_ips_only, out);
  if (c.phones) find_phones(text, out);
  if (out.size() < 2) return;
  std::sort(out.begin(), out.end(), [](const PiiMatch& a, const PiiMatch& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end > b.end;
  });
  size_t kept = 0;
  for (const PiiMatch& m : out)  // the first to start wins; the rest of an overlap is dropped
    if (kept == 0 || m.begin >= out[kept - 1].end) out[kept++] = m;
  out.resize(kept);
}

namespace {

// One pass: every match found in text, but those equal to their placeholder, replaced.
PiiCounts mask_pass(const PiiConfig& c, std::string& text, std::vector<PiiMatch>& matches) {
  PiiCounts counts;
  pii_find(c, text, matches);
  if (matches.empty()) return counts;
  std::string out;
  size_t from = 0;
  for (const PiiMatch& m : matches) {
    const std::string& ph = placeholder(c, m.kind);
    if (std::string_view(text).substr(m.begin, m.end - m.begin) == ph) continue;
    if (out.empty()) out.reserve(text.size());
    out.append(text, from, m.begin - from);
    out += ph;
    from = m.end;
    ++count_of(counts, m.kind);
  }
  if (counts.total() == 0) return counts;
  out.append(text, from, std::string::npos);
  text.swap(out);
  return counts;
}

}  // namespace

PiiCounts pii_mask(const PiiConfig& c, std::string& text) {
  PiiCounts counts;
  std::vector<PiiMatch> matches;
  for (int pass = 0; pass < kPiiMaxPasses; ++pass) {
    PiiCounts n = mask_pass(c, text, matches);
    counts += n;
    if (n.total() == 0) break;
  }
  return counts;
}

// ---- config ----

namespace {

using P = PiiConfig;

const Schema<PiiConfig>& pii_schema() {
  static const Schema<PiiConfig> s{
      "prep.pii",
      {field("enabled", &P::enabled, "false: no masking"),
       field("emails", &P::emails, "mask e-mail addresses"),
       field("ips", &P::ips, "mask IPv4 and IPv6 addresses"),
       field("public_ips_only", &P::public_ips_only,
             "leave private, loopback, link-local, documentation, multicast and reserved "
             "addresses (datatrove's only_remove_public_ips)"),
       field("phones", &P::phones, "mask phone numbers (North American and +international shapes)"),
       field("email_placeholder", &P::email_placeholder, "replaces an e-mail address"),
       field("ipv4_placeholder", &P::ipv4_placeholder, "replaces an IPv4 address"),
       field("ipv6_placeholder", &P::ipv6_placeholder, "replaces an IPv6 address"),
       field("phone_placeholder", &P::phone_placeholder, "replaces a phone number")}};
  return s;
}

}  // namespace

void pii_config_read(const toml::table& root, PiiConfig& c, std::vector<std::string>& errors) {
  schema_read_keys(pii_schema(), root, c, errors);
}

toml::table pii_config_to_toml(const PiiConfig& c) { return schema_to_toml(pii_schema(), c); }

SectionDoc pii_config_doc() { return section_doc(pii_schema()); }

std::vector<std::string> pii_config_validate(const PiiConfig& c) {
  std::vector<std::string> e;
  schema_check(pii_schema(), c, e);
  const std::pair<const char*, const std::string*> keys[] = {
      {"email_placeholder", &c.email_placeholder}, {"ipv4_placeholder", &c.ipv4_placeholder},
      {"ipv6_placeholder", &c.ipv6_placeholder}, {"phone_placeholder", &c.phone_placeholder}};
  for (const auto& [key, value] : keys) {
    std::string masked = *value;
    if (!utf8_valid(*value) || value->find_first_of("\r\n") != std::string::npos)
      e.push_back(fmt::format("[prep.pii] {}: must be valid UTF-8 on one line", key));
    else if (pii_mask(c, masked).total() != 0)
      e.push_back(fmt::format("[prep.pii] {} = \"{}\": would be masked again (as \"{}\"); choose a "
                              "text that is not an address", key, *value, masked));
  }
  return e;
}

}  // namespace smelt
