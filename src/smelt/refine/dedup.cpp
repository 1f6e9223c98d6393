// Dedup signatures: text normalisation, exact hash, MinHash over shingles, LSH band hashes, and the
// signature record. Not the index (dedup_index.cpp) and not the order of decisions (prep's job).
//
// How it works (Broder 1997, "On the resemblance and containment of documents"; LSH banding as in
// Leskovec, Rajaraman & Ullman, "Mining of Massive Datasets", ch. 3; defaults as in FineWeb):
//  1. Normalise: NFKC + Unicode case fold (utf8proc); letters, marks and digits form words;
//     punctuation, symbols and whitespace only separate words; default-ignorable characters (soft
//     hyphen, zero-width space) vanish; every Han character (and kana) is a token of its own, in
//     any document, so Chinese needs no word segmenter. Tokens are joined by one space. Two pages
//     that differ only in whitespace, case or punctuation normalise to the same string.
//  2. Exact: xxh3-64 of that string (0 is reserved for "no tokens").
//  3. Shingles: `shingle` consecutive tokens (`cjk_shingle` when the caller says the document is
//     Chinese), each hashed once with xxh3-64 over its bytes in the normalised string. A document
//     shorter than one shingle is one shingle of all its tokens.
//  4. MinHash: bands*rows (default 14*8 = 112) permutations over 32 bits: x = low 32 bits of the
//     shingle hash, h_i(x) = m((x ^ b_i) * a_i mod 2^32), m(y) = y ^ (y >> 16), a_i odd; a_i, b_i
//     from splitmix64 seeded with config.seed. The loop over the 112 minima is plain code in
//     blocks of 16 lanes that GCC vectorises with AVX2 (vpmulld, vpminud): 3.5x faster than the
//     same loop on 64-bit values, which AVX2 can neither multiply nor compare unsigned natively.
//     32 bits suffice: the keys are already xxh3 outputs, and two different shingles share a key
//     with probability 2^-32. Tests check on real text that the fraction of equal minima
//     estimates the Jaccard similarity without bias and with the binomial spread of 112
//     independent permutations.
//  5. LSH: band j hashes its `rows` minima with xxh3 seeded by j. Two documents become candidates
//     when any band hash matches. P(candidate | Jaccard s) = 1 - (1 - s^r)^b; for b=14, r=8:
//        s    0.30    0.50   0.60   0.65   0.70   0.72   0.75   0.80   0.85   0.90   0.95
//        P    0.0009  0.053  0.211  0.365  0.565  0.650  0.772  0.924  0.988  0.9996 1.0000
//     P = 1/2 at s = 0.685 (the often-quoted (1/b)^(1/r) = 0.72 is where the curve is steepest,
//     P = 0.65 there). With 5-word shingles, editing a fraction p of the words at random leaves
//     s ~ (1-f)/(1+f), f = 1-(1-p)^5: 1% edits -> s 0.91, 3% -> 0.75, 10% -> 0.42.
//  6. The index (dedup_index.cpp) keeps one hash set for the exact hashes and one per band, fed in
//     document order by one thread: the first document of a cluster is kept, later ones dropped.
//     Only kept documents are inserted, so a chain A~B~C with A and C dissimilar keeps A and C.
//
// Across tasks and machines: `smelt prep --task I --tasks N` dedups within each task only (each
// task holds its own DedupIndex); `smelt dedup` (global_dedup.hpp) removes duplicates across all of
// them with these same signatures, in stages that talk through files, dropping whole connected
// components (A~B~C drops B and C), unlike the streaming index.
// Memory of the single-process index: 15 open-addressing tables of 8-byte slots, 160-320 bytes
// per kept document (measured 175 on 2,820 kernel docs, 252 at 1M docs; std::unordered_set: 654),
// so 100M kept documents need 16-32 GB in one task. Details and measurements: docs/dedup.md.
#include "smelt/refine/dedup.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include <fmt/format.h>
#include <utf8proc.h>

#include "smelt/common/cjk.hpp"
#include "smelt/common/config_schema.hpp"
#include "smelt/common/hash.hpp"
#include "smelt/common/utf8.hpp"

