// Benchmark decontamination ([prep.decontaminate]): an index of the word n-grams of the evaluation
// sets the user names, and the check that a document shares one of them (GPT-3, Brown et al. 2020,
// appendix C; datatrove's decont). Built once at start, then read by every worker thread.
// Not the decision or the counts per file (prep's job) and not fuzzy matching (that is dedup).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "smelt/common/config.hpp"
#include "smelt/common/enum_names.hpp"
#include "smelt/common/status.hpp"

namespace smelt {

// What prep does with a document that shares an n-gram with a benchmark.
enum class DecontamAction { kDrop, kFlag };
inline constexpr EnumName<DecontamAction> kDecontamActionNames[] = {
    {DecontamAction::kDrop, "drop"}, {DecontamAction::kFlag, "flag"}};
inline std::span<const EnumName<DecontamAction>> enum_names(DecontamAction) { return kDecontamActionNames; }

struct DecontamConfig {
  bool enabled = true;                    // a no-op while files is empty
  std::vector<std::string> files;         // benchmark sets: text (a sample per paragraph) or JSONL
  int ngram = 13;                         // words per n-gram (GPT-3 and datatrove: 13)
  DecontamAction action = DecontamAction::kDrop;  // flag: kept, marked in the document's metadata
  std::vector<std::string> jsonl_fields;  // JSONL keys whose strings are indexed; empty: every string
  uint64_t max_index_mb = 1024;           // the index may not exceed this (MiB): error at build
};

// Largest ngram accepted (the rolling window is a fixed ring) and most files (ids are 16-bit).
inline constexpr int kDecontamMaxNgram = 64;
inline constexpr size_t kDecontamMaxFiles = 65535;

// Reads [prep.decontaminate] of root into c through its field table: wrong types and unknown keys
// go to errors; the values are judged by decontam_config_validate.
void decontam_config_read(const toml::table& root, DecontamConfig& c, std::vector<std::string>& errors);
toml::table decontam_config_to_toml(const DecontamConfig& c);  // the section with every key
struct SectionDoc;
SectionDoc decontam_config_doc();  // [prep.decontaminate]'s field table (docs check)
// Each key's limits, then: no empty path, no path twice, at most kDecontamMaxFiles files. One
// message per bad value naming the section and key; empty when c is usable. Files are opened by
// DecontamIndex::build, not here.
std::vector<std::string> decontam_config_validate(const DecontamConfig& c);

// The n-gram keys of a text in document order (repeats kept), exactly as the index computes them:
// words are dedup_normalise's tokens (NFKC + case fold; letters, marks and digits form words;
// punctuation, symbols and whitespace only separate them; each Han or kana character is a word),
// word hash = xxh3-64 of its bytes, key = hash_mix of the polynomial of n consecutive word hashes.
// A text of fewer than n words has no n-gram. Thread-safe.
void decontam_ngrams(std::string_view text_utf8, int n, std::vector<uint64_t>& out);

class DecontamIndex {
 public:
  // Reads every file once, in order (the file index is the position in c.files). Each file must
  // exist and yield at least one n-gram; a malformed JSONL line, a damaged compressed stream or an
  // index over max_index_mb is an error naming the file (and line). When c is disabled or names no
  // file, out is an empty index: find() returns file -1 without reading the text.
  static Status build(const DecontamConfig& c, std::unique_ptr<DecontamIndex>& out);

  struct Hit {
    int file = -1;            // index into files(), -1: no n-gram shared
    uint64_t ngram_hash = 0;  // the key of the first n-gram of text found in that file
  };
  // The lowest-index file sharing an n-gram with text (so a verdict does not depend on which
  // n-gram comes first). Thread-safe; no allocation once the thread's scratch has grown.
  Hit find(std::string_view text_utf8) const;

  const std::vector<std::string>& files() const { return files_; }
  int ngram() const { return n_; }
  uint64_t ngrams() const { return keys_.size(); }  // distinct n-grams over all files
  uint64_t bytes() const;                           // memory held by the lookup tables
  // xxh3 of the algorithm version, n, the file paths and the table contents: the resume
  // fingerprint (a change to a file that changes its n-grams changes it; whitespace does not).
  uint64_t content_hash() const { return content_hash_; }
  // "decontaminate: 2 files, 1234 13-grams, 0.02 MiB (14.0 B/n-gram), built in 0.01 s; a.jsonl:
  // 100 samples, 900 13-grams, 3 shorter than 13 words; ..."
  std::string summary() const;

  struct FileStats {
    uint64_t samples = 0;        // paragraphs (text) or objects with indexed text (JSONL)
    uint64_t short_samples = 0;  // samples of fewer than n words: not indexed
    uint64_t ngrams = 0;         // distinct n-grams of the file (shared ones count in each file)
  };
  const std::vector<FileStats>& file_stats() const { return stats_; }

 private:
  DecontamIndex() = default;
  // Looks keys[0..m) up (m <= kLookupBlock), lowering hit; false once hit is file 0.
  static constexpr size_t kLookupBlock = 64;
  bool lookup_block(const uint64_t* keys, size_t m, Hit& hit) const;
  void build_directory();          // dir_ and shift_ from keys_
  uint64_t compute_hash() const;   // content_hash_

  std::vector<std::string> files_;
  std::vector<FileStats> stats_;       // [file]
  int n_ = 13;
  std::vector<uint64_t> keys_;         // sorted, distinct
  std::vector<uint16_t> key_files_;    // [key]: the lowest file index holding it
  std::vector<uint32_t> dir_;          // [bucket]: first key whose top bits are >= bucket; + end
  int shift_ = 63;                     // bucket = key >> shift_
  uint64_t content_hash_ = 0;
  double build_s_ = 0;
};

}  // namespace smelt
