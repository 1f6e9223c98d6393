// URL filter for prep: domain and URL blocklists (UT1's folder layout or plain files), banned
// words in the URL, and an allow list that wins over every block. Lists are read once, at load,
// into tables of 64-bit hashes; check() is a pure lookup, safe from any thread. Not the code that
// takes a document's URL from its record or counts verdicts (prep does), nor a content filter.
// The matching rules, one by one, open url_filter.cpp.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "smelt/common/config.hpp"

namespace smelt {

// [prep.url_filter]. Paths name files or folders; the filter is a no-op while no list is named.
struct UrlFilterConfig {
  bool enabled = true;                          // false: no URL filter even when lists are named
  std::vector<std::string> blocklists;          // UT1 folders, UT1 category folders or files of entries
  std::vector<std::string> categories;          // the UT1 categories to read from folders; [] = all
  std::vector<std::string> block_domains;       // extra domain entries ("example.com")
  std::vector<std::string> block_urls;          // extra URL entries ("example.com/videos")
  std::vector<std::string> banned_words;        // a URL holding one of these words is blocked
  std::vector<std::string> banned_words_files;  // files of banned words, one per line
  std::vector<std::string> allow_domains;       // never blocked, with their subdomains
  std::vector<std::string> allow_lists;         // files of allowed domains, one per line
};

// Reads [prep.url_filter] of root into c through its field table: wrong types and unknown keys
// go to errors; the values are judged by url_filter_config_validate.
void url_filter_config_read(const toml::table& root, UrlFilterConfig& c, std::vector<std::string>& errors);
// The section with every key (the resolved config).
toml::table url_filter_config_to_toml(const UrlFilterConfig& c);
struct SectionDoc;
SectionDoc url_filter_config_doc();  // [prep.url_filter]'s field table (docs check)
// Values that can never work, one message each naming the key ("[prep.url_filter] banned_words:
// \"foo-bar\": not one word ..."): empty paths, categories without blocklists, inline entries
// that are not a domain / URL / word. Files are checked by UrlFilter::load, which prep calls
// before it writes anything.
std::vector<std::string> url_filter_config_validate(const UrlFilterConfig& c);
// True when the filter is enabled and names at least one list, entry or word.
bool url_filter_config_active(const UrlFilterConfig& c);

// The normalised forms the lists compare (rules 1-3 in url_filter.cpp), exposed for tests and
// tools. host: ASCII (IDNA) form, lower case, no userinfo, port, trailing dot or leading "www.";
// path: from the first '/' or '?' after the host up to '#', ASCII lower-cased. False (host empty)
// when the URL has no host or the host is not valid UTF-8.
bool url_filter_normalise(std::string_view url, std::string& host, std::string& path);
// The words banned_words are compared with (rule 5): the host as written and the path, split at
// every byte that is not an ASCII letter, digit or part of a non-ASCII character; "%XX" escapes
// split too; lower-cased.
void url_filter_words(std::string_view url, std::vector<std::string>& out);

class UrlFilter {
 public:
  // Reads every list of c once. Errors name the file or folder and what was expected (a missing
  // list, a UT1 folder without categories, a category without `domains` or `urls`, an unknown
  // category); a malformed line is skipped and counted (summary() names the first).
  static Status load(const UrlFilterConfig& c, std::unique_ptr<UrlFilter>& out);
  ~UrlFilter();

  struct Verdict {
    bool blocked = false;
    bool allowed = false;   // an allow-list domain overrode a block (the fields below name the block)
    const char* kind = "";  // "domain", "url" or "word"
    std::string list;       // the blocklist's file or folder name; "block_domains", "banned_words", ...
    std::string category;   // the UT1 category ("adult"); "" for plain files and inline entries
    std::string matched;    // the entry as normalised: "example.com", "example.com/videos", "porn"
  };
  // Domain entries first, then URL entries, then banned words; the allow list last. Thread-safe.
  Verdict check(std::string_view url) const;

  // A hash of everything loaded (entries, their lists and categories): the resume fingerprint.
  uint64_t content_hash() const;
  // "3 lists, 2 categories, 120345 domains, 5000 urls, 12 banned words, 4 allowed domains, 1.9 MB"
  // and, when lines were skipped, "; 2 malformed lines skipped (first: FILE:LINE: why)".
  std::string summary() const;
  size_t memory_bytes() const;

  struct Impl;

 private:
  explicit UrlFilter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace smelt