namespace smelt {

namespace {

// Bump when normalisation, shingling or hashing changes: persisted signatures become stale.
constexpr uint64_t kDedupAlgorithmVersion = 1;
constexpr int kLanes = 16;  // permutations per vector block (two AVX2 registers of u32)

constexpr utf8proc_option_t kNfkcCasefold = static_cast<utf8proc_option_t>(
    UTF8PROC_STABLE | UTF8PROC_COMPAT | UTF8PROC_COMPOSE | UTF8PROC_CASEFOLD | UTF8PROC_IGNORE);

// Characters that are tokens on their own: Han (unified, extensions, compatibility, Kangxi
// radicals, U+3007) and kana, since these scripts do not separate words by spaces.
bool is_cjk_char(char32_t c) { return is_han(c) || is_kana(c) || is_han_symbol(c); }

// CJK characters whose NFKC form is another character (compatibility ideographs, Kangxi
// radicals, half-width katakana).
bool cjk_needs_map(char32_t c) {
  return (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F) ||
         (c >= 0x2F00 && c <= 0x2FD5) || (c >= 0xFF66 && c <= 0xFF9F);
}

struct AsciiTable {  // word[c]: ASCII letter or digit
  bool word[128];
  constexpr AsciiTable() : word() {
    for (int c = 0; c < 128; ++c)
      word[c] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  }
};
constexpr AsciiTable kAscii;

// Applies NFKC + case fold to out[from..] in place; keeps the bytes if utf8proc refuses them.
void map_tail(std::string& out, size_t from) {
  utf8proc_uint8_t* mapped = nullptr;
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(out.data() + from),
                                    static_cast<utf8proc_ssize_t>(out.size() - from), &mapped,
                                    kNfkcCasefold);
  if (n >= 0) {
    out.resize(from);
    out.append(reinterpret_cast<const char*>(mapped), static_cast<size_t>(n));
  }
  std::free(mapped);
}

// Tokeniser state over the normalised string: token t is norm[start[t], end[t]).
struct Tokens {
  std::string norm;
  std::vector<uint32_t> start, end;
};

void tokenise(std::string_view s, Tokens& t) {
  t.norm.clear();
  t.start.clear();
  t.end.clear();
  t.norm.reserve(s.size() + 16);
  std::string& norm = t.norm;
  bool in_word = false, word_ascii = true;
  size_t word_from = 0;
  auto begin_token = [&]() __attribute__((always_inline)) {
    if (!norm.empty()) norm.push_back(' ');
    word_from = norm.size();
  };
  auto end_token = [&]() __attribute__((always_inline)) {
    if (!word_ascii) map_tail(norm, word_from);
    if (norm.size() == word_from) {  // mapped to nothing: drop the separator too
      if (word_from > 0) norm.pop_back();
    } else {
      t.start.push_back(static_cast<uint32_t>(word_from));
      t.end.push_back(static_cast<uint32_t>(norm.size()));
    }
    in_word = false;
    word_ascii = true;
  };
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    unsigned char ch = static_cast<unsigned char>(s[i]);
    if (ch < 0x80) {  // ASCII: whole runs of word or non-word bytes at a time
      size_t j = i + 1;
      if (kAscii.word[ch]) {
        while (j < n && kAscii.word[static_cast<unsigned char>(s[j]) & 0x7f] &&
               static_cast<unsigned char>(s[j]) < 0x80)
          ++j;
        if (!in_word) { begin_token(); in_word = true; }
        size_t at = norm.size();
        norm.append(s.data() + i, j - i);
        for (char* p = norm.data() + at, *e = norm.data() + norm.size(); p < e; ++p)
          *p = static_cast<char>(*p + ((static_cast<unsigned char>(*p - 'A') < 26) << 5));
      } else {
        while (j < n && static_cast<unsigned char>(s[j]) < 0x80 &&
               !kAscii.word[static_cast<unsigned char>(s[j])])
          ++j;
        if (in_word) end_token();
      }
      i = j;
      continue;
    }
    size_t from = i;
    char32_t cp = utf8_next(s, i);
    if (is_cjk_char(cp)) {
      if (in_word) end_token();
      begin_token();
      in_word = true;
      word_ascii = !cjk_needs_map(cp);
      norm.append(s.data() + from, i - from);
      end_token();
      continue;
    }
    switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
      case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
      case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
      case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
      case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
        if (!in_word) { begin_token(); in_word = true; }
        word_ascii = false;
        norm.append(s.data() + from, i - from);
        break;
      case UTF8PROC_CATEGORY_CF:  // soft hyphen, zero-width space/joiner: not a word break
        break;
      default:  // punctuation, symbols, separators, controls, U+FFFD for invalid bytes
        if (in_word) end_token();
        break;
    }
  }
  if (in_word) end_token();
}

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = hash_mix(state);  // == splitmix64 output for the state advanced by the golden step
  state += 0x9e3779b97f4a7c15ULL;
  return z;
}

