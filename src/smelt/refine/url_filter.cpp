// URL filter: list loading (UT1 folders, plain files, inline entries), URL normalisation and the
// lookups. Not prep's counting or --keep-rejected examples.
//
// Matching rules (docs/quality.md, "URL filter"; each one has a test in url_filter_test.cpp):
//  1. Parsing. Surrounding whitespace is trimmed. A scheme ("https://", any "letters://") and a
//     leading "//" are dropped; a URL without a scheme is read as if it had one. The host runs up
//     to the first '/', '?', '#' or '\'; userinfo (up to the last '@') and a port (from the last
//     ':'; after ']' for an IPv6 literal) are dropped. Percent-encoded hosts are not decoded.
//  2. Host. Converted to its ASCII form (text/idna.hpp: lower case, NFKC, every non-ASCII label
//     as "xn--" punycode), so "Bücher.de", "bücher.de" and "xn--bcher-kva.de" are one host;
//     trailing dots removed; one leading "www." removed when a dot remains ("www.com" stays).
//     List entries go through the same steps (plus a leading "*." or "." removed).
//  3. Domain entries block the host and every subdomain: "example.com" blocks example.com and
//     a.b.example.com, not notexample.com nor example.com.evil.org. A host that ends in a digit
//     (an IPv4 address) or is an IPv6 literal matches whole entries only.
//  4. URL entries ("host/path", UT1's `urls` files) match the URL's host (rule 2, exactly: no
//     subdomains) followed by its path up to a boundary: "example.com/videos" matches
//     example.com/videos, /videos/, /videos/x and /videos?x, not /videos2. Path and query are
//     compared ASCII-case-insensitively (UT1 lists are lower case, real paths are not); an
//     entry's trailing '/' is ignored; an entry with a query matches that exact query; the
//     fragment never counts. A URL entry without a path matches every page of that one host.
//  5. Banned words (datatrove's URLFilter semantics): the URL's words are the host as written
//     and the path and query, split at every byte that is not an ASCII letter or digit (bytes of
//     non-ASCII characters are word bytes; "%XX" escapes split), lower-cased (utf8proc, NFC);
//     the URL is blocked when a word equals a banned word. Substrings never match ("class" does
//     not match a banned "ass").
//  6. The allow list (domains, rule 3's subdomain rule) wins over every block: the verdict says
//     allowed, not blocked.
//  7. Lists. Lines are trimmed; empty lines and lines starting with '#' are skipped. A line with
//     a space or tab inside, a host that is not letters, digits, '-', '_' and dots (or an IPv6
//     literal), or an empty label is skipped and counted (summary() names the first). In a
//     `domains` file or a plain file, a line with a path is a URL entry; in a `urls` file every
//     line is one. A missing file or folder, a folder with no category, a category folder with
//     neither `domains` nor `urls`, or a requested category that no folder has: an error at load.
//  8. When a URL matches several entries, the verdict names the first kind in the order domain,
//     URL, word, and among equal entries the list loaded first (blocklists in config order,
//     categories in name order, then block_domains / block_urls, then banned words).
//
// Storage: every entry is an xxh3-64 hash of its normalised text in a sorted array with a bucket
// index on the top bits (about 4 keys per bucket, one cache line): 13 bytes per entry, so UT1's
// ~4M domains take ~52 MB. A lookup hashes each parent domain of the host (3-4 for most hosts).
// Two different entries share a hash with probability ~2^-64 per pair; over 4M entries and 10^10
// lookups a false block is expected less than once in 400 runs.
#include "smelt/refine/url_filter.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <utility>

#include <fmt/format.h>
#include <utf8proc.h>

#include "smelt/common/config_schema.hpp"
#include "smelt/common/hash.hpp"
#include "smelt/text/idna.hpp"

namespace fs = std::filesystem;

namespace smelt {

// Bump when normalisation or hashing changes: the content hash of the same files changes with it.
constexpr uint64_t kUrlFilterVersion = 1;

namespace url_filter_detail {

// Sorted 64-bit keys, each with the id of the list it came from, and an index of where each
// bucket (the top bits of a key) starts.
class KeyTable {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;

