// Lineage sidecar PREFIX.docs: for every sequence of a token shard, the id of the refined document
// it came from (the `id` that `smelt prep` derives from the source file and record), so a token
// position found in training (IndexedDataset::locate) leads back to the page. Streaming writer
// and memory-mapped reader. Not here: the token shard itself (indexed.hpp).
//
// Layout (little-endian); Smelt's own format:
//   offset 0   8 bytes   magic "SMELTDOC"
//   offset 8   uint32    version, 1
//   offset 12  uint32    reserved, 0
//   offset 16  uint64    N, the number of sequences (equals the .idx sequence count)
//   offset 24  uint64    T, the byte offset of the offsets table
//   offset 32  entries, one per sequence in order: uint32 byte length L, then L bytes of id (UTF-8)
//   offset T   uint64[N+1] offsets table: file offset of entry i; entry N is T (end of the entries)
//   The file is exactly T + 8*(N+1) bytes. The header is written last (N and T are zero until the
//   writer finishes), and the file is renamed into place after that: a present .docs is complete.
// The length prefixes make the entry area self-delimiting, so an interrupted writer resumes by
// scanning it; the table gives O(1) random access.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "smelt/common/status.hpp"

namespace smelt {

inline constexpr char kLineageMagic[8] = {'S', 'M', 'E', 'L', 'T', 'D', 'O', 'C'};
inline constexpr uint32_t kLineageVersion = 1;
inline constexpr uint64_t kLineageHeaderBytes = 32;

std::string lineage_path(const std::string& prefix);  // PREFIX.docs

// Appends ids to PATH.partial; finish() writes the table and header and renames it to PATH.
class LineageWriter {
 public:
  LineageWriter() = default;
  ~LineageWriter();  // closes PATH.partial and leaves it, for a resume
  LineageWriter(const LineageWriter&) = delete;
  LineageWriter& operator=(const LineageWriter&) = delete;

  Status open(const std::string& path);
  // Continues PATH.partial from a checkpoint: cut to `bytes`, which must end exactly `count` entries.
  Status resume(const std::string& path, uint64_t bytes, uint64_t count);
  Status add(std::string_view id);
  Status sync();  // flush + fsync, for a checkpoint
  Status finish();
  void abort();   // closes and removes PATH.partial

  uint64_t bytes() const { return bytes_; }
  uint64_t count() const { return offsets_.size(); }
  std::string partial_path() const { return path_ + ".partial"; }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
  uint64_t bytes_ = 0;
  std::vector<uint64_t> offsets_;  // [sequence] file offset of its entry
};

// Maps PATH.docs; open() checks the header, size and table.
class LineageReader {
 public:
  LineageReader() = default;
  ~LineageReader();
  LineageReader(const LineageReader&) = delete;
  LineageReader& operator=(const LineageReader&) = delete;

  Status open(const std::string& path);
  void close();
  uint64_t size() const { return count_; }
  // The document id of sequence i (unchecked i; points into the mapping).
  std::string_view id_of(uint64_t i) const;
  Status id_checked(uint64_t i, std::string_view& out) const;

 private:
  uint64_t table(uint64_t i) const;
  std::string path_;
  void* map_ = nullptr;
  size_t size_ = 0;
  uint64_t count_ = 0, table_offset_ = 0;
};

}  // namespace smelt