// Per-thread scratch, so a signature costs no allocation once a thread has warmed up.
struct Scratch {
  Tokens tokens;
  std::vector<uint64_t> shingles;
  alignas(32) uint32_t a[kDedupMaxPermutations];
  alignas(32) uint32_t b[kDedupMaxPermutations];
  alignas(32) uint32_t mins[kDedupMaxPermutations];
  uint64_t params_seed = 0;
  int params_count = -1;
};

Scratch& scratch() {
  thread_local std::unique_ptr<Scratch> s = std::make_unique<Scratch>();
  return *s;
}

// Very large documents leave big buffers behind; give them back.
void scratch_trim(Scratch& s) {
  constexpr size_t kKeep = size_t{64} << 20;
  if (s.tokens.norm.capacity() > kKeep) std::string().swap(s.tokens.norm);
  if (s.tokens.start.capacity() * 4 > kKeep) {
    std::vector<uint32_t>().swap(s.tokens.start);
    std::vector<uint32_t>().swap(s.tokens.end);
  }
  if (s.shingles.capacity() * 8 > kKeep) std::vector<uint64_t>().swap(s.shingles);
}

int shingle_len(bool cjk, const DedupConfig& c) {
  return std::max(1, cjk ? c.cjk_shingle : c.shingle);
}

void shingle_hashes(const Tokens& t, int k, std::vector<uint64_t>& out) {
  out.clear();
  size_t nt = t.start.size();
  if (nt == 0) return;
  std::string_view norm(t.norm);
  if (nt < static_cast<size_t>(k)) {
    out.push_back(hash64(norm));
    return;
  }
  out.reserve(nt - k + 1);
  for (size_t i = 0; i + k <= nt; ++i)
    out.push_back(hash64(norm.substr(t.start[i], t.end[i + k - 1] - t.start[i])));
}

// Fills s.mins[0 .. padded count) from s.shingles.
int minhash_compute(Scratch& s, const DedupConfig& c) {
  int np = std::clamp(c.bands * c.rows, 0, kDedupMaxPermutations);
  int blocks = (np + kLanes - 1) / kLanes;
  int padded = blocks * kLanes;
  if (s.params_seed != c.seed || s.params_count != padded) {
    uint64_t st = c.seed;
    for (int i = 0; i < padded; ++i) {
      uint64_t r = splitmix64(st);
      s.a[i] = static_cast<uint32_t>(r) | 1;
      s.b[i] = static_cast<uint32_t>(r >> 32);
    }
    s.params_seed = c.seed;
    s.params_count = padded;
  }
  std::fill(s.mins, s.mins + padded, std::numeric_limits<uint32_t>::max());
  for (uint64_t x64 : s.shingles) {
    const uint32_t x = static_cast<uint32_t>(x64);
    for (int k = 0; k < blocks; ++k) {  // fixed 16-lane body: GCC -O2 vectorises it with AVX2
      uint32_t* __restrict m = s.mins + k * kLanes;
      const uint32_t* __restrict a = s.a + k * kLanes;
      const uint32_t* __restrict b = s.b + k * kLanes;
      for (int j = 0; j < kLanes; ++j) {
        uint32_t h = (x ^ b[j]) * a[j];
        h ^= h >> 16;
        m[j] = m[j] < h ? m[j] : h;  // vpminud
      }
    }
  }
  return np;
}

}  // namespace

namespace {

using D = DedupConfig;

const Schema<DedupConfig>& dedup_schema() {
  static const Schema<DedupConfig> s{
      "prep.dedup",
      {field("enabled", &D::enabled, "false: no dedup"),
       field("exact", &D::exact, "exact-duplicate check (hash of the normalised text)"),
       field("near", &D::near, "MinHash LSH check (when false, signatures carry no bands)"),
       field("shingle", &D::shingle, "words per shingle", above(0, "words per shingle; FineWeb uses 5")),
       field("cjk_shingle", &D::cjk_shingle, "characters per shingle for documents detected as Chinese",
             above(0, "characters per shingle")),
       field("bands", &D::bands, "LSH bands", above(0, "FineWeb uses 14")),
       field("rows", &D::rows, "min-hashes per band (bands x rows permutations)", above(0, "FineWeb uses 8")),
       field("seed", &D::seed, "seeds the permutations")}};
  return s;
}

}  // namespace

void dedup_config_read(const toml::table& root, DedupConfig& c, std::vector<std::string>& errors) {
  schema_read_keys(dedup_schema(), root, c, errors);
}

toml::table dedup_config_to_toml(const DedupConfig& c) { return schema_to_toml(dedup_schema(), c); }

SectionDoc dedup_config_doc() { return section_doc(dedup_schema()); }