  // Sorts entries and keeps, for each key, the smallest source (the list loaded first).
  void build(std::vector<std::pair<uint64_t, uint32_t>>& entries) {
    std::sort(entries.begin(), entries.end());
    entries.erase(std::unique(entries.begin(), entries.end(),
                              [](const auto& a, const auto& b) { return a.first == b.first; }),
                  entries.end());
    keys_.resize(entries.size());
    src_.resize(entries.size());
    for (size_t i = 0; i < entries.size(); ++i) std::tie(keys_[i], src_[i]) = entries[i];
    size_t buckets = std::bit_ceil(std::max<size_t>(1, entries.size() / 4));
    bits_ = std::countr_zero(buckets);
    start_.assign(buckets + 1, 0);
    size_t i = 0;
    for (size_t b = 0; b <= buckets; ++b) {
      while (i < keys_.size() && bucket(keys_[i]) < b) ++i;
      start_[b] = static_cast<uint32_t>(i);
    }
    entries.clear();
    entries.shrink_to_fit();
  }

  uint32_t find(uint64_t key) const {
    if (keys_.empty()) return kNone;
    size_t b = bucket(key);
    for (uint32_t i = start_[b], e = start_[b + 1]; i < e; ++i)
      if (keys_[i] >= key) return keys_[i] == key ? src_[i] : kNone;
    return kNone;
  }

  size_t size() const { return keys_.size(); }
  size_t bytes() const { return keys_.size() * 12 + start_.size() * 4; }
  uint64_t hash(uint64_t seed) const {
    seed = XXH3_64bits_withSeed(keys_.data(), keys_.size() * sizeof(uint64_t), seed);
    return XXH3_64bits_withSeed(src_.data(), src_.size() * sizeof(uint32_t), seed);
  }

