// Measures the quality signals of one document: one pass over the text (classes, words, lines,
// scripts, entropy), then passes over the per-word and per-line hash arrays for repetition.
// No per-word allocation: words and lines are hashed (xxHash3) into reused thread-local arrays.
// Not here: thresholds and the score (quality_score.cpp), HTML parsing (the extractor's job).
#include "smelt/refine/quality_signals.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <iterator>
#include <vector>

#include <fmt/format.h>
#include <utf8proc.h>

#include "smelt/common/hash.hpp"
#include "smelt/common/json_write.hpp"
#include "smelt/common/utf8.hpp"

namespace smelt {
namespace {

enum Cls : uint8_t { kSpace, kLetter, kDigit, kPunct, kOtherCls };

constexpr std::array<uint8_t, 128> make_ascii_classes() {
  std::array<uint8_t, 128> t{};
  for (int c = 0; c < 128; ++c) {
    uint8_t k = kOtherCls;  // control characters
    if (c == ' ' || (c >= '\t' && c <= '\r')) k = kSpace;
    else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) k = kLetter;
    else if (c >= '0' && c <= '9') k = kDigit;
    else if (c > ' ' && c < 127) k = kPunct;
    t[c] = k;
  }
  return t;
}
constexpr std::array<uint8_t, 128> kAsciiClass = make_ascii_classes();

// Unicode general category -> our class: Z* space, L* letter, N* digit, P*/S* punctuation,
// marks and format/control characters "other" (they belong to the word they sit in).
uint8_t class_of(char32_t cp) {
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_ZS: case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP:
      return kSpace;
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
      return kLetter;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
      return kDigit;
    case UTF8PROC_CATEGORY_PC: case UTF8PROC_CATEGORY_PD: case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE: case UTF8PROC_CATEGORY_PI: case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO: case UTF8PROC_CATEGORY_SM: case UTF8PROC_CATEGORY_SC:
    case UTF8PROC_CATEGORY_SK: case UTF8PROC_CATEGORY_SO:
      return kPunct;
    default:
      return kOtherCls;
  }
}

// Open-addressing table of 64-bit hashes (0 is the empty mark, so a 0 hash is stored as 1) with
// a count and the first position of each key; keeps track of the most frequent key as it goes.
// Reset per use; the capacity stays between documents.
class CountTable {
 public:
  void reset(size_t n) {
    size_t cap = 64;
    while (cap < 2 * n) cap <<= 1;
    slots_.assign(cap, Entry{});
    mask_ = cap - 1;
    top_count_ = 0;
    top_first_ = 0;
  }
  // One more occurrence of k, at position pos; returns its count so far and sets first to the
  // position of its first occurrence.
  uint32_t add(uint64_t k, uint32_t pos, uint32_t& first) {
    k = k ? k : 1;
    for (size_t s = k & mask_;; s = (s + 1) & mask_) {
      Entry& e = slots_[s];
      if (e.key == k) {
        ++e.count;
        first = e.first;
        // ties go to the earliest first occurrence, as Counter.most_common does
        if (e.count > top_count_ || (e.count == top_count_ && e.first < top_first_)) {
          top_count_ = e.count;
          top_first_ = e.first;
        }
        return e.count;
      }
      if (e.key == 0) {
        e = Entry{k, 1, pos};
        first = pos;
        if (top_count_ == 0) { top_count_ = 1; top_first_ = pos; }
        return 1;
      }
    }
  }
  // Inserts k; false when it was already there (the set semantics of datatrove's find_duplicates).
  bool insert(uint64_t k) {
    k = k ? k : 1;
    for (size_t s = k & mask_;; s = (s + 1) & mask_) {
      if (slots_[s].key == k) return false;
      if (slots_[s].key == 0) { slots_[s].key = k; return true; }
    }
  }
  // The most frequent key so far: its count and first position (count 0 when empty).
  uint32_t top_count() const { return top_count_; }
  uint32_t top_first() const { return top_first_; }

 private:
  struct Entry {
    uint64_t key = 0;
    uint32_t count = 0, first = 0;
  };
  std::vector<Entry> slots_;
  size_t mask_ = 0;
  uint32_t top_count_ = 0, top_first_ = 0;
};

struct Span {
  size_t first_byte = 0, end_byte = 0;  // trimmed: first non-space byte .. one past the last
  uint64_t first_char = 0, end_char = 0;
};

// Per-thread scratch, reused across documents so that a warm thread does not allocate.
struct Scratch {
  std::vector<uint64_t> word_hash;  // [word]
  std::vector<uint32_t> word_len;   // [word] code points
  std::vector<uint64_t> prefix;     // [word + 1] cumulative word_len
  std::vector<uint64_t> gram;       // [position] hash of the n-gram starting there
  std::vector<uint32_t> pos;        // n-gram positions still worth counting, ascending
  std::vector<uint8_t> rep;         // [position] its n-gram occurs more than once
  std::vector<Span> lines, paras;
  std::vector<uint8_t> line_flag;   // [line] bit 0: javascript, bit 1: policy
  std::string lower;                // the text, ASCII lower-cased
  std::vector<uint32_t> bmp_count;  // [code point < 0x10000]; all zero between documents
  std::vector<uint16_t> bmp_seen;   // code points with a non-zero bmp_count
  std::vector<char32_t> astral;     // code points >= 0x10000, one entry per occurrence
  CountTable table;

