// Charset sniffing (Content-Type, BOM, <meta>) and conversion to UTF-8 through glibc iconv, with a
// per-thread cache of open converters. Not an encoding detector: an undeclared page is read as UTF-8.
#include "smelt/text/charset.hpp"

#include <iconv.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "smelt/common/utf8.hpp"

namespace smelt {
namespace {

char ascii_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }

bool is_charset_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.' || c == ':';
}

// Case-insensitive search for an ASCII lowercase needle.
size_t find_nocase(std::string_view hay, std::string_view needle, size_t from = 0) {
  if (needle.empty() || hay.size() < needle.size()) return std::string_view::npos;
  for (size_t i = from; i + needle.size() <= hay.size(); ++i) {
    size_t k = 0;
    while (k < needle.size() && ascii_lower(hay[i + k]) == needle[k]) ++k;
    if (k == needle.size()) return i;
  }
  return std::string_view::npos;
}

// The value after "charset" [spaces] "=" [spaces] [quote] in s, lowercased; or "".
std::string charset_after_keyword(std::string_view s) {
  size_t pos = 0;
  while ((pos = find_nocase(s, "charset", pos)) != std::string_view::npos) {
    size_t i = pos + 7;
    while (i < s.size() && is_space(s[i])) ++i;
    if (i < s.size() && s[i] == '=') {
      ++i;
      while (i < s.size() && is_space(s[i])) ++i;
      if (i < s.size() && (s[i] == '"' || s[i] == '\'')) ++i;
      std::string v;
      while (i < s.size() && is_charset_char(s[i]) && v.size() < 40) v.push_back(ascii_lower(s[i++]));
      if (!v.empty()) return v;
    }
    pos += 7;
  }
  return {};
}

enum class Family { kUtf8, kIconv };

// Maps a declared label to the iconv name we open (WHATWG-style aliases; legacy Chinese labels to
// their supersets, as browsers do).
Family canonical_charset(const std::string& label, std::string& iconv_name) {
  const std::string& l = label;
  if (l.empty() || l == "utf-8" || l == "utf8" || l == "unicode-1-1-utf-8" || l == "x-unicode20utf8")
    return Family::kUtf8;
  if (l == "gb2312" || l == "gbk" || l == "x-gbk" || l == "gb18030" || l == "cp936" || l == "euc-cn" ||
      l == "csgb2312" || l == "chinese" || l == "gb_2312-80" || l == "iso-ir-58" || l == "windows-936") {
    iconv_name = "GB18030";
  } else if (l == "big5" || l == "big5-hkscs" || l == "x-x-big5" || l == "cn-big5" || l == "csbig5" ||
             l == "cp950") {
    iconv_name = "BIG5-HKSCS";
  } else if (l == "iso-8859-1" || l == "latin1" || l == "us-ascii" || l == "ascii" || l == "l1" ||
             l == "iso8859-1" || l == "cp1252" || l == "windows-1252" || l == "x-cp1252") {
    iconv_name = "WINDOWS-1252";  // WHATWG: these labels all mean windows-1252
  } else if (l == "shift_jis" || l == "sjis" || l == "x-sjis" || l == "ms_kanji" || l == "windows-31j") {
    iconv_name = "CP932";
  } else if (l == "euc-kr" || l == "ks_c_5601-1987" || l == "windows-949") {
    iconv_name = "CP949";
  } else {
    iconv_name = l;
  }
  return Family::kIconv;
}

// One thread's open converters, by iconv name. Bounded: unknown labels from hostile input must
// not grow it without limit.
struct IconvCache {
  struct Entry {
    std::string name;
    iconv_t cd;
  };
  std::vector<Entry> entries;
  ~IconvCache() {
    for (auto& e : entries) iconv_close(e.cd);
  }
  // Returns (iconv_t)-1 when glibc does not know the charset.
  iconv_t get(const std::string& name) {
    for (auto& e : entries) {
      if (e.name == name) {
        iconv(e.cd, nullptr, nullptr, nullptr, nullptr);  // reset shift state
        return e.cd;
      }
    }
    iconv_t cd = iconv_open("UTF-8", name.c_str());
    if (cd == reinterpret_cast<iconv_t>(-1)) return cd;
    if (entries.size() >= 16) {
      iconv_close(entries.front().cd);
      entries.erase(entries.begin());
    }
    entries.push_back({name, cd});
    return cd;
  }
};

thread_local IconvCache t_iconv_cache;

bool has_non_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return true;
  return false;
}

