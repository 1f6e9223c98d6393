// The files between global dedup's stages (internal to global_dedup*.cpp): fixed-size 16-byte
// records behind a header, and a footer with the record count and an xxh3 of the records, so a
// reader refuses a missing, truncated, corrupted or foreign file by name. Also the sorted runs the
// buckets stage spills when its tuples pass the memory budget. Not the stages (global_dedup.cpp).
//
// Layout, little-endian: header "SMELTGD1" | u32 type | u32 record bytes (16) | u64 fingerprint |
// u64 unit; records; footer u64 count | u64 xxh3-64 of the records | "SMELTEND". 32 + 16n + 24 bytes.
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <xxhash.h>

#include "smelt/common/files.hpp"
#include "smelt/common/status.hpp"
#include "smelt/refine/global_dedup.hpp"
#include "smelt/text/doc_reader.hpp"

namespace smelt::gd {

// One record: two 64-bit words. What they mean depends on the file type:
//   kSignatures: a = key hash, b = doc id | key kind << 56 (0 exact, 1 url, 2 + j band j)
//   kPairs:      a = the first doc of a key's run, b = another doc | GdKind << 56
//   kLabels:     a = doc | GdKind << 56, b = the smallest doc of its component in the partition
//   kDrops:      a = dropped doc | GdKind << 56, b = its survivor (the component's smallest doc)
//   kSpill:      as kSignatures, sorted
struct Rec {
  uint64_t a = 0, b = 0;
};
enum class FileType : uint32_t { kSignatures = 1, kPairs = 2, kLabels = 3, kDrops = 4, kSpill = 5 };
const char* file_type_name(FileType t);

inline constexpr uint64_t kDocMask = (1ull << 56) - 1;
inline uint64_t low56(uint64_t w) { return w & kDocMask; }
inline uint8_t top8(uint64_t w) { return static_cast<uint8_t>(w >> 56); }

// Streams records into `path` (beside it until finish renames it into place).
class Writer {
 public:
  Status open(const std::string& path, FileType type, uint64_t fingerprint, uint64_t unit);
  Status add(const Rec& r) {
    buf_.push_back(r);
    return buf_.size() >= kBuffer ? flush() : Status::ok();
  }
  Status finish();  // footer, fsync, rename
  void abort() { file_.abort(); }
  uint64_t count() const { return count_ + buf_.size(); }  // records added so far
  uint64_t bytes() const { return 32 + 16 * count() + 24; }

 private:
  static constexpr size_t kBuffer = 4096;
  Status flush();
  AtomicFile file_;
  std::vector<Rec> buf_;
  XXH3_state_t* state_ = nullptr;
  uint64_t count_ = 0;

 public:
  Writer() = default;
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;
  ~Writer();
};

// Reads one file's records in blocks; the checksum is checked when the last block is read (call
// read until it returns 0 records: a file is trusted only when that returned ok).
class Reader {
 public:
  Reader() = default;
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;
  ~Reader();
  // Checks the header (magic, type, record size, fingerprint) and the size against the footer's count.
  Status open(const std::string& path, FileType type, uint64_t fingerprint);
  // Up to max records into out (replacing its content); 0 at the end, after the checksum passed.
  Status read(std::vector<Rec>& out, size_t max);
  uint64_t count() const { return count_; }
  uint64_t unit() const { return unit_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
  uint64_t count_ = 0, done_ = 0, unit_ = 0, checksum_ = 0;
  XXH3_state_t* state_ = nullptr;
};

// A whole file into memory (labels, drops, pairs of one bucket).
Status read_all(const std::string& path, FileType type, uint64_t fingerprint, std::vector<Rec>& out);

// ---- the fixed facts of one run, shared by the stages

// An earlier run this one is deduplicated against: its documents' signatures.
struct EarlierRun {
  std::string work, sig_dir;
  uint64_t fingerprint = 0;
  int tasks = 1;
};

struct Plan {
  std::vector<EarlierRun> earlier;  // generation i = earlier[i]
  std::vector<std::string> files;  // the expanded inputs; file f belongs to task f % tasks
  uint64_t fingerprint = 0;        // inputs (path, size, mtime), settings, tasks, buckets
  int tasks = 1, buckets = 1;
  std::string run_json, sig_dir, pairs_dir, cluster_dir, drops_dir, filter_dir;
  std::string sig_file(int task, int bucket) const;
  std::string sig_done(int task) const;    // the task's marker: its counts as JSON
  std::string pairs_file(int bucket) const;
  std::string labels_file(int partition) const;
  std::string drops_file(int task) const;
  std::string drops_done() const;
  std::string filter_done(int task) const;
};

// Expands the inputs, fingerprints the run, and makes the work folders; refuses a work folder of
// another run (its run.json) unless c.overwrite.
Status make_plan(const GlobalDedupConfig& c, Plan& p);

// A unit's marker: its JSON when present and of this run (fingerprint), else null / an error for a
// marker of another run.
Status read_marker(const std::string& path, uint64_t fingerprint, nlohmann::json& out);
Status write_marker(const std::string& path, uint64_t fingerprint, nlohmann::json body);
// Removes files left beside `path` by a killed writer (path.tmp-*), or, with prefix_only, every
// file whose name starts with path's name (a bucket's spilled runs).
void sweep_tmp(const std::string& path, bool prefix_only = false);

// Reads files in order (global_dedup's readers: JSONL or text, text_field), each record to doc and
// each file's end to file_end, as read_from_position; stops at the stage's stop flag.
struct ReadDocs {
  const std::vector<std::string>* files = nullptr;
  std::string text_field = "text";
  const char* counted_in = "the stats";
  std::function<bool(uint32_t file, uint64_t rec, RawDoc& doc, std::vector<std::string>& issues)> doc;
  std::function<bool(uint32_t file, uint64_t rec, std::vector<std::string>& issues)> file_end;
};
void read_docs(const ReadDocs& r);

// A unit whose output file is complete and of this run is done (skipped counted); one of another
// run is an error unless overwrite; missing or damaged: not done.
Status output_done(const std::string& path, FileType type, uint64_t fingerprint, bool overwrite, bool& done);

// Fault injection for the kill tests: when $SMELT_DEDUP_INJECT_KILL names this point ("signatures",
// "buckets", "cluster", "merge", "filter"), the process kills itself (SIGKILL) there, in the middle
// of the unit's outputs: some written, the unit's marker not.
void inject_kill(const char* point);

}  // namespace smelt::gd
