// Fast non-cryptographic hashing (xxHash3) used for ids, dedup and seeded decisions.
// Not for security; stable across runs, machines and versions of Smelt.
#pragma once
#include <cstdint>
#include <string_view>
#include <xxhash.h>

namespace smelt {

inline uint64_t hash64(std::string_view s, uint64_t seed = 0) {
  return XXH3_64bits_withSeed(s.data(), s.size(), seed);
}

// Mixes a 64-bit value (splitmix64 finaliser): cheap, bijective, good avalanche.
inline uint64_t hash_mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A uniform double in [0,1) from a 64-bit hash.
inline double hash_unit(uint64_t h) { return static_cast<double>(h >> 11) * 0x1.0p-53; }

}  // namespace smelt