  void release() {
    std::vector<uint32_t> keep_bmp = std::move(bmp_count);  // small, and all zero again
    *this = Scratch{};
    bmp_count = std::move(keep_bmp);
  }
};

// Polynomial (Rabin-Karp style) n-gram hash over the word hashes: g(w1..wn) = g(w1..wn-1) * K + h(wn).
// Word hashes are uniform in all bits, so the low bits the tables index by are too.
inline uint64_t gram_combine(uint64_t g, uint64_t next_word) { return g * 0x9E3779B97F4A7C15ULL + next_word; }

// Hash of one word: words of up to 7 bytes (most of them) are packed with their length and
// mixed, which is exact (no collisions) and cheaper than a call; longer ones go to xxHash3.
inline uint64_t word_hash(const char* data, size_t avail, size_t len) {
  if (len <= 7) {
    uint64_t v = 0;
    if (avail >= 8) {
      std::memcpy(&v, data, 8);
      v &= (uint64_t{1} << (8 * len)) - 1;
    } else {
      for (size_t k = 0; k < len; ++k) v |= static_cast<uint64_t>(static_cast<unsigned char>(data[k])) << (8 * k);
    }
    return hash_mix(v | (static_cast<uint64_t>(len) << 56));
  }
  return hash64(std::string_view(data, len), 0x5EED);
}

// ASCII lower-casing of 8 bytes at once (bytes >= 0x80 unchanged).
inline uint64_t lower8(uint64_t w) {
  constexpr uint64_t ones = 0x0101010101010101ULL, high = 0x8080808080808080ULL;
  const uint64_t h7 = w & ~high;
  const uint64_t ge_a = h7 + (0x80 - 'A') * ones;  // high bit set where byte >= 'A'
  const uint64_t gt_z = h7 + (0x7F - 'Z') * ones;  // high bit set where byte > 'Z'
  const uint64_t upper = (ge_a ^ gt_z) & ~w & high;
  return w | (upper >> 2);
}

// utf8_next with the two- and three-byte forms (all of Chinese) decoded inline.
inline char32_t decode_multibyte(std::string_view s, size_t& i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + i;
  const size_t left = s.size() - i;
  if ((p[0] & 0xF0) == 0xE0 && left >= 3 && (p[1] & 0xC0) == 0x80 && (p[2] & 0xC0) == 0x80) {
    const char32_t cp = (char32_t{p[0] & 0x0Fu} << 12) | (char32_t{p[1] & 0x3Fu} << 6) | (p[2] & 0x3Fu);
    if (cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF)) { i += 3; return cp; }
  } else if ((p[0] & 0xE0) == 0xC0 && left >= 2 && (p[1] & 0xC0) == 0x80 && p[0] >= 0xC2) {
    i += 2;
    return (char32_t{p[0] & 0x1Fu} << 6) | (p[1] & 0x3Fu);
  }
  return utf8_next(s, i);
}

inline bool is_ws(char32_t cp) { return cp < 0x80 ? kAsciiClass[cp] == kSpace : class_of(cp) == kSpace; }

// The code point before byte end, and where it starts.
char32_t cp_before(std::string_view s, size_t end, size_t& start) {
  size_t j = end - 1;
  while (j > 0 && end - j < 4 && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) --j;
  start = j;
  size_t k = j;
  return utf8_next(s, k);
}

bool is_cn_numeral(char32_t c) {
  switch (c) {
    case U'一': case U'二': case U'三': case U'四': case U'五': case U'六': case U'七': case U'八':
    case U'九': case U'十': case U'〇': case U'零': case U'百':
      return true;
    default:
      return false;
  }
}