 private:
  size_t bucket(uint64_t key) const { return bits_ == 0 ? 0 : static_cast<size_t>(key >> (64 - bits_)); }
  std::vector<uint64_t> keys_;
  std::vector<uint32_t> src_;    // [key index] -> source id
  std::vector<uint32_t> start_;  // [bucket] -> first key index; one more than the buckets
  int bits_ = 0;
};

}  // namespace url_filter_detail

using url_filter_detail::KeyTable;

struct UrlFilter::Impl {
  struct Source {
    std::string list, category;
  };
  std::vector<Source> sources;  // [source id]
  KeyTable domains, urls, words, allow;
  size_t lists = 0, categories = 0, skipped = 0;
  std::string first_skipped;  // "FILE:LINE: why"
  uint64_t content_hash = 0;
};

namespace {

// ---- config -------------------------------------------------------------------------------

using U = UrlFilterConfig;

const Schema<UrlFilterConfig>& url_filter_schema() {
  static const Schema<UrlFilterConfig> s{
      "prep.url_filter",
      {field("enabled", &U::enabled, "false: no URL filter even when lists are named"),
       field("blocklists", &U::blocklists,
             "UT1 folders (a subfolder per category with `domains` and/or `urls`), category folders, "
             "or files with one domain or host/path per line"),
       field("categories", &U::categories, "the UT1 categories read from blocklists folders; [] = all"),
       field("block_domains", &U::block_domains, "extra domains to block, with their subdomains"),
       field("block_urls", &U::block_urls, "extra URL prefixes to block (\"example.com/videos\")"),
       field("banned_words", &U::banned_words, "a URL with one of these words (whole, any case) is blocked"),
       field("banned_words_files", &U::banned_words_files, "files of banned words, one per line"),
       field("allow_domains", &U::allow_domains, "domains never blocked (with subdomains); wins over every list"),
       field("allow_lists", &U::allow_lists, "files of allowed domains, one per line")}};
  return s;
}

// ---- parsing and normalisation (rules 1, 2, 5) ------------------------------------------------

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v'; }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

struct UrlView {
  std::string_view host, path;  // raw: host without userinfo or port; path + query, no fragment
};

std::string_view drop_scheme(std::string_view s) {
  size_t p = s.find("://");
  if (p != std::string_view::npos && p > 0 && is_alpha(s[0])) {
    bool scheme = true;
    for (size_t i = 1; i < p; ++i)
      scheme = scheme && (is_alpha(s[i]) || is_digit(s[i]) || s[i] == '+' || s[i] == '-' || s[i] == '.');
    if (scheme) return s.substr(p + 3);
  }
  if (s.starts_with("//")) return s.substr(2);
  return s;
}

UrlView url_split(std::string_view url) {
  std::string_view s = drop_scheme(trim(url));
  size_t end = s.find_first_of("/?#\\");
  std::string_view authority = s.substr(0, end), rest = end == std::string_view::npos ? "" : s.substr(end);
  if (size_t at = authority.rfind('@'); at != std::string_view::npos) authority.remove_prefix(at + 1);
  if (authority.starts_with('[')) {  // IPv6 literal: the port follows ']'
    if (size_t close = authority.find(']'); close != std::string_view::npos) authority = authority.substr(0, close + 1);
  } else if (size_t colon = authority.rfind(':'); colon != std::string_view::npos) {
    authority = authority.substr(0, colon);
  }
  if (size_t hash = rest.find('#'); hash != std::string_view::npos) rest = rest.substr(0, hash);
  return {authority, rest};
}

// Rule 2 into out (cleared). False when nothing is left or the host is not valid UTF-8.
bool normalise_host(std::string_view raw, std::string& out) {
  out.clear();
  if (raw.empty() || !idna_to_ascii(raw, out)) return false;
  while (!out.empty() && out.back() == '.') out.pop_back();
  if (out.starts_with("www.") && out.find('.', 4) != std::string::npos) out.erase(0, 4);
  return !out.empty();
}

void append_lower(std::string_view s, std::string& out) {
  for (char c : s) out.push_back(lower(c));
}

// Lower case of a non-ASCII word (utf8proc tolower, then NFC), appended to out.
utf8proc_int32_t to_lower(utf8proc_int32_t c, void*) { return utf8proc_tolower(c); }
void fold_word(std::string_view w, std::string& out) {
  utf8proc_uint8_t* mapped = nullptr;
  utf8proc_ssize_t n = utf8proc_map_custom(reinterpret_cast<const utf8proc_uint8_t*>(w.data()),
                                           static_cast<utf8proc_ssize_t>(w.size()), &mapped,
                                           static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE),
                                           to_lower, nullptr);
  if (n >= 0) out.append(reinterpret_cast<const char*>(mapped), static_cast<size_t>(n));
  else append_lower(w, out);  // invalid UTF-8: ASCII lower case only
  std::free(mapped);
}

bool is_word_byte(char c) { return is_alpha(c) || is_digit(c) || static_cast<unsigned char>(c) >= 0x80; }

// Calls fn(word) for each word of s (rule 5), lower-cased into scratch.
template <class Fn>
bool for_each_word(std::string_view s, std::string& scratch, Fn&& fn) {
  size_t i = 0;
  while (i < s.size()) {
    if (!is_word_byte(s[i])) {
      i += (s[i] == '%' && i + 2 < s.size() && is_hex(s[i + 1]) && is_hex(s[i + 2])) ? 3 : 1;
      continue;
    }
    size_t j = i;
    bool ascii = true;
    for (; j < s.size() && is_word_byte(s[j]); ++j) ascii = ascii && static_cast<unsigned char>(s[j]) < 0x80;
    scratch.clear();
    if (ascii) append_lower(s.substr(i, j - i), scratch);
    else fold_word(s.substr(i, j - i), scratch);
    if (fn(std::string_view(scratch))) return true;
    i = j;
  }
  return false;
}

// The source of the entry matching host or one of its parent domains (rule 3); at receives the
// offset of the matching suffix.
uint32_t find_domain(const KeyTable& t, std::string_view host, size_t& at) {
  bool whole_only = host.front() == '[' || is_digit(host.back());
  for (size_t p = 0; p < host.size();) {
    uint32_t src = t.find(hash64(host.substr(p)));
    if (src != KeyTable::kNone) { at = p; return src; }
    if (whole_only) break;
    p = host.find('.', p);
    if (p == std::string_view::npos) break;
    ++p;
  }
  return KeyTable::kNone;
}

// key = host + lower-cased path; the source of the first URL entry matching a prefix of key that
// ends at the host's end, before a '/' or '?', or at the end (rule 4); len receives its length.
uint32_t find_url(const KeyTable& t, std::string_view key, size_t host_len, size_t& len) {
  for (size_t p = host_len, checked = 0; p <= key.size() && checked < 64; ++p) {
    if (p != key.size() && p != host_len && key[p] != '/' && key[p] != '?') continue;
    ++checked;
    uint32_t src = t.find(hash64(key.substr(0, p)));
    if (src != KeyTable::kNone) { len = p; return src; }
  }
  return KeyTable::kNone;
}

// ---- list entries (rule 7) ---------------------------------------------------------------

bool host_valid(std::string_view h) {
  if (h.starts_with('[')) {
    if (!h.ends_with(']') || h.size() < 3) return false;
    for (char c : h.substr(1, h.size() - 2))
      if (!is_hex(c) && c != ':' && c != '.') return false;
    return true;
  }
  size_t label = 0;
  for (char c : h) {
    if (c == '.') {
      if (label == 0) return false;
      label = 0;
    } else if (is_alpha(c) || is_digit(c) || c == '-' || c == '_') {
      ++label;
    } else {
      return false;
    }
  }
  return label > 0;
}

// Normalises a list line (already trimmed) into host and path (trailing '/' dropped); "" or why not.
std::string entry_parse(std::string_view line, std::string& host, std::string& path) {
  for (char c : line)
    if (is_space(c)) return "a space inside";
  if (line.starts_with("*.")) line.remove_prefix(2);
  while (line.starts_with('.')) line.remove_prefix(1);
  UrlView v = url_split(line);
  if (!normalise_host(v.host, host)) return v.host.empty() ? "no host" : "the host is not valid UTF-8";
  if (!host_valid(host)) return fmt::format("\"{}\" is not a host name", host);
  path.clear();
  append_lower(v.path, path);
  while (!path.empty() && path.back() == '/') path.pop_back();
  return "";
}

// One word of a banned-word list, lower-cased; "" or why not.
std::string word_parse(std::string_view line, std::string& word) {
  size_t n = 0;
  std::string scratch;
  for_each_word(line, scratch, [&](std::string_view w) { word = w; ++n; return false; });
  if (n == 1 && std::all_of(line.begin(), line.end(), is_word_byte)) return "";
  if (n == 0) return "no letter or digit";
  return "not one word (URL words are split at every character that is not a letter or digit)";
}

enum class ListKind { kBlock, kUrls, kAllow, kWords };

// Reads lists into (hash, source) pairs, then builds the tables once.
class Loader {
 public:
  explicit Loader(UrlFilter::Impl& f) : f_(f) {}

