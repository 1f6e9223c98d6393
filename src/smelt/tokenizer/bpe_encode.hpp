// The byte-level BPE merge engine: flat hash tables (bytes -> id, (id,id) -> (priority, merged id))
// and the merge loop over one pre-token. Internal to tokenizer/; Tokenizer wraps it.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace smelt {

// token bytes -> id, open addressing over the vocabulary's own strings
class TokenMap {
 public:
  void build(const std::vector<std::string>& vocab);
  // id of s, or UINT32_MAX
  uint32_t find(std::string_view s) const;

 private:
  struct Slot { uint64_t hash; uint32_t id; };
  std::vector<Slot> slots_;
  const std::vector<std::string>* vocab_ = nullptr;
  uint64_t mask_ = 0;
};

// (left id, right id) -> (priority, merged id); lower priority merges first
class PairMap {
 public:
  void reserve(size_t n);
  void insert(uint32_t a, uint32_t b, uint32_t priority, uint32_t merged);  // a later insert overwrites
  struct Hit { uint32_t priority, merged; };
  Hit find(uint32_t a, uint32_t b) const {  // priority UINT32_MAX: no merge
    uint64_t key = (static_cast<uint64_t>(a) << 32) | b;
    for (uint64_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return {s.priority, s.merged};
      if (s.key == kEmpty) return {UINT32_MAX, 0};
    }
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  static uint64_t mix(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33;
    return x;
  }
  void grow();
  struct Slot { uint64_t key = kEmpty; uint32_t priority = 0, merged = 0; };
  std::vector<Slot> slots_;
  uint64_t mask_ = 0;
  size_t size_ = 0;
};

struct BpeTables {
  uint32_t byte_id[256];        // single-byte token ids (UINT32_MAX: missing)
  TokenMap tokens;
  PairMap pairs;
  size_t max_token_bytes = 0;   // longest token: longer pieces skip the whole-piece look-up
  bool ignore_merges = false;   // a pre-token that is itself a token is emitted whole (tiktoken, Llama-3)
};

// Appends the ids of one pre-token. Bytes with no token are skipped (a complete byte-level
// vocabulary has all 256).
void bpe_encode_piece(const BpeTables& t, std::string_view piece, std::vector<uint32_t>& out);

// Pair look-ups made by this thread so far (for complexity tests).
uint64_t bpe_debug_pair_lookups();

}  // namespace smelt
