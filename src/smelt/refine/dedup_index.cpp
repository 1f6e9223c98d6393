// DedupIndex: the exact-hash set and one set per LSH band, consulted in document order by one
// thread. Not thread-safe and not a signature computer (dedup.cpp); sharding: top of dedup.cpp.
#include <algorithm>
#include <bit>

#include "smelt/refine/dedup.hpp"

namespace smelt {

namespace {

// Open-addressing set of non-zero 64-bit hashes (0 marks an empty slot), linear probing, load at
// most 3/4. Keys are already uniform hashes; a Fibonacci multiply picks the slot. 8 bytes per slot
// (10.7-21 bytes per key) against ~40 for std::unordered_set's nodes and buckets: bench/prep/
// dedup_bench.cpp measures both, and at 15 sets per kept document the difference is the point.
class FlatSet64 {
 public:
  bool contains(uint64_t k) const {
    if (slots_.empty()) return false;
    for (size_t i = slot(k);; i = (i + 1) & mask_) {
      uint64_t v = slots_[i];
      if (v == k) return true;
      if (v == 0) return false;
    }
  }
  void insert(uint64_t k) {
    if ((count_ + 1) * 4 > slots_.size() * 3) rehash(std::max<size_t>(256, slots_.size() * 2));
    if (place(k)) ++count_;
  }
  void reserve(size_t n) {
    size_t want = std::bit_ceil(std::max<size_t>(256, (n * 4 + 2) / 3));
    if (want > slots_.size()) rehash(want);
  }
  size_t size() const { return count_; }
  size_t memory_bytes() const { return slots_.capacity() * sizeof(uint64_t); }

 private:
  size_t slot(uint64_t k) const { return (k * 0x9e3779b97f4a7c15ULL) >> shift_; }
  bool place(uint64_t k) {  // true when k was new
    for (size_t i = slot(k);; i = (i + 1) & mask_) {
      if (slots_[i] == k) return false;
      if (slots_[i] == 0) { slots_[i] = k; return true; }
    }
  }
  void rehash(size_t cap) {  // cap: a power of two
    std::vector<uint64_t> old;
    old.swap(slots_);
    slots_.assign(cap, 0);
    mask_ = cap - 1;
    shift_ = 64 - std::countr_zero(cap);
    for (uint64_t k : old)
      if (k) place(k);
  }
  std::vector<uint64_t> slots_;
  size_t count_ = 0;
  size_t mask_ = 0;
  int shift_ = 64;
};

}  // namespace

struct DedupIndex::Impl {
  DedupConfig config;
  FlatSet64 exact;
  std::vector<FlatSet64> bands;  // [band]
  size_t kept = 0;
};

DedupIndex::DedupIndex(const DedupConfig& c) : impl_(std::make_shared<Impl>()) {
  impl_->config = c;
  if (c.near && c.bands > 0 && c.rows > 0) impl_->bands.resize(static_cast<size_t>(c.bands));
}

DedupIndex::Verdict DedupIndex::check_and_insert(const DedupSignature& s) {
  Impl& m = *impl_;
  bool use_exact = m.config.exact && s.exact != 0;  // 0: a document without tokens
  if (use_exact && m.exact.contains(s.exact)) return Verdict::kExact;
  size_t nb = std::min(m.bands.size(), s.bands.size());
  for (size_t j = 0; j < nb; ++j)
    if (s.bands[j] != 0 && m.bands[j].contains(s.bands[j])) return Verdict::kNear;
  if (use_exact) m.exact.insert(s.exact);
  for (size_t j = 0; j < nb; ++j)
    if (s.bands[j] != 0) m.bands[j].insert(s.bands[j]);
  ++m.kept;
  return Verdict::kUnique;
}

size_t DedupIndex::size() const { return impl_->kept; }

size_t DedupIndex::memory_bytes() const {
  size_t b = sizeof(Impl) + impl_->exact.memory_bytes() + impl_->bands.capacity() * sizeof(FlatSet64);
  for (const FlatSet64& t : impl_->bands) b += t.memory_bytes();
  return b;
}

void DedupIndex::reserve(size_t docs) {
  if (impl_->config.exact) impl_->exact.reserve(docs);
  for (FlatSet64& t : impl_->bands) t.reserve(docs);
}

const char* dedup_verdict_name(DedupIndex::Verdict v) {
  switch (v) {
    case DedupIndex::Verdict::kUnique: return "unique";
    case DedupIndex::Verdict::kExact: return "exact";
    case DedupIndex::Verdict::kNear: return "near";
  }
  return "unknown";
}

}  // namespace smelt