  uint32_t source(std::string list, std::string category) {
    f_.sources.push_back({std::move(list), std::move(category)});
    return static_cast<uint32_t>(f_.sources.size() - 1);
  }

  // One entry of a list; a malformed one is counted and the first remembered as "WHERE:LINE: why".
  void entry(std::string_view text, ListKind kind, uint32_t src, std::string_view where, size_t line) {
    std::string why;
    if (kind == ListKind::kWords) {
      why = word_parse(text, host_);
      if (why.empty()) words_.emplace_back(hash64(host_), src);
    } else {
      why = entry_parse(text, host_, path_);
      if (why.empty() && kind == ListKind::kAllow && !path_.empty()) why = "an allowed entry is a domain, not a URL";
    }
    if (!why.empty()) {
      if (f_.skipped++ == 0) f_.first_skipped = fmt::format("{}:{}: \"{}\": {}", where, line, text, why);
      return;
    }
    if (kind == ListKind::kWords) return;
    if (kind == ListKind::kAllow) allow_.emplace_back(hash64(host_), src);
    else if (kind == ListKind::kUrls || !path_.empty()) urls_.emplace_back(hash64(host_ + path_), src);
    else domains_.emplace_back(hash64(host_), src);
  }

  // Every entry line of the file at path (rule 7).
  Status file(const std::string& path, ListKind kind, uint32_t src) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return Status::error(fmt::format("{}: cannot read ({})", path, std::strerror(errno)));
    std::string line;
    for (size_t n = 1; std::getline(in, line); ++n) {
      std::string_view t = trim(line);
      if (!t.empty() && t[0] != '#') entry(t, kind, src, path, n);
    }
    if (in.bad()) return Status::error(fmt::format("{}: read error ({})", path, std::strerror(errno)));
    return Status::ok();
  }

