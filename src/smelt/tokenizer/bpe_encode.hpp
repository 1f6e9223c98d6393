// The byte-level BPE merge engine: flat hash tables (bytes -> id, (id,id) -> priority) and the merge
// loop over one pre-token. Internal to tokenizer/; Tokenizer wraps it.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace smelt {

// A hash of short byte strings, inlined (token look-ups hash millions of 2-10 byte strings).
inline uint64_t bpe_bytes_hash(const char* p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ULL ^ (n * 0xff51afd7ed558ccdULL);
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 31;
  }
  uint64_t w = 0;
  if (n & 4) { uint32_t v; std::memcpy(&v, p, 4); w = v; p += 4; }
  if (n & 2) { uint16_t v; std::memcpy(&v, p, 2); w = (w << 16) | v; p += 2; }
  if (n & 1) w = (w << 8) | static_cast<unsigned char>(*p);
  h = (h ^ w) * 0x94d049bb133111ebULL;
  return h ^ (h >> 29);
}

// a == b for n bytes; inlined for the short strings of token look-ups
inline bool bpe_bytes_equal(const char* a, const char* b, size_t n) {
  for (; n >= 8; a += 8, b += 8, n -= 8) {
    uint64_t x, y;
    std::memcpy(&x, a, 8);
    std::memcpy(&y, b, 8);
    if (x != y) return false;
  }
  for (; n; a++, b++, n--)
    if (*a != *b) return false;
  return true;
}

// A filter in front of a hash table: two bits in one 64-bit word per key (the word picked by the
// hash's bits from kShift up, the two bits by its top 12), so most look-ups of absent keys stop at
// one word of a small array that stays in cache while the table does not.
template <int kShift>
class BpeFilter {
 public:
  void reset(size_t words, uint64_t fill) {  // words: a power of two (1 at least)
    words_.assign(words < 1 ? 1 : words, fill);
    mask_ = words_.size() - 1;
  }
  void add(uint64_t h) { words_[(h >> kShift) & mask_] |= bits(h); }
  bool may_contain(uint64_t h) const { return (words_[(h >> kShift) & mask_] & bits(h)) == bits(h); }

 private:
  static uint64_t bits(uint64_t h) { return (1ull << (h >> 58)) | (1ull << ((h >> 52) & 63)); }
  std::vector<uint64_t> words_ = std::vector<uint64_t>(1, 0);
  uint64_t mask_ = 0;
};

// token bytes -> id: open addressing over 8-byte slots (hash tag, id), the vocabulary's bytes kept
// in one arena so a probe touches the table, one offset and the bytes; a small filter in front
// answers most look-ups of strings that are not tokens.
class TokenMap {
 public:
  void build(const std::vector<std::string>& vocab);
  // id of s, or UINT32_MAX
  uint32_t find(std::string_view s) const { return find(s, bpe_bytes_hash(s.data(), s.size())); }
  uint32_t find(std::string_view s, uint64_t h) const {
    if (!filter_.may_contain(h)) return UINT32_MAX;  // most pieces looked up whole are not tokens
    const uint32_t tag = static_cast<uint32_t>(h >> 32);
    for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot e = slots_[i];
      if (e.id == UINT32_MAX) return UINT32_MAX;
      if (e.tag == tag && offset_[e.id + 1] - offset_[e.id] == s.size() &&
          bpe_bytes_equal(bytes_.data() + offset_[e.id], s.data(), s.size()))
        return e.id;
    }
  }
  std::string_view bytes(uint32_t id) const { return {bytes_.data() + offset_[id], offset_[id + 1] - offset_[id]}; }

 private:
  struct Slot { uint32_t tag, id; };
  std::vector<Slot> slots_ = std::vector<Slot>(1, Slot{0, UINT32_MAX});
  BpeFilter<20> filter_;  // 2 bits set a token, 16-32 bits a token
  std::vector<uint32_t> offset_;  // [id] start of token id in bytes_, [id + 1] its end
  std::string bytes_;
  uint64_t mask_ = 0;
};

// (left id, right id) -> priority (lower merges first) and priority -> merged id. One 8-byte slot
// per pair: left and right ids (21 bits each) and the priority (22 bits), so o200k's 446k pairs
// take 8 MB and a look-up is one cache line. Vocabularies up to 2M ids, up to 4M priorities.
class PairMap {
 public:
  static constexpr uint32_t kMaxId = (1u << 21) - 2, kMaxPriority = (1u << 22) - 2;
  static constexpr uint32_t kNone = UINT32_MAX;
  void reserve(size_t n);
  // a later insert of the same pair overwrites; a <= kMaxId, b <= kMaxId, priority <= kMaxPriority
  void insert(uint32_t a, uint32_t b, uint32_t priority, uint32_t merged);
  // a pair's hash picks its slot here and in a thread's PairCache
  static uint64_t hash(uint32_t a, uint32_t b) { return mix(key(a, b)); }
  static uint64_t key(uint32_t a, uint32_t b) { return (static_cast<uint64_t>(a) << 21) | b; }
  void prefetch(uint64_t h) const { __builtin_prefetch(&slots_[h & mask_]); }
  // false: the pair is certainly not in the map. A filter of 16 bits a pair (two bits set in one
  // 64-bit word, about 1% false positives) that stays in cache while the table does not, for the
  // many adjacent pairs that are not merges.
  bool may_contain(uint64_t h) const { return filter_.may_contain(h); }
  // priority of the pair, or kNone; h: hash(a, b)
  uint32_t priority(uint32_t a, uint32_t b, uint64_t h) const {
    const uint64_t k = key(a, b);
    for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
      const uint64_t s = slots_[i];
      if ((s >> 22) == k) return static_cast<uint32_t>(s & kPrioMask);
      if (s == kEmpty) return kNone;
    }
  }
  uint32_t priority(uint32_t a, uint32_t b) const { return priority(a, b, hash(a, b)); }
  // the id a merge of this priority yields
  uint32_t merged(uint32_t priority) const { return priority_is_id_ ? priority : merged_[priority]; }
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~0ull, kPrioMask = (1ull << 22) - 1;
  static uint64_t mix(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33;
    return x;
  }
  std::vector<uint64_t> slots_ = std::vector<uint64_t>(1, kEmpty);
  BpeFilter<22> filter_;
  std::vector<uint32_t> merged_;  // [priority] -> merged id, unless priority_is_id_
  bool priority_is_id_ = true;
  uint64_t mask_ = 0;
  size_t size_ = 0;
};

struct BpeTables {
  uint32_t byte_id[256];        // single-byte token ids (UINT32_MAX: missing)
  TokenMap tokens;
  PairMap pairs;
  size_t max_token_bytes = 0;   // longest token: longer pieces skip the whole-piece look-up
  uint64_t serial = 0;          // unique per built table (keys the per-thread caches)
  bool ignore_merges = false;   // a pre-token that is itself a token is emitted whole (tiktoken, Llama-3)
};

// Appends the ids of one pre-token. Bytes with no token are skipped (a complete byte-level
// vocabulary has all 256).
void bpe_encode_piece(const BpeTables& t, std::string_view piece, std::vector<uint32_t>& out);

// Pair look-ups made by this thread so far (for complexity tests).
uint64_t bpe_debug_pair_lookups();

}  // namespace smelt
