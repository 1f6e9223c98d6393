// Byte-level BPE encode of one pre-token: start from byte tokens and repeatedly merge the adjacent
// pair of lowest priority, leftmost first (Sennrich et al. 2016; the order tiktoken and HF use).
// Short pieces: an array scan. Long pieces (a run of Han characters can be 100 KB): a min-heap of
// candidate pairs over a linked list of symbols, O(n log n). Pair look-ups go through a per-thread
// cache and the PairMap's filter before the table. Not the pre-tokenizer, not training.
#include "smelt/tokenizer/bpe_encode.hpp"

#include <algorithm>
#include <cstring>
#include <queue>

namespace smelt {

namespace {
thread_local uint64_t t_lookups = 0;
constexpr size_t kShortPiece = 128;
}  // namespace

uint64_t bpe_debug_pair_lookups() { return t_lookups; }

void TokenMap::build(const std::vector<std::string>& vocab) {
  size_t cap = 16;
  while (cap < vocab.size() * 2) cap <<= 1;
  slots_.assign(cap, Slot{0, UINT32_MAX});
  mask_ = cap - 1;
  filter_.reset(cap / 8, ~0ull);  // all ones while building: find() passes
  offset_.resize(vocab.size() + 1);
  size_t total = 0;
  for (const auto& v : vocab) total += v.size();
  bytes_.clear();
  bytes_.reserve(total);
  for (uint32_t id = 0; id < vocab.size(); id++) {
    offset_[id] = static_cast<uint32_t>(bytes_.size());
    bytes_ += vocab[id];
  }
  offset_[vocab.size()] = static_cast<uint32_t>(bytes_.size());
  for (uint32_t id = 0; id < vocab.size(); id++) {
    const std::string& v = vocab[id];
    if (v.empty()) continue;
    uint64_t h = bpe_bytes_hash(v.data(), v.size());
    if (find(v, h) != UINT32_MAX) continue;  // duplicate: first id wins
    uint64_t i = h & mask_;
    while (slots_[i].id != UINT32_MAX) i = (i + 1) & mask_;
    slots_[i] = {static_cast<uint32_t>(h >> 32), id};
  }
  filter_.reset(cap / 8, 0);
  for (const auto& v : vocab)
    if (!v.empty()) filter_.add(bpe_bytes_hash(v.data(), v.size()));
}

void PairMap::reserve(size_t n) {
  size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  if (cap <= slots_.size()) return;
  std::vector<uint64_t> old;
  old.swap(slots_);
  slots_.assign(cap, kEmpty);
  mask_ = cap - 1;
  filter_.reset(cap / 8, 0);  // 16 bits a pair at the largest load
  for (uint64_t s : old) {
    if (s == kEmpty) continue;
    uint64_t h = mix(s >> 22), i = h & mask_;
    while (slots_[i] != kEmpty) i = (i + 1) & mask_;
    slots_[i] = s;
    filter_.add(h);
  }
}

void PairMap::insert(uint32_t a, uint32_t b, uint32_t priority, uint32_t merged) {
  if ((size_ + 1) * 2 > slots_.size()) reserve(std::max<size_t>(16, slots_.size()));
  if (!priority_is_id_ || priority != merged) {
    priority_is_id_ = false;  // every earlier pair's merged id equals its priority (filled in below)
    if (priority >= merged_.size()) {
      size_t old = merged_.size();
      merged_.resize(std::max<size_t>(priority + 1, old * 2));
      for (size_t p = old; p < merged_.size(); p++) merged_[p] = static_cast<uint32_t>(p);
    }
    merged_[priority] = merged;
  }
  const uint64_t k = key(a, b), s = (k << 22) | priority;
  filter_.add(mix(k));
  for (uint64_t i = mix(k) & mask_;; i = (i + 1) & mask_) {
    if ((slots_[i] >> 22) == k || slots_[i] == kEmpty) {
      size_ += slots_[i] == kEmpty;
      slots_[i] = s;
      return;
    }
  }
}

namespace {

// A per-thread, direct-mapped cache of pair -> priority in front of the PairMap: the pairs a text
// uses are few and repeat (the bytes of common characters, common words), and the PairMap of a
// large vocabulary is several MB, so most of its look-ups miss the CPU caches. 512 KB.
struct PairCache {
  static constexpr size_t kSlots = 1 << 16;
  static constexpr uint32_t kNoMerge = (1u << 22) - 1;
  uint64_t serial = 0;
  std::vector<uint64_t> slots;  // [hash >> 40 & (kSlots - 1)] -> key << 22 | priority; ~0: empty