  // A UT1 category folder: its `domains` and `urls` files.
  Status category(const fs::path& dir, const std::string& list) {
    uint32_t src = source(list, dir.filename().string());
    bool any = false;
    for (auto [name, kind] : {std::pair{"domains", ListKind::kBlock}, std::pair{"urls", ListKind::kUrls}}) {
      if (!fs::is_regular_file(dir / name)) continue;
      any = true;
      if (Status s = file((dir / name).string(), kind, src); !s) return s;
    }
    if (!any)
      return Status::error(fmt::format("[prep.url_filter] {}: holds neither a `domains` nor a `urls` file "
                                       "(expected a UT1 category folder)", dir.string()));
    ++f_.categories;
    return Status::ok();
  }

  Status blocklist(const std::string& path, const std::vector<std::string>& wanted, std::vector<bool>& found);
  Status inline_entries(const std::vector<std::string>& v, const char* key, ListKind kind) {
    if (v.empty()) return Status::ok();
    uint32_t src = source(key, "");
    std::string where = fmt::format("[prep.url_filter] {}", key);
    for (size_t i = 0; i < v.size(); ++i) entry(trim(v[i]), kind, src, where, i + 1);
    return Status::ok();
  }
  Status files(const std::vector<std::string>& paths, const char* key, ListKind kind);

  void finish() {
    f_.domains.build(domains_);
    f_.urls.build(urls_);
    f_.words.build(words_);
    f_.allow.build(allow_);
    uint64_t h = hash64(fmt::format("smelt-url-filter v{}", kUrlFilterVersion));
    for (const auto& s : f_.sources) h = hash64(s.list + '\n' + s.category + '\n', h);
    for (const KeyTable* t : {&f_.domains, &f_.urls, &f_.words, &f_.allow}) h = hash_mix(t->hash(h) ^ t->size());
    f_.content_hash = h;
  }

 private:
  UrlFilter::Impl& f_;
  std::string host_, path_;
  std::vector<std::pair<uint64_t, uint32_t>> domains_, urls_, words_, allow_;
};

std::string missing_message(const char* key, const std::string& path, const char* expected) {
  return fmt::format("[prep.url_filter] {}: \"{}\": no such file or folder (expected {})", key, path, expected);
}

constexpr const char* kBlocklistExpected =
    "a UT1 folder with a subfolder per category holding `domains` and/or `urls` files, one such "
    "category folder, or a file with one domain or host/path per line";

