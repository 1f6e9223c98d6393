// Byte-level BPE encode of one pre-token: start from byte tokens and repeatedly merge the adjacent
// pair of lowest priority, leftmost first (Sennrich et al. 2016; the order tiktoken and HF use).
// Short pieces: an array scan. Long pieces (a run of Han characters can be 100 KB): a min-heap of
// candidate pairs over a linked list of symbols, O(n log n). Not the pre-tokenizer, not training.
#include "smelt/tokenizer/bpe_encode.hpp"

#include <algorithm>
#include <cstring>
#include <queue>

#include "smelt/common/hash.hpp"

namespace smelt {

namespace {
thread_local uint64_t t_lookups = 0;
constexpr size_t kShortPiece = 128;
}  // namespace

uint64_t bpe_debug_pair_lookups() { return t_lookups; }

void TokenMap::build(const std::vector<std::string>& vocab) {
  vocab_ = &vocab;
  size_t cap = 16;
  while (cap < vocab.size() * 2) cap <<= 1;
  slots_.assign(cap, Slot{0, UINT32_MAX});
  mask_ = cap - 1;
  for (uint32_t id = 0; id < vocab.size(); id++) {
    if (vocab[id].empty()) continue;
    uint64_t h = hash64(vocab[id]);
    uint64_t i = h & mask_;
    for (;; i = (i + 1) & mask_) {
      if (slots_[i].id == UINT32_MAX) { slots_[i] = {h, id}; break; }
      if (slots_[i].hash == h && vocab[slots_[i].id] == vocab[id]) break;  // duplicate: first id wins
    }
  }
}

uint32_t TokenMap::find(std::string_view s) const {
  if (slots_.empty()) return UINT32_MAX;
  uint64_t h = hash64(s);
  for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
    const Slot& e = slots_[i];
    if (e.id == UINT32_MAX) return UINT32_MAX;
    if (e.hash == h && (*vocab_)[e.id] == s) return e.id;
  }
}

void PairMap::reserve(size_t n) {
  size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  if (cap <= slots_.size()) return;
  std::vector<Slot> old;
  old.swap(slots_);
  slots_.assign(cap, Slot{});
  mask_ = cap - 1;
  size_ = 0;
  for (const Slot& s : old)
    if (s.key != kEmpty) insert(static_cast<uint32_t>(s.key >> 32), static_cast<uint32_t>(s.key), s.priority, s.merged);
}

void PairMap::grow() { reserve(slots_.empty() ? 16 : slots_.size()); }

void PairMap::insert(uint32_t a, uint32_t b, uint32_t priority, uint32_t merged) {
  if ((size_ + 1) * 2 > slots_.size()) grow();
  uint64_t key = (static_cast<uint64_t>(a) << 32) | b;
  for (uint64_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.key == key) { s.priority = priority; s.merged = merged; return; }
    if (s.key == kEmpty) { s = {key, priority, merged}; size_++; return; }
  }
}