// Gopher counts lines "starting with a bullet point". Bullets: the symbols below anywhere, the
// dashes "-", "*", "+", "–" only when followed by whitespace (so "-5" or "*args" are not), and
// numbered forms "12." / "12)" / "a)" + whitespace, "12、", "(12)", "一、", "（一）".
bool is_bullet_line(std::string_view l) {  // l: trimmed, non-empty
  auto ws_at = [&](size_t pos) {
    if (pos >= l.size()) return true;
    size_t q = pos;
    return is_ws(utf8_next(l, q));
  };
  size_t i = 0;
  const char32_t c0 = utf8_next(l, i);
  switch (c0) {
    case U'•': case U'‣': case U'◦': case U'●': case U'·': case U'・': case U'▪': case U'■':
    case U'□': case U'○': case U'►': case U'▸': case U'▶': case U'➢': case U'➤': case U'✓':
    case U'✔': case U'◆': case U'◇': case U'※': case U'→':
      return true;
    case U'-': case U'*': case U'+': case U'–':
      return ws_at(i);
    default:
      break;
  }
  // numbered forms
  size_t j = 0;
  bool paren = false;
  if (l[0] == '(') { paren = true; j = 1; }
  else if (l.substr(0, 3) == "（") { paren = true; j = 3; }
  size_t k = j;
  int digits = 0, cn = 0;
  while (k < l.size() && digits < 4 && l[k] >= '0' && l[k] <= '9') { ++k; ++digits; }
  if (digits == 0) {
    while (k < l.size() && cn < 4) {
      size_t m = k;
      if (!is_cn_numeral(utf8_next(l, m))) break;
      k = m;
      ++cn;
    }
  }
  const bool letter = digits == 0 && cn == 0 && k < l.size() && ((l[k] | 0x20) >= 'a' && (l[k] | 0x20) <= 'z');
  if (letter) ++k;
  if ((digits == 0 && cn == 0 && !letter) || digits > 3 || cn > 3 || k >= l.size()) return false;
  std::string_view rest = l.substr(k);
  if (paren) return rest[0] == ')' || rest.substr(0, 3) == "）";
  if (rest.substr(0, 3) == "、") return !letter;
  if (letter) return rest[0] == ')' && ws_at(k + 1);
  if (cn) return false;
  return (rest[0] == '.' || rest[0] == ')') && ws_at(k + 1);
}

inline bool is_terminal(char32_t c) {
  switch (c) {
    case '.': case '!': case '?': case '"':  // C4's end marks
    case U'。': case U'！': case U'？': case U'…': case U'．': case U'｡': case U'‼': case U'⁇':
      return true;
    default:
      return false;
  }
}
inline bool is_closer(char32_t c) {
  switch (c) {
    case '\'': case ')': case U'”': case U'’': case U'」': case U'』': case U'）': case U'》':
    case U'】': case U'»':
      return true;
    default:
      return false;
  }
}

// C4 keeps lines that end in a terminal punctuation mark (".", "!", "?", '"'); we add the
// Chinese and full-width marks and accept a closing quote or bracket after one ("done.)").
bool ends_terminal(std::string_view l) {
  size_t start;
  const char32_t last = cp_before(l, l.size(), start);
  if (is_terminal(last)) return true;
  if (!is_closer(last) || start == 0) return false;
  size_t s2;
  return is_terminal(cp_before(l, start, s2));
}

bool ends_ellipsis(std::string_view l) {
  return l.ends_with("...") || l.ends_with("\xE2\x80\xA6");  // U+2026 "…"
}

inline size_t line_of(const std::vector<Span>& lines, size_t byte) {
  auto it = std::upper_bound(lines.begin(), lines.end(), byte,
                             [](size_t b, const Span& s) { return b < s.first_byte; });
  return static_cast<size_t>(it - lines.begin()) - 1;
}

// Marks (flag bit) every line holding pattern (already lower-case) in the lower-cased text.
void mark_lines(Scratch& sc, std::string_view pattern, uint8_t bit) {
  const std::string& t = sc.lower;
  const char* p = t.data();
  size_t left = t.size();
  while (left >= pattern.size()) {
    const void* hit = memmem(p, left, pattern.data(), pattern.size());
    if (!hit) return;
    const size_t pos = static_cast<size_t>(static_cast<const char*>(hit) - t.data());
    sc.line_flag[line_of(sc.lines, pos)] |= bit;
    p = static_cast<const char*>(hit) + pattern.size();
    left = t.size() - static_cast<size_t>(p - t.data());
  }
}

// "cookie" hits that are part of C4's cookie phrases.
void mark_cookie_lines(Scratch& sc, uint8_t bit) {
  std::string_view t = sc.lower;
  for (size_t pos = t.find("cookie"); pos != std::string_view::npos; pos = t.find("cookie", pos + 6)) {
    const bool hit = t.substr(pos, 13) == "cookie policy" ||
                     (pos >= 5 && t.substr(pos - 5, 12) == "uses cookies") ||
                     (pos >= 7 && t.substr(pos - 7, 14) == "use of cookies") ||
                     (pos >= 4 && t.substr(pos - 4, 11) == "use cookies");
    if (hit) sc.line_flag[line_of(sc.lines, pos)] |= bit;
  }
}

void append_key(std::string& out, const char* key) {
  if (out.back() != '{') out.push_back(',');
  out.push_back('"');
  out += key;
  out += "\":";
}

void append_num(std::string& out, const char* key, double v) {
  append_key(out, key);
  double r = std::isfinite(v) ? std::round(v * 10000.0) / 10000.0 : 0.0;
  if (r == 0) r = 0;  // no "-0"
  fmt::format_to(std::back_inserter(out), "{}", r);
}

void append_int(std::string& out, const char* key, uint64_t v) {
  append_key(out, key);
  fmt::format_to(std::back_inserter(out), "{}", v);
}

void append_bool(std::string& out, const char* key, bool v) {
  append_key(out, key);
  out += v ? "true" : "false";
}

inline double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

constexpr size_t kNone = ~size_t{0};