// Converts with cd; an undecodable byte becomes U+FFFD and decoding resumes at the next byte.
size_t iconv_convert(iconv_t cd, std::string_view in, std::string& out) {
  size_t replaced = 0;
  char* src = const_cast<char*>(in.data());
  size_t src_left = in.size();
  size_t base = out.size();
  out.resize(base + in.size() * 2 + 64);
  char* dst = out.data() + base;
  size_t dst_left = out.size() - base;
  while (src_left > 0) {
    size_t r = iconv(cd, &src, &src_left, &dst, &dst_left);
    if (r != static_cast<size_t>(-1)) break;
    if (errno == E2BIG) {
      size_t used = static_cast<size_t>(dst - out.data());
      out.resize(out.size() * 2);
      dst = out.data() + used;
      dst_left = out.size() - used;
      continue;
    }
    // EILSEQ (invalid) or EINVAL (truncated at the end): replace one byte and go on
    if (dst_left < 3) {
      size_t used = static_cast<size_t>(dst - out.data());
      out.resize(out.size() + 64);
      dst = out.data() + used;
      dst_left = out.size() - used;
    }
    std::memcpy(dst, "\xEF\xBF\xBD", 3);
    dst += 3;
    dst_left -= 3;
    ++src;
    --src_left;
    ++replaced;
    iconv(cd, nullptr, nullptr, nullptr, nullptr);
  }
  // flush any shift state
  for (;;) {
    size_t r = iconv(cd, nullptr, nullptr, &dst, &dst_left);
    if (r != static_cast<size_t>(-1) || errno != E2BIG) break;
    size_t used = static_cast<size_t>(dst - out.data());
    out.resize(out.size() + 64);
    dst = out.data() + used;
    dst_left = out.size() - used;
  }
  out.resize(static_cast<size_t>(dst - out.data()));
  return replaced;
}

}  // namespace

std::string charset_from_content_type(std::string_view content_type) {
  return charset_after_keyword(content_type);
}

std::string charset_sniff_html(std::string_view html) {
  if (html.size() >= 3 && std::memcmp(html.data(), "\xEF\xBB\xBF", 3) == 0) return "utf-8";
  if (html.size() >= 2 && std::memcmp(html.data(), "\xFF\xFE", 2) == 0) return "utf-16le";
  if (html.size() >= 2 && std::memcmp(html.data(), "\xFE\xFF", 2) == 0) return "utf-16be";
  std::string_view head = html.substr(0, 4096);
  size_t pos = 0;
  while ((pos = find_nocase(head, "<meta", pos)) != std::string_view::npos) {
    size_t end = head.find('>', pos);
    std::string_view tag = head.substr(pos, end == std::string_view::npos ? head.size() - pos : end - pos);
    std::string v = charset_after_keyword(tag);
    if (!v.empty()) return v;
    if (end == std::string_view::npos) break;
    pos = end;
  }
  return {};
}

size_t charset_to_utf8(std::string_view in, std::string_view charset, std::string& out) {
  out.clear();
  std::string label;
  label.reserve(charset.size());
  for (char c : charset)
    if (!is_space(c) && c != '"' && c != '\'') label.push_back(ascii_lower(c));
  if (label.empty()) label = charset_sniff_html(in);
  std::string iconv_name;
  Family fam = canonical_charset(label, iconv_name);
  const bool utf16 = iconv_name.rfind("utf-16", 0) == 0 || iconv_name.rfind("utf16", 0) == 0;
  // Pages are often transcoded to UTF-8 by a server or crawler that leaves the old <meta>: real
  // GBK, Big5 or windows-1252 text with non-ASCII bytes is almost never valid UTF-8, so valid
  // UTF-8 wins over a legacy declaration.
  if (fam == Family::kIconv && !utf16 && has_non_ascii(in) && utf8_valid(in)) fam = Family::kUtf8;
  if (fam == Family::kIconv) {
    if (utf16 && in.size() >= 2 &&
        (std::memcmp(in.data(), "\xFF\xFE", 2) == 0 || std::memcmp(in.data(), "\xFE\xFF", 2) == 0)) {
      iconv_name = "UTF-16";  // let iconv read and drop the BOM
    }
    iconv_t cd = t_iconv_cache.get(iconv_name);
    if (cd != reinterpret_cast<iconv_t>(-1)) return iconv_convert(cd, in, out);
    // unknown to glibc: fall through to UTF-8
  }
  if (in.size() >= 3 && std::memcmp(in.data(), "\xEF\xBB\xBF", 3) == 0) in.remove_prefix(3);
  out.reserve(in.size());
  return utf8_repair_append(in, out);
}

}  // namespace smelt
