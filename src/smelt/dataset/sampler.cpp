// Per-source document permutations: Fisher-Yates driven by a splitmix64 stream seeded by
// (seed, source name, epoch), so a source's order never depends on the other sources of the blend.
// Not here: which source comes next (blend.cpp) or how documents become rows (packing.cpp).
#include <fmt/format.h>

#include "smelt/common/hash.hpp"
#include "smelt/dataset/blend.hpp"

namespace smelt {

void sampler_permutation(uint64_t seed, std::string_view name, uint64_t epoch, uint64_t n,
                         std::vector<uint32_t>& out) {
  out.resize(n);
  for (uint64_t i = 0; i < n; ++i) out[i] = static_cast<uint32_t>(i);
  uint64_t state = hash64(name, seed) ^ hash_mix(epoch + 0x5eed);
  for (uint64_t i = n; i > 1; --i) {
    state = hash_mix(state);
    // Lemire's multiply-shift: an index in [0, i) without division (bias < i / 2^64).
    uint64_t j = static_cast<uint64_t>((static_cast<unsigned __int128>(state) * i) >> 64);
    std::swap(out[i - 1], out[j]);
  }
}

DocSampler::DocSampler(uint64_t seed, std::string name, uint64_t docs, bool shuffle)
    : seed_(seed), name_(std::move(name)), docs_(docs), shuffle_(shuffle) {}

const std::vector<uint32_t>& DocSampler::perm(uint64_t epoch) {
  for (auto& c : cache_)
    if (c.epoch == epoch) return c.order;
  // Replace the older of the two (epochs only move forward, so that is the smaller one).
  Cached& c = cache_[0].epoch == UINT64_MAX || (cache_[1].epoch != UINT64_MAX && cache_[0].epoch < cache_[1].epoch)
                  ? cache_[0] : cache_[1];
  sampler_permutation(seed_, name_, epoch, docs_, c.order);
  c.epoch = epoch;
  return c.order;
}

uint64_t DocSampler::doc_at(uint64_t epoch, uint64_t i) {
  if (!shuffle_) return i;
  return perm(epoch)[i];
}

}  // namespace smelt