namespace {

// O(n^2) worst case, but n <= kShortPiece and the scan is over a small contiguous array.
void merge_short(const BpeTables& t, uint32_t* ids, size_t n, std::vector<uint32_t>& out) {
  uint32_t pr[kShortPiece], mg[kShortPiece];
  for (size_t k = 0; k + 1 < n; k++) {
    auto h = t.pairs.find(ids[k], ids[k + 1]);
    pr[k] = h.priority;
    mg[k] = h.merged;
  }
  t_lookups += n;
  while (n > 1) {
    size_t best = 0;
    uint32_t bp = pr[0];
    for (size_t k = 1; k + 1 < n; k++)
      if (pr[k] < bp) { bp = pr[k]; best = k; }
    if (bp == UINT32_MAX) break;
    ids[best] = mg[best];
    std::memmove(ids + best + 1, ids + best + 2, (n - best - 2) * sizeof(uint32_t));
    if (best + 3 <= n) {  // pairs: n-1 of them, the one at best+1 disappears
      std::memmove(pr + best + 1, pr + best + 2, (n - best - 3) * sizeof(uint32_t));
      std::memmove(mg + best + 1, mg + best + 2, (n - best - 3) * sizeof(uint32_t));
    }
    n--;
    if (best + 1 < n) {
      auto h = t.pairs.find(ids[best], ids[best + 1]);
      pr[best] = h.priority; mg[best] = h.merged;
    }
    if (best > 0) {
      auto h = t.pairs.find(ids[best - 1], ids[best]);
      pr[best - 1] = h.priority; mg[best - 1] = h.merged;
    }
    t_lookups += 2;
  }
  out.insert(out.end(), ids, ids + n);
}

// Symbols in a linked list indexed by their first byte's position; the heap holds candidate
// merges (priority, left position) and stale entries are skipped when popped.
void merge_long(const BpeTables& t, const uint32_t* init, size_t n, std::vector<uint32_t>& out) {
  struct Sym { uint32_t id; int32_t prev, next; };
  std::vector<Sym> sym(n);
  for (size_t k = 0; k < n; k++) sym[k] = {init[k], static_cast<int32_t>(k) - 1, k + 1 < n ? static_cast<int32_t>(k + 1) : -1};
  struct Cand { uint32_t priority; int32_t pos; uint32_t left, right, merged; };
  auto cmp = [](const Cand& a, const Cand& b) { return a.priority != b.priority ? a.priority > b.priority : a.pos > b.pos; };
  std::vector<Cand> heap;
  heap.reserve(n);
  auto push = [&](int32_t p) {
    if (p < 0 || sym[p].next < 0) return;
    uint32_t a = sym[p].id, b = sym[sym[p].next].id;
    t_lookups++;
    auto h = t.pairs.find(a, b);
    if (h.priority == UINT32_MAX) return;
    heap.push_back({h.priority, p, a, b, h.merged});
    std::push_heap(heap.begin(), heap.end(), cmp);
  };
  for (size_t k = 0; k + 1 < n; k++) push(static_cast<int32_t>(k));
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), cmp);
    Cand c = heap.back();
    heap.pop_back();
    Sym& s = sym[c.pos];
    if (s.id != c.left || s.next < 0 || sym[s.next].id != c.right) continue;  // stale
    int32_t r = s.next;
    s.id = c.merged;
    s.next = sym[r].next;
    if (s.next >= 0) sym[s.next].prev = c.pos;
    sym[r].id = UINT32_MAX;  // dead
    sym[r].next = -1;
    push(s.prev);
    push(c.pos);
  }
  for (int32_t p = 0; p >= 0; p = sym[p].next) out.push_back(sym[p].id);
}

}  // namespace

void bpe_encode_piece(const BpeTables& t, std::string_view piece, std::vector<uint32_t>& out) {
  const auto* b = reinterpret_cast<const unsigned char*>(piece.data());
  size_t n = piece.size();
  if (n == 1) {
    if (t.byte_id[b[0]] != UINT32_MAX) out.push_back(t.byte_id[b[0]]);
    return;
  }
  if (t.ignore_merges && n <= t.max_token_bytes) {
    uint32_t id = t.tokens.find(piece);
    if (id != UINT32_MAX) { out.push_back(id); return; }
  }
  if (n <= kShortPiece) {
    uint32_t ids[kShortPiece];
    size_t m = 0;
    for (size_t k = 0; k < n; k++)
      if (t.byte_id[b[k]] != UINT32_MAX) ids[m++] = t.byte_id[b[k]];
    if (m) merge_short(t, ids, m, out);
    return;
  }
  std::vector<uint32_t> ids;
  ids.reserve(n);
  for (size_t k = 0; k < n; k++)
    if (t.byte_id[b[k]] != UINT32_MAX) ids.push_back(t.byte_id[b[k]]);
  if (!ids.empty()) merge_long(t, ids.data(), ids.size(), out);
}

}  // namespace smelt