Status Loader::blocklist(const std::string& path, const std::vector<std::string>& wanted,
                         std::vector<bool>& found) {
  std::error_code ec;
  fs::path p(path);
  std::string name = p.filename().empty() ? p.parent_path().filename().string() : p.filename().string();
  if (fs::is_regular_file(p, ec)) return file(path, ListKind::kBlock, source(name, ""));
  if (!fs::is_directory(p, ec)) return Status::error(missing_message("blocklists", path, kBlocklistExpected));
  if (fs::is_regular_file(p / "domains", ec) || fs::is_regular_file(p / "urls", ec)) return category(p, name);
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(p, ec))
    if (e.is_directory(ec) && !e.path().filename().string().starts_with('.')) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  size_t loaded = 0;
  for (const auto& d : dirs) {
    auto it = std::find(wanted.begin(), wanted.end(), d.filename().string());
    if (!wanted.empty() && it == wanted.end()) continue;
    if (it != wanted.end()) found[static_cast<size_t>(it - wanted.begin())] = true;
    if (Status s = category(d, name); !s) return s;
    ++loaded;
  }
  if (loaded == 0 && wanted.empty())
    return Status::error(fmt::format("[prep.url_filter] blocklists: \"{}\": a folder without categories "
                                     "(expected {})", path, kBlocklistExpected));
  return Status::ok();
}

Status Loader::files(const std::vector<std::string>& paths, const char* key, ListKind kind) {
  const char* expected = kind == ListKind::kWords ? "a file with one word per line" : "a file with one domain per line";
  for (const auto& path : paths) {
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) return Status::error(missing_message(key, path, expected));
    if (Status s = file(path, kind, source(fs::path(path).filename().string(), "")); !s) return s;
  }
  return Status::ok();
}

}  // namespace

// ---- public -------------------------------------------------------------------------------

void url_filter_config_read(const toml::table& root, UrlFilterConfig& c, std::vector<std::string>& errors) {
  schema_read_keys(url_filter_schema(), root, c, errors);
}

toml::table url_filter_config_to_toml(const UrlFilterConfig& c) { return schema_to_toml(url_filter_schema(), c); }

SectionDoc url_filter_config_doc() { return section_doc(url_filter_schema()); }

bool url_filter_config_active(const UrlFilterConfig& c) {
  return c.enabled && (!c.blocklists.empty() || !c.block_domains.empty() || !c.block_urls.empty() ||
                       !c.banned_words.empty() || !c.banned_words_files.empty());
}

std::vector<std::string> url_filter_config_validate(const UrlFilterConfig& c) {
  std::vector<std::string> e;
  schema_check(url_filter_schema(), c, e);
  for (const auto& [key, v] : {std::pair{"blocklists", &c.blocklists}, {"categories", &c.categories},
                               {"banned_words_files", &c.banned_words_files}, {"allow_lists", &c.allow_lists}})
    for (const auto& s : *v)
      if (trim(s).empty()) e.push_back(fmt::format("[prep.url_filter] {}: an empty entry", key));
  if (!c.categories.empty() && c.blocklists.empty())
    e.push_back("[prep.url_filter] categories: given without blocklists (name the UT1 folder in blocklists)");
  std::string host, path;
  auto check = [&](const char* key, const std::vector<std::string>& v, ListKind kind) {
    for (const auto& s : v) {
      std::string why = kind == ListKind::kWords ? word_parse(trim(s), host) : entry_parse(trim(s), host, path);
      if (why.empty() && kind != ListKind::kUrls && kind != ListKind::kWords && !path.empty())
        why = "a domain has no path (block_urls takes host/path)";
      if (!why.empty()) e.push_back(fmt::format("[prep.url_filter] {}: \"{}\": {}", key, s, why));
    }
  };
  check("block_domains", c.block_domains, ListKind::kBlock);
  check("block_urls", c.block_urls, ListKind::kUrls);
  check("banned_words", c.banned_words, ListKind::kWords);
  check("allow_domains", c.allow_domains, ListKind::kAllow);
  return e;
}

bool url_filter_normalise(std::string_view url, std::string& host, std::string& path) {
  UrlView v = url_split(url);
  path.clear();
  append_lower(v.path, path);
  return normalise_host(v.host, host);
}

void url_filter_words(std::string_view url, std::vector<std::string>& out) {
  out.clear();
  UrlView v = url_split(url);
  std::string scratch;
  for (std::string_view part : {v.host, v.path})
    for_each_word(part, scratch, [&](std::string_view w) { out.emplace_back(w); return false; });
}

UrlFilter::UrlFilter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
UrlFilter::~UrlFilter() = default;