// The one pass over the text: character classes, words (hashed into sc's word arrays), Latin
// letter runs (language counts, stop words), Han characters, lines and paragraphs (sc.lines,
// sc.paras). The later passes read its counters and sc.
struct TextPass {
  TextPass(std::string_view t, Scratch& s)
      : text(t), sc(s), p(reinterpret_cast<const unsigned char*>(t.data())), n(t.size()),
        word_cap(s.word_hash.size()) {
    sc.lines.clear();
    sc.paras.clear();
    if (sc.bmp_count.empty()) sc.bmp_count.assign(0x10000, 0);
    sc.bmp_seen.clear();
    sc.astral.clear();
    line.first_byte = kNone;
    para.first_byte = kNone;
  }

  std::string_view text;
  Scratch& sc;
  const unsigned char* p;
  size_t n;
  // word arrays written by index in the hot loop (cheaper than push_back), grown by doubling
  size_t nw = 0, word_cap;  // words so far, room
  uint64_t chars = 0, alpha_words = 0, han_words = 0, repl = 0, hashes = 0, ellipses = 0, dots = 0;
  uint64_t len_sum = 0, len_words = 0;
  bool curly = false;
  // the current non-Han word ("run")
  bool in_run = false, run_nonpunct = false, run_alpha = false, run_after_han = false;
  size_t run_start = 0;
  uint32_t run_cps = 0, run_lead = 0, run_trail = 0;
  // the current Latin letter run (language counts, stop words)
  uint64_t lat_key = 0;
  uint32_t lat_len = 0;
  bool lat_ascii = true;
  LanguageCounts lc;
  uint32_t gopher_mask = 0;
  uint64_t zh_mask = 0;
  char32_t prev_han = 0;  // the previous code point when it was Han, else 0
  Span line, para;
  uint32_t ascii_count[128] = {};  // entropy counts of ASCII code points (others: sc.bmp_count)

  void emit_word(uint64_t h, uint32_t len) {
    if (nw == word_cap) {
      word_cap = std::max<size_t>(1024, 2 * word_cap);
      sc.word_hash.resize(word_cap);
      sc.word_len.resize(word_cap);
    }
    sc.word_hash[nw] = h;
    sc.word_len[nw++] = len;
  }
  void end_word(size_t end_byte, bool next_is_han) {
    if (!in_run) return;
    in_run = false;
    if (!run_nonpunct && (run_after_han || next_is_han)) return;  // punctuation attached to Han
    if (run_alpha) ++alpha_words;
    if (run_nonpunct) { len_sum += run_cps - run_lead - run_trail; ++len_words; }
    emit_word(word_hash(text.data() + run_start, n - run_start, end_byte - run_start), run_cps);
  }
  void end_latin() {
    if (lat_len == 0) return;
    ++lc.latin_words;
    if (lat_ascii && lat_len <= 8) {
      const int id = english_stop_id(lat_key);
      if (id >= 0) {
        ++lc.en_stop_hits;
        if (id < kGopherStopWords) gopher_mask |= 1u << id;
      }
    }
    lat_key = 0; lat_len = 0; lat_ascii = true;
  }
  void flush_dots() { ellipses += dots / 3; dots = 0; }
  void end_para() {
    if (para.first_byte == kNone) return;
    sc.paras.push_back(para);
    para.first_byte = kNone;
  }
  void end_line() {
    if (line.first_byte == kNone) { end_para(); return; }  // a blank line ends the paragraph
    sc.lines.push_back(line);
    if (para.first_byte == kNone) { para.first_byte = line.first_byte; para.first_char = line.first_char; }
    para.end_byte = line.end_byte;
    para.end_char = line.end_char;
    line.first_byte = kNone;
  }
  void start_run(size_t b0, bool after_han) {
    in_run = true;
    run_start = b0;
    run_after_han = after_han;
    run_cps = run_lead = run_trail = 0;
  }

  void scan();
  size_t ascii_letters(size_t i);
  void han(char32_t cp, size_t b0, size_t i);
  void word_char(char32_t cp, uint8_t cls, size_t b0);
  void finish() {
    end_word(n, false);
    end_latin();
    flush_dots();
    end_line();
    end_para();
  }
};

// Fast path, most of the bytes of Latin text: the run of ASCII letters from i, with what the
// general path would do for each of them done once for the run. Returns where the run ends.
size_t TextPass::ascii_letters(size_t i) {
  const size_t b0 = i;
  if (line.first_byte == kNone) { line.first_byte = b0; line.first_char = chars; }
  flush_dots();
  if (!in_run) start_run(b0, prev_han != 0);
  prev_han = 0;
  do {
    const unsigned char c = p[i];
    ++ascii_count[c];
    if (lat_len < 8) lat_key |= static_cast<uint64_t>(c | 0x20) << (8 * lat_len);
    ++lat_len;
    ++i;
  } while (i < n && p[i] < 0x80 && kAsciiClass[p[i]] == kLetter);
  const uint32_t k = static_cast<uint32_t>(i - b0);
  chars += k;
  lc.latin += k;
  run_cps += k;
  run_nonpunct = run_alpha = true;
  run_trail = 0;
  line.end_byte = i;
  line.end_char = chars;
  return i;
}