std::vector<std::string> dedup_config_validate(const DedupConfig& c) {
  std::vector<std::string> e;
  schema_check(dedup_schema(), c, e);
  if (c.bands > 0 && c.rows > 0 &&
      static_cast<int64_t>(c.bands) * c.rows > kDedupMaxPermutations)
    e.push_back(fmt::format("[prep.dedup] bands x rows = {} exceeds {} permutations",
                            static_cast<int64_t>(c.bands) * c.rows, kDedupMaxPermutations));
  return e;
}

uint64_t dedup_config_hash(const DedupConfig& c) {
  std::string key = fmt::format("smelt-dedup v{} shingle={} cjk_shingle={} bands={} rows={} "
                                "seed={} exact={} near={}", kDedupAlgorithmVersion, c.shingle,
                                c.cjk_shingle, c.bands, c.rows, c.seed, c.exact, c.near);
  return hash64(key);
}

void dedup_normalise(std::string_view text_utf8, std::string& out) {
  Scratch& s = scratch();
  tokenise(text_utf8, s.tokens);
  out = s.tokens.norm;
  scratch_trim(s);
}

void dedup_shingles(std::string_view text_utf8, bool cjk, const DedupConfig& c,
                    std::vector<uint64_t>& out) {
  Scratch& s = scratch();
  tokenise(text_utf8, s.tokens);
  shingle_hashes(s.tokens, shingle_len(cjk, c), out);
  scratch_trim(s);
}

void dedup_minhash(std::string_view text_utf8, bool cjk, const DedupConfig& c,
                   std::vector<uint32_t>& out) {
  Scratch& s = scratch();
  tokenise(text_utf8, s.tokens);
  shingle_hashes(s.tokens, shingle_len(cjk, c), s.shingles);
  int np = minhash_compute(s, c);
  out.assign(s.mins, s.mins + np);
  scratch_trim(s);
}

void dedup_signature(std::string_view text_utf8, bool cjk, const DedupConfig& c,
                     DedupSignature& out) {
  Scratch& s = scratch();
  tokenise(text_utf8, s.tokens);
  out.bands.clear();
  bool empty = s.tokens.start.empty();
  out.exact = empty ? 0 : hash64(s.tokens.norm);
  if (!empty && out.exact == 0) out.exact = 1;  // 0 means "no tokens"
  if (c.near && c.bands > 0 && c.rows > 0) {
    out.bands.assign(static_cast<size_t>(c.bands), 0);
    if (!empty) {
      shingle_hashes(s.tokens, shingle_len(cjk, c), s.shingles);
      int np = minhash_compute(s, c);
      int bands = np / c.rows;
      for (int j = 0; j < bands; ++j) {
        uint64_t h = XXH3_64bits_withSeed(s.mins + static_cast<size_t>(j) * c.rows,
                                          sizeof(uint32_t) * c.rows, static_cast<uint64_t>(j));
        out.bands[j] = h == 0 ? 1 : h;
      }
    }
  }
  scratch_trim(s);
}

double dedup_candidate_probability(double s, int bands, int rows) {
  return 1.0 - std::pow(1.0 - std::pow(s, rows), bands);
}

double dedup_threshold(int bands, int rows) {
  return std::pow(1.0 - std::pow(0.5, 1.0 / bands), 1.0 / rows);
}

static_assert(std::endian::native == std::endian::little, "signature records assume little-endian");

void dedup_signature_write(const DedupSignature& s, std::string& out) {
  uint32_t n = static_cast<uint32_t>(s.bands.size());
  size_t at = out.size();
  out.resize(at + 12 + 8 * static_cast<size_t>(n));
  char* p = out.data() + at;
  std::memcpy(p, &n, 4);
  std::memcpy(p + 4, &s.exact, 8);
  if (n) std::memcpy(p + 12, s.bands.data(), 8 * static_cast<size_t>(n));
}

bool dedup_signature_read(std::string_view in, size_t& pos, DedupSignature& s) {
  if (pos > in.size() || in.size() - pos < 12) return false;
  uint32_t n = 0;
  std::memcpy(&n, in.data() + pos, 4);
  if (n > static_cast<uint32_t>(kDedupMaxPermutations)) return false;
  size_t len = 12 + 8 * static_cast<size_t>(n);
  if (in.size() - pos < len) return false;
  std::memcpy(&s.exact, in.data() + pos + 4, 8);
  s.bands.resize(n);
  if (n) std::memcpy(s.bands.data(), in.data() + pos + 12, 8 * static_cast<size_t>(n));
  pos += len;
  return true;
}

}  // namespace smelt