Status UrlFilter::load(const UrlFilterConfig& c, std::unique_ptr<UrlFilter>& out) {
  auto impl = std::make_unique<Impl>();
  Loader ld(*impl);
  std::vector<bool> found(c.categories.size(), false);
  for (const auto& path : c.blocklists)
    if (Status s = ld.blocklist(path, c.categories, found); !s) return s;
  for (size_t i = 0; i < found.size(); ++i)
    if (!found[i])
      return Status::error(fmt::format("[prep.url_filter] categories: \"{}\" is not a subfolder of any "
                                       "blocklists folder (expected a UT1 category name such as \"adult\")",
                                       c.categories[i]));
  Status s = ld.inline_entries(c.block_domains, "block_domains", ListKind::kBlock);
  if (s) s = ld.inline_entries(c.block_urls, "block_urls", ListKind::kUrls);
  if (s) s = ld.files(c.banned_words_files, "banned_words_files", ListKind::kWords);
  if (s) s = ld.inline_entries(c.banned_words, "banned_words", ListKind::kWords);
  if (s) s = ld.files(c.allow_lists, "allow_lists", ListKind::kAllow);
  if (s) s = ld.inline_entries(c.allow_domains, "allow_domains", ListKind::kAllow);
  if (!s) return s;
  impl->lists = c.blocklists.size() + c.banned_words_files.size() + c.allow_lists.size();
  ld.finish();
  out.reset(new UrlFilter(std::move(impl)));
  return Status::ok();
}

UrlFilter::Verdict UrlFilter::check(std::string_view url) const {
  struct Scratch {
    std::string host, key, word;
  };
  thread_local Scratch s;
  const Impl& f = *impl_;
  Verdict v;
  UrlView raw = url_split(url);
  bool have_host = normalise_host(raw.host, s.host);
  auto block = [&](const char* kind, uint32_t src, std::string_view matched) {
    v.blocked = true;
    v.kind = kind;
    v.list = f.sources[src].list;
    v.category = f.sources[src].category;
    v.matched = matched;
  };
  size_t at = 0;
  if (have_host && f.domains.size())
    if (uint32_t src = find_domain(f.domains, s.host, at); src != KeyTable::kNone)
      block("domain", src, std::string_view(s.host).substr(at));
  if (!v.blocked && have_host && f.urls.size()) {
    s.key = s.host;
    append_lower(raw.path, s.key);
    if (uint32_t src = find_url(f.urls, s.key, s.host.size(), at); src != KeyTable::kNone)
      block("url", src, std::string_view(s.key).substr(0, at));
  }
  for (std::string_view part : {raw.host, raw.path}) {
    if (v.blocked || !f.words.size()) break;
    for_each_word(part, s.word, [&](std::string_view w) {
      uint32_t src = f.words.find(hash64(w));
      if (src != KeyTable::kNone) block("word", src, w);
      return v.blocked;
    });
  }
  if (v.blocked && have_host && f.allow.size() && find_domain(f.allow, s.host, at) != KeyTable::kNone) {
    v.blocked = false;
    v.allowed = true;
  }
  return v;
}

uint64_t UrlFilter::content_hash() const { return impl_->content_hash; }

size_t UrlFilter::memory_bytes() const {
  const Impl& f = *impl_;
  return f.domains.bytes() + f.urls.bytes() + f.words.bytes() + f.allow.bytes();
}

std::string UrlFilter::summary() const {
  const Impl& f = *impl_;
  std::string s = fmt::format("{} lists, {} categories, {} domains, {} urls, {} banned words, {} allowed domains, "
                              "{:.1f} MB", f.lists, f.categories, f.domains.size(), f.urls.size(), f.words.size(),
                              f.allow.size(), static_cast<double>(memory_bytes()) / 1e6);
  if (f.skipped > 0)
    s += fmt::format("; {} malformed line{} skipped (first: {})", f.skipped, f.skipped == 1 ? "" : "s",
                     f.first_skipped);
  return s;
}

}  // namespace smelt