// A Han character (bytes b0..i): a word of its own, and the Chinese stop words it completes.
void TextPass::han(char32_t cp, size_t b0, size_t i) {
  end_word(b0, true);
  end_latin();
  ++lc.han;
  ++han_words;
  ++alpha_words;
  emit_word(word_hash(text.data() + b0, n - b0, i - b0), 1);
  if (zh_stop_maybe(cp)) {
    int id = zh_stop_id(cp, 0);
    if (id >= 0) zh_mask |= uint64_t{1} << id;
    if (prev_han && zh_stop_maybe(prev_han) && (id = zh_stop_id(prev_han, cp)) >= 0) zh_mask |= uint64_t{1} << id;
  }
  prev_han = cp;
}

// Any other non-space code point (starting at b0): part of the current run, and of a Latin
// letter run or a script's count when it is a letter.
void TextPass::word_char(char32_t cp, uint8_t cls, size_t b0) {
  const bool after_han = prev_han != 0;  // a run starts after a space, a Han character or at 0
  prev_han = 0;
  if (!in_run) {
    start_run(b0, after_han);
    run_nonpunct = run_alpha = false;
  }
  ++run_cps;
  if (cls == kPunct) {
    if (run_nonpunct) ++run_trail; else ++run_lead;
  } else {
    run_nonpunct = true;
    run_trail = 0;
    if (cls == kLetter) run_alpha = true;
  }
  // Latin letter runs and script counts (the same definitions as language_detect)
  if (cls != kLetter) {
    end_latin();
    return;
  }
  const Script s = cp < 0x80 ? Script::kLatin : script_of_letter(cp);
  if (s != Script::kLatin) {
    end_latin();
    language_count_letter(lc, s);
    return;
  }
  ++lc.latin;
  if (cp < 0x80) {
    if (lat_len < 8) lat_key |= static_cast<uint64_t>(cp | 0x20) << (8 * lat_len);
  } else {
    lat_ascii = false;
  }
  ++lat_len;
}

void TextPass::scan() {
  for (size_t i = 0; i < n;) {
    const size_t b0 = i;
    if (p[i] < 0x80 && kAsciiClass[p[i]] == kLetter) {
      i = ascii_letters(i);
      continue;
    }
    char32_t cp;
    uint8_t cls;
    if (p[i] < 0x80) {
      cp = p[i++];
      cls = kAsciiClass[cp];
      ++ascii_count[cp];
    } else {
      cp = decode_multibyte(text, i);
      cls = is_han(cp) ? uint8_t{kLetter} : class_of(cp);
      if (cp < 0x10000) {
        if (sc.bmp_count[cp]++ == 0) sc.bmp_seen.push_back(static_cast<uint16_t>(cp));
      } else {
        sc.astral.push_back(cp);
      }
    }
    const uint64_t idx = chars++;
    if (cls == kSpace) {
      end_word(b0, false);
      end_latin();
      flush_dots();
      prev_han = 0;
      if (cp == '\n') end_line();
      continue;
    }
    if (line.first_byte == kNone) { line.first_byte = b0; line.first_char = idx; }
    line.end_byte = i;
    line.end_char = idx + 1;
    if (cp == '.') { ++dots; } else { flush_dots(); }
    if (cp < 0x80) {
      if (cp == '#') ++hashes;
      else if (cp == '{') curly = true;
    } else if (cp == U'…') {
      ++ellipses;
    } else if (cp == kReplacementChar) {
      ++repl;
    } else if (is_han(cp)) {
      han(cp, b0, i);
      continue;
    }
    word_char(cp, cls, b0);
  }
  finish();
}

// ---- size, language, Gopher quality ----
void size_and_gopher_quality(const TextPass& t, QualitySignals& q) {
  const uint64_t words = t.nw;
  q.chars = t.chars;
  q.words = words;
  q.han_words = t.han_words;
  q.lines = t.sc.lines.size();
  q.paragraphs = t.sc.paras.size();
  q.language = language_decide(t.lc);
  q.mean_word_length = ratio(static_cast<double>(t.len_sum), static_cast<double>(t.len_words));
  q.symbol_word_ratio = ratio(static_cast<double>(t.hashes + t.ellipses), static_cast<double>(words));
  q.alpha_word_fraction = ratio(static_cast<double>(t.alpha_words), static_cast<double>(words));
  q.stop_words_zh = std::popcount(t.zh_mask);
  q.stop_words_en = std::popcount(t.gopher_mask);
  q.stop_words = q.language.lang == "zh" ? q.stop_words_zh : q.stop_words_en;
  q.has_curly_brace = t.curly;
  q.replacement_char_fraction = ratio(static_cast<double>(t.repl), static_cast<double>(t.chars));
}

