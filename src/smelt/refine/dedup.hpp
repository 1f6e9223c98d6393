// Deduplication: exact (hash of normalised text) and near-duplicate MinHash LSH. Signatures are
// computed in parallel (pure functions); the index is consulted in document order by one thread,
// so the first document of every cluster is the one kept and reruns are byte-identical.
// Not the dedup across tasks and machines: that is global_dedup.hpp (`smelt dedup`).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "smelt/common/config.hpp"

namespace smelt {

struct DedupConfig {
  bool enabled = true;  // prep's switch: false skips dedup (signatures, index)
  bool exact = true;
  bool near = true;
  int shingle = 5;      // words per shingle (characters per shingle for Chinese: see cjk_shingle)
  int cjk_shingle = 5;  // characters per shingle when the document is Chinese
  int bands = 14;
  int rows = 8;         // bands x rows MinHash permutations
  uint64_t seed = 1;
};

// Largest bands*rows accepted (a signature is computed in a fixed scratch of this many lanes).
inline constexpr int kDedupMaxPermutations = 4096;

// Reads [prep.dedup] of root into c through its field table: wrong types and unknown keys go to
// errors; the values are judged by dedup_config_validate.
void dedup_config_read(const toml::table& root, DedupConfig& c, std::vector<std::string>& errors);
// The section with every key (the resolved config).
toml::table dedup_config_to_toml(const DedupConfig& c);
struct SectionDoc;
SectionDoc dedup_config_doc();  // [prep.dedup]'s field table (docs check)

// Each key's limits from the table (shingle sizes, bands and rows > 0), then bands x rows against
// kDedupMaxPermutations. One message per bad value, naming the section and key ("[prep.dedup]
// bands = 0: must be > 0 ..."); empty when c is usable.
std::vector<std::string> dedup_config_validate(const DedupConfig& c);

// Fingerprint of everything that shapes a signature (normalisation version, shingle sizes, bands,
// rows, seed). Store it beside persisted signatures: a resumed run must refuse a different one.
uint64_t dedup_config_hash(const DedupConfig& c);

struct DedupSignature {
  uint64_t exact = 0;               // hash of the normalised text
  std::vector<uint64_t> bands;      // one hash per LSH band (empty when near is off)
};

// Computes the signature; cjk selects character shingles. Thread-safe.
// A document with no tokens (empty, or only punctuation/space) gets exact = 0 and every band 0;
// the index passes such a document as kUnique without storing it (filters judge empty pages).
void dedup_signature(std::string_view text_utf8, bool cjk, const DedupConfig& c, DedupSignature& out);

// The steps of dedup_signature, exposed for tests, tools and docs. Thread-safe.
// Normalised text: NFKC + case fold, tokens (words; each Han/kana character alone) joined by one
// space; punctuation, symbols and whitespace only separate tokens; digits are kept.
void dedup_normalise(std::string_view text_utf8, std::string& out);
// xxh3 hash of every shingle in document order (repeats kept): shingle (cjk: cjk_shingle)
// consecutive tokens; one shingle of all tokens when the document is shorter; none when empty.
void dedup_shingles(std::string_view text_utf8, bool cjk, const DedupConfig& c,
                    std::vector<uint64_t>& out);
// The bands*rows 32-bit min-hashes (all UINT32_MAX for an empty document).
void dedup_minhash(std::string_view text_utf8, bool cjk, const DedupConfig& c,
                   std::vector<uint32_t>& out);

// LSH S-curve: probability that two documents of Jaccard similarity s share at least one band,
// 1 - (1 - s^rows)^bands; and the similarity at which that probability is 1/2.
double dedup_candidate_probability(double s, int bands, int rows);
double dedup_threshold(int bands, int rows);

// Persisting signatures (resumable runs: replaying the stored signatures of earlier documents
// through check_and_insert, in order, rebuilds the same index). Record, little-endian:
//   u32 band_count | u64 exact | u64 band[band_count]       (12 + 8*bands bytes)
void dedup_signature_write(const DedupSignature& s, std::string& out);  // appends one record
// Reads the record at in[pos] and advances pos; false (pos unchanged) when truncated or invalid.
bool dedup_signature_read(std::string_view in, size_t& pos, DedupSignature& s);

class DedupIndex {
 public:
  explicit DedupIndex(const DedupConfig& c);
  enum class Verdict { kUnique, kExact, kNear };
  // Unique documents are inserted; duplicates are not (the cluster keeps its first member).
  // kExact when the exact hash was kept before; else kNear when any band hash equals that band's
  // hash in a kept document; else kUnique. Only keys present in the config are consulted.
  Verdict check_and_insert(const DedupSignature& s);
  size_t size() const;          // documents judged kUnique so far
  size_t memory_bytes() const;  // bytes held by the hash tables
  void reserve(size_t docs);    // sizes the tables for docs documents (avoids rehash peaks)

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

const char* dedup_verdict_name(DedupIndex::Verdict v);  // "unique", "exact", "near"

}  // namespace smelt