  static size_t index(uint64_t h) { return (h >> 40) & (kSlots - 1); }
  // true and sets pri (PairMap::kNone: no merge) when the pair is cached
  bool get(uint64_t key, uint64_t h, uint32_t& pri) const {
    uint64_t s = slots[index(h)];
    if ((s >> 22) != key) return false;
    pri = static_cast<uint32_t>(s & kNoMerge);
    if (pri == kNoMerge) pri = PairMap::kNone;
    return true;
  }
  void put(uint64_t key, uint64_t h, uint32_t pri) {
    slots[index(h)] = (key << 22) | (pri == PairMap::kNone ? kNoMerge : pri);
  }
};

PairCache& pair_cache(const BpeTables& t) {
  thread_local PairCache c;
  if (c.serial != t.serial || c.slots.empty()) {
    c.slots.assign(PairCache::kSlots, ~0ull);
    c.serial = t.serial;
  }
  return c;
}

// priority of (a, b) through the cache
inline uint32_t lookup(const PairMap& pm, PairCache& c, uint32_t a, uint32_t b) {
  uint64_t k = PairMap::key(a, b), h = PairMap::hash(a, b);
  uint32_t pri;
  if (c.get(k, h, pri)) return pri;
  if (!pm.may_contain(h)) return PairMap::kNone;
  pri = pm.priority(a, b, h);
  c.put(k, h, pri);
  return pri;
}

// O(n^2) worst case, but n <= kShortPiece and the scan is over a small contiguous array. The first
// look-ups that miss the cache and the filter are all prefetched before any is read.
void merge_short(const BpeTables& t, uint32_t* ids, size_t n, std::vector<uint32_t>& out) {
  uint32_t pr[kShortPiece];  // [k] priority of the pair (ids[k], ids[k + 1])
  uint64_t hs[kShortPiece];
  uint32_t miss[kShortPiece];
  size_t nmiss = 0, np = n - 1;
  const PairMap& pm = t.pairs;
  PairCache& c = pair_cache(t);
  for (size_t k = 0; k < np; k++) {
    uint64_t h = PairMap::hash(ids[k], ids[k + 1]);
    if (c.get(PairMap::key(ids[k], ids[k + 1]), h, pr[k])) continue;
    if (!pm.may_contain(h)) { pr[k] = PairMap::kNone; continue; }
    hs[k] = h;
    miss[nmiss++] = static_cast<uint32_t>(k);
    pm.prefetch(h);
  }
  for (size_t j = 0; j < nmiss; j++) {
    size_t k = miss[j];
    pr[k] = pm.priority(ids[k], ids[k + 1], hs[k]);
    c.put(PairMap::key(ids[k], ids[k + 1]), hs[k], pr[k]);
  }
  t_lookups += n;
  while (np > 0) {
    size_t best = 0;
    uint32_t bp = pr[0];
    for (size_t k = 1; k < np; k++)
      if (pr[k] < bp) { bp = pr[k]; best = k; }
    if (bp == PairMap::kNone) break;
    ids[best] = pm.merged(bp);
    std::memmove(ids + best + 1, ids + best + 2, (n - best - 2) * sizeof(uint32_t));
    if (best + 2 < np)  // the pair at best+1 disappears
      std::memmove(pr + best + 1, pr + best + 2, (np - best - 2) * sizeof(uint32_t));
    n--;
    np--;
    if (best < np) pr[best] = lookup(pm, c, ids[best], ids[best + 1]);
    if (best > 0) pr[best - 1] = lookup(pm, c, ids[best - 1], ids[best]);
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
  struct Cand { uint32_t priority; int32_t pos; uint32_t left, right; };
  auto cmp = [](const Cand& a, const Cand& b) { return a.priority != b.priority ? a.priority > b.priority : a.pos > b.pos; };
  std::vector<Cand> heap;
  heap.reserve(n);
  PairCache& cache = pair_cache(t);
  auto push = [&](int32_t p) {
    if (p < 0 || sym[p].next < 0) return;
    uint32_t a = sym[p].id, b = sym[sym[p].next].id;
    t_lookups++;
    uint32_t pri = lookup(t.pairs, cache, a, b);
    if (pri == PairMap::kNone) return;
    heap.push_back({pri, p, a, b});
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
    s.id = t.pairs.merged(c.priority);
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