// ---- per line: bullets, ellipses, terminal punctuation, duplicates ----
void line_signals(std::string_view text, Scratch& sc, uint64_t chars, QualitySignals& q) {
  uint64_t bullets = 0, ellipsis_lines = 0, terminal = 0, dup_lines = 0, dup_line_chars = 0;
  sc.table.reset(sc.lines.size());
  for (const Span& s : sc.lines) {
    const std::string_view l = text.substr(s.first_byte, s.end_byte - s.first_byte);
    bullets += is_bullet_line(l);
    ellipsis_lines += ends_ellipsis(l);
    terminal += ends_terminal(l);
    if (!sc.table.insert(hash64(l))) { ++dup_lines; dup_line_chars += s.end_char - s.first_char; }
  }
  const double nl = static_cast<double>(sc.lines.size());
  q.bullet_line_fraction = ratio(static_cast<double>(bullets), nl);
  q.ellipsis_line_fraction = ratio(static_cast<double>(ellipsis_lines), nl);
  q.terminal_punct_line_fraction = ratio(static_cast<double>(terminal), nl);
  // Gopher / datatrove: duplicates are the second and later copies; their characters over
  // all characters of the text (len(text) in datatrove).
  q.dup_line_fraction = ratio(static_cast<double>(dup_lines), nl);
  q.dup_line_char_fraction = ratio(static_cast<double>(dup_line_chars), static_cast<double>(chars));
}

// ---- per paragraph: duplicates, terminal punctuation of the last line ----
void paragraph_signals(std::string_view text, Scratch& sc, uint64_t chars, QualitySignals& q) {
  uint64_t dup_paras = 0, dup_para_chars = 0, terminal_paras = 0;
  sc.table.reset(sc.paras.size());
  size_t last = 0;  // the last line of the paragraph: the one that ends where it ends
  for (const Span& s : sc.paras) {
    if (!sc.table.insert(hash64(text.substr(s.first_byte, s.end_byte - s.first_byte)))) {
      ++dup_paras;
      dup_para_chars += s.end_char - s.first_char;
    }
    while (sc.lines[last].end_byte < s.end_byte) ++last;
    const Span& l = sc.lines[last];
    terminal_paras += ends_terminal(text.substr(l.first_byte, l.end_byte - l.first_byte));
  }
  q.terminal_punct_para_fraction = ratio(static_cast<double>(terminal_paras), static_cast<double>(sc.paras.size()));
  q.dup_para_fraction = ratio(static_cast<double>(dup_paras), static_cast<double>(sc.paras.size()));
  q.dup_para_char_fraction = ratio(static_cast<double>(dup_para_chars), static_cast<double>(chars));
}

// ---- C4 phrases: search the ASCII-lower-cased text, map each hit to its line ----
void c4_phrase_signals(std::string_view text, Scratch& sc, QualitySignals& q) {
  if (sc.lines.empty()) return;
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  sc.lower.resize(n);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    w = lower8(w);
    std::memcpy(sc.lower.data() + i, &w, 8);
  }
  for (; i < n; ++i) {
    const unsigned char c = p[i];
    sc.lower[i] = static_cast<char>(c + ((static_cast<unsigned char>(c - 'A') < 26) << 5));
  }
  sc.line_flag.assign(sc.lines.size(), 0);
  mark_lines(sc, "javascript", 1);
  for (const char* pat : {"terms of use", "privacy policy", "隐私政策", "使用条款", "服务条款"})
    mark_lines(sc, pat, 2);
  mark_cookie_lines(sc, 2);
  for (uint8_t f : sc.line_flag) {
    q.javascript_lines += f & 1;
    q.policy_lines += (f >> 1) & 1;
  }
  q.has_lorem_ipsum = std::string_view(sc.lower).find("lorem ipsum") != std::string_view::npos;
}

// ---- character entropy: H = log2 N - (1/N) sum c log2 c ----
// Clears sc.bmp_count for the next document as it reads it.
double char_entropy(const uint32_t (&ascii_count)[128], Scratch& sc, uint64_t chars) {
  double s = 0;
  for (uint32_t c : ascii_count)
    if (c) s += c * std::log2(static_cast<double>(c));
  for (uint16_t cp : sc.bmp_seen) {
    const double c = sc.bmp_count[cp];
    s += c * std::log2(c);
    sc.bmp_count[cp] = 0;
  }
  std::sort(sc.astral.begin(), sc.astral.end());
  for (size_t i = 0; i < sc.astral.size();) {
    size_t j = i;
    while (j < sc.astral.size() && sc.astral[j] == sc.astral[i]) ++j;
    const double c = static_cast<double>(j - i);
    s += c * std::log2(c);
    i = j;
  }
  const double N = static_cast<double>(chars);
  return std::max(0.0, std::log2(N) - s / N);
}

// Counts the n-grams at sc.pos (sc.gram), sets sc.rep[i] when the one at i occurs more than
// once, and returns whether any does (the most frequent one is then sc.table's top).
bool count_ngrams(Scratch& sc) {
  sc.table.reset(sc.pos.size());
  for (uint32_t i : sc.pos) {
    sc.rep[i] = 0;
    uint32_t first;
    const uint32_t c = sc.table.add(sc.gram[i], i, first);
    if (c >= 2) sc.rep[i] = 1;
    if (c == 2) sc.rep[first] = 1;
  }
  return sc.table.top_count() >= 2;
}

