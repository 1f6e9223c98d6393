// Deduplication: exact (hash of normalised text) and near-duplicate MinHash LSH. Signatures are
// computed in parallel (pure functions); the index is consulted in document order by one thread,
// so the first document of every cluster is the one kept and reruns are byte-identical.
// How dedup shards across machines: see the comment at the top of dedup.cpp.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "smelt/common/config.hpp"

namespace smelt {

struct DedupConfig {
  bool exact = true;
  bool near = true;
  int shingle = 5;      // words per shingle (characters per shingle for Chinese: see cjk_shingle)
  int cjk_shingle = 5;  // characters per shingle when the document is Chinese
  int bands = 14;
  int rows = 8;         // bands x rows MinHash permutations
  uint64_t seed = 1;
};

// Reads [prep.dedup] keys into c.
void dedup_config_read(ConfigSection& s, DedupConfig& c);

struct DedupSignature {
  uint64_t exact = 0;               // hash of the normalised text
  std::vector<uint64_t> bands;      // one hash per LSH band (empty when near is off)
};

// Computes the signature; cjk selects character shingles. Thread-safe.
void dedup_signature(std::string_view text_utf8, bool cjk, const DedupConfig& c, DedupSignature& out);

class DedupIndex {
 public:
  explicit DedupIndex(const DedupConfig& c);
  enum class Verdict { kUnique, kExact, kNear };
  // Unique documents are inserted; duplicates are not (the cluster keeps its first member).
  Verdict check_and_insert(const DedupSignature& s);
  size_t size() const;
  size_t memory_bytes() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace smelt