// datatrove's find_all_duplicate over the candidates sc.pos: the characters of the n-grams
// (n = ng) already seen, the scan jumping n words after each.
uint64_t dup_ngram_chars(Scratch& sc, size_t ng) {
  sc.table.reset(sc.pos.size());
  uint64_t rep = 0;
  size_t next = 0;  // the scan's position: candidates before it were jumped over
  for (uint32_t i : sc.pos) {
    if (i < next) continue;
    if (!sc.table.insert(sc.gram[i])) {
      rep += sc.prefix[i + ng] - sc.prefix[i];
      next = i + ng;
    }
  }
  return rep;
}

// ---- Gopher repetition over words (Han characters are words, so Chinese gets character
// n-grams). An n-gram's characters are the code points of its words, separators not counted,
// over the code points of all words. datatrove divides by len(text) instead (whitespace
// included, about 15% lower on English); counting words only keeps Chinese and English alike.
//   top n-gram (n = 2..4): count of the most frequent n-gram (ties: the earliest) times its
//     characters; 0 when no n-gram occurs twice; capped at 1 (overlapping copies of "a a a").
//   duplicate n-grams (n = 5..10): datatrove's find_all_duplicate, a greedy left-to-right
//     scan: an n-gram already seen adds its characters and the scan jumps n words (so
//     overlapping copies are not counted twice); else it is remembered and the scan moves one.
//     Positions whose 5-gram occurs once in the document cannot start a repeat of any n >= 5,
//     so the scan skips them (same result, and free on ordinary prose).
void repetition_signals(Scratch& sc, size_t W, QualitySignals& q) {
  sc.prefix.resize(W + 1);
  sc.prefix[0] = 0;
  for (size_t i = 0; i < W; ++i) sc.prefix[i + 1] = sc.prefix[i] + sc.word_len[i];
  const double total = static_cast<double>(sc.prefix[W]);
  // Only positions whose (n-1)-gram occurs more than once can start an n-gram that does, so
  // each order counts the survivors of the one before (pos: ascending positions still alive).
  sc.gram.assign(sc.word_hash.begin(), sc.word_hash.begin() + W);
  sc.pos.resize(W);
  for (size_t i = 0; i < W; ++i) sc.pos[i] = static_cast<uint32_t>(i);
  sc.rep.assign(W, 0);
  for (size_t ng = 2; ng <= 10 && ng <= W; ++ng) {
    const size_t m = W - ng + 1;  // n-gram positions
    // keep the positions that are alive and still have room for an n-gram; extend their hashes
    size_t live = 0;
    for (uint32_t i : sc.pos) {
      if (i >= m || (ng > 2 && !sc.rep[i])) continue;
      sc.pos[live++] = i;
      sc.gram[i] = gram_combine(sc.gram[i], sc.word_hash[i + ng - 1]);
    }
    sc.pos.resize(live);
    if (live < 2) break;
    if (ng <= 5) {
      if (!count_ngrams(sc)) break;  // nothing repeats: no longer n-gram does either
      if (ng <= 4) {
        const uint32_t cnt = sc.table.top_count(), first = sc.table.top_first();
        const double c = static_cast<double>(cnt) * static_cast<double>(sc.prefix[first + ng] - sc.prefix[first]);
        q.top_ngram_char_fraction[ng - 2] = std::min(1.0, c / total);
        continue;
      }
      // from n = 5 on, the candidates stay those whose 5-gram repeats (a superset of those whose
      // n-gram does, which is all the greedy scan needs)
      size_t k = 0;
      for (uint32_t i : sc.pos)
        if (sc.rep[i]) sc.pos[k++] = i;
      sc.pos.resize(k);
      std::fill(sc.rep.begin(), sc.rep.end(), 1);
    }
    q.dup_ngram_char_fraction[ng - 5] = std::min(1.0, static_cast<double>(dup_ngram_chars(sc, ng)) / total);
  }
}

}  // namespace

namespace {

// The byte Windows-1252 (or Latin-1, for U+0080..U+009F) writes as cp when cp stands for a UTF-8
// continuation byte 0x80..0xBF; 0 otherwise.
uint8_t continuation_byte(char32_t cp) {
  if (cp >= 0x80 && cp <= 0xBF) return static_cast<uint8_t>(cp);
  static constexpr std::pair<char32_t, uint8_t> kCp1252[] = {
      {0x20AC, 0x80}, {0x201A, 0x82}, {0x0192, 0x83}, {0x201E, 0x84}, {0x2026, 0x85}, {0x2020, 0x86},
      {0x2021, 0x87}, {0x02C6, 0x88}, {0x2030, 0x89}, {0x0160, 0x8A}, {0x2039, 0x8B}, {0x0152, 0x8C},
      {0x017D, 0x8E}, {0x2018, 0x91}, {0x2019, 0x92}, {0x201C, 0x93}, {0x201D, 0x94}, {0x2022, 0x95},
      {0x2013, 0x96}, {0x2014, 0x97}, {0x02DC, 0x98}, {0x2122, 0x99}, {0x0161, 0x9A}, {0x203A, 0x9B},
      {0x0153, 0x9C}, {0x017E, 0x9E}, {0x0178, 0x9F}};
  for (const auto& [c, b] : kCp1252)
    if (c == cp) return b;
  return 0;
}

}  // namespace

uint64_t quality_mojibake_chars(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  uint64_t found = 0;
  int need = 0, run = 0;  // continuation characters still expected, characters in the run so far
  for (size_t i = 0; i < text.size();) {
    if (p[i] < 0x80) {
      need = 0, ++i;
      continue;
    }
    const char32_t cp = decode_multibyte(text, i);
    if (need > 0 && continuation_byte(cp)) {
      ++run;
      if (--need == 0) found += run;
      continue;
    }
    need = cp >= 0xC2 && cp <= 0xF4 ? (cp < 0xE0 ? 1 : cp < 0xF0 ? 2 : 3) : 0;
    run = 1;
  }
  return found;
}

void quality_compute(std::string_view text, const HtmlSignals* html, QualitySignals& q) {
  thread_local Scratch sc;
  q = QualitySignals{};
  if (html) q.html = *html;
  TextPass pass(text, sc);
  pass.scan();
  size_and_gopher_quality(pass, q);
  line_signals(text, sc, pass.chars, q);
  paragraph_signals(text, sc, pass.chars, q);
  c4_phrase_signals(text, sc, q);
  if (pass.chars > 0) q.char_entropy = char_entropy(pass.ascii_count, sc, pass.chars);
  repetition_signals(sc, pass.nw, q);
  q.mojibake_fraction = ratio(static_cast<double>(quality_mojibake_chars(text)), static_cast<double>(pass.chars));
  // A rare huge document (millions of words) must not pin its scratch to the thread for good.
  if (pass.nw > (size_t{1} << 20) || text.size() > (size_t{64} << 20)) sc.release();
}

void quality_set_language(QualitySignals& q, std::string lang, double score,
                          std::vector<std::pair<std::string, double>> top) {
  q.language.lang = std::move(lang);
  q.language.confidence = score;
  q.lang_top = std::move(top);
  q.stop_words = q.language.lang == "zh" ? q.stop_words_zh : q.stop_words_en;
}

void QualitySignals::append_json(std::string& out) const {
  out += "{\"lang\":";
  json_append_string(out, language.lang);
  append_num(out, "lang_score", language.confidence);
  if (!lang_top.empty()) {
    out += ",\"lang_top\":[";
    for (size_t i = 0; i < lang_top.size(); ++i) {
      out += i ? ",[" : "[";
      json_append_string(out, lang_top[i].first);
      out += fmt::format(",{}]", std::round(lang_top[i].second * 10000.0) / 10000.0);
    }
    out += "]";
  }
  append_int(out, "chars", chars);
  append_int(out, "words", words);
  append_int(out, "han_words", han_words);
  append_int(out, "lines", lines);
  append_int(out, "paragraphs", paragraphs);
  append_num(out, "mean_word_length", mean_word_length);
  append_num(out, "symbol_word_ratio", symbol_word_ratio);
  append_num(out, "bullet_line_fraction", bullet_line_fraction);
  append_num(out, "ellipsis_line_fraction", ellipsis_line_fraction);
  append_num(out, "alpha_word_fraction", alpha_word_fraction);
  append_int(out, "stop_words", stop_words);
  append_num(out, "dup_line_fraction", dup_line_fraction);
  append_num(out, "dup_para_fraction", dup_para_fraction);
  append_num(out, "dup_line_char_fraction", dup_line_char_fraction);
  append_num(out, "dup_para_char_fraction", dup_para_char_fraction);
  static const char* kTop[3] = {"top_2gram_char_fraction", "top_3gram_char_fraction", "top_4gram_char_fraction"};
  for (int k = 0; k < 3; ++k) append_num(out, kTop[k], top_ngram_char_fraction[k]);
  static const char* kDup[6] = {"dup_5gram_char_fraction", "dup_6gram_char_fraction", "dup_7gram_char_fraction",
                                "dup_8gram_char_fraction", "dup_9gram_char_fraction", "dup_10gram_char_fraction"};
  for (int k = 0; k < 6; ++k) append_num(out, kDup[k], dup_ngram_char_fraction[k]);
  append_num(out, "terminal_punct_line_fraction", terminal_punct_line_fraction);
  append_num(out, "terminal_punct_para_fraction", terminal_punct_para_fraction);
  append_int(out, "javascript_lines", javascript_lines);
  append_int(out, "policy_lines", policy_lines);
  append_bool(out, "lorem_ipsum", has_lorem_ipsum);
  append_bool(out, "curly_brace", has_curly_brace);
  append_num(out, "char_entropy", char_entropy);
  append_num(out, "replacement_char_fraction", replacement_char_fraction);
  append_num(out, "mojibake_fraction", mojibake_fraction);
  if (html.present) {
    append_num(out, "html_tag_density", html.tag_density);
    append_num(out, "html_link_text_ratio", html.link_text_ratio);
  }
  out.push_back('}');
}

}  // namespace smelt
