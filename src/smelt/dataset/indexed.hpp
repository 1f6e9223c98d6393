// Token shards in Megatron-LM's MMIDIDX layout (PREFIX.bin + PREFIX.idx): a streaming writer and a
// memory-mapped, zero-copy reader with random access to any sequence or document.
// Not here: tokenizing text (tokenize.hpp), the document-id sidecar (lineage.hpp), sampling.
//
// The layout, as Megatron-LM's megatron/core/datasets/indexed_dataset.py (_IndexWriter,
// _IndexReader, DType) writes and reads it; every integer is little-endian:
//
//   PREFIX.idx
//     offset 0   9 bytes   magic "MMIDIDX\0\0"
//     offset 9   uint64    version, always 1
//     offset 17  uint8     dtype code of the tokens in .bin: 1 uint8, 2 int8, 3 int16, 4 int32,
//                          5 int64, 6 float64, 7 float32, 8 uint16
//     offset 18  uint64    S, the number of sequences
//     offset 26  uint64    D, the number of entries in document_indices (documents + 1)
//     offset 34  int32[S]  sequence_lengths: tokens in each sequence
//                int64[S]  sequence_pointers: byte offset of each sequence in .bin
//                int64[D]  document_indices: 0, then for each document the sequence index one past
//                          its last sequence (one sequence per document: 0, 1, 2, ..., S)
//     (Megatron's multimodal variant appends int8[S] modes; Smelt neither writes nor reads them.)
//   PREFIX.bin   the tokens of every sequence back to back, in the dtype, no header.
//
// Token dtype: Megatron's DType.optimal_dtype(vocab size) picks uint16 (code 8) when the vocabulary
// has fewer than 65500 entries and int32 (code 4) otherwise; indexed_dtype_for_vocab does the same.
// The arrays after the 34-byte header are not naturally aligned, so the reader loads them with
// memcpy; tokens in .bin are aligned (pointers are multiples of the item size) and are handed out
// as spans straight into the mapping.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "smelt/common/status.hpp"

namespace smelt {

enum class IndexedDType : uint8_t { kUInt16 = 8, kInt32 = 4 };

inline constexpr char kIndexedMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
inline constexpr uint64_t kIndexedVersion = 1;
inline constexpr size_t kIndexedHeaderBytes = 34;
inline constexpr uint32_t kIndexedUInt16VocabLimit = 65500;  // Megatron: uint16 below this

// uint16 for vocab_size < 65500 (Megatron's rule), int32 otherwise.
IndexedDType indexed_dtype_for_vocab(uint64_t vocab_size);
size_t indexed_dtype_size(IndexedDType t);
const char* indexed_dtype_name(IndexedDType t);
std::string indexed_bin_path(const std::string& prefix);  // PREFIX.bin
std::string indexed_idx_path(const std::string& prefix);  // PREFIX.idx

// Streams sequences into PREFIX.bin.partial as they come; finish() renames it to PREFIX.bin and then
// writes PREFIX.idx atomically, so a present .idx means a complete pair. Lengths (4 bytes per
// sequence) and document boundaries are held in memory. Resumable: at a checkpoint the caller makes
// the .bin durable (sync()) and records bin_bytes() and the lengths; resume() cuts the .bin back to
// that and continues.
class IndexedWriter {
 public:
  IndexedWriter() = default;
  ~IndexedWriter();
  IndexedWriter(const IndexedWriter&) = delete;
  IndexedWriter& operator=(const IndexedWriter&) = delete;

  // Starts a new dataset (an old PREFIX.bin.partial is replaced).
  Status open(const std::string& prefix, IndexedDType dtype);
  // Continues PREFIX.bin.partial from a checkpoint: the file is cut to bin_bytes, which must equal
  // the sum of lengths times the item size. document_indices as document_indices() returned it.
  Status resume(const std::string& prefix, IndexedDType dtype, uint64_t bin_bytes, std::vector<int32_t> lengths,
                std::vector<int64_t> document_indices);

  // Appends one sequence. Ids that do not fit the dtype are an error (nothing is written).
  Status add_sequence(std::span<const uint32_t> ids);
  // Closes the current document: every sequence since the previous end_document belongs to it.
  void end_document();
  // add_sequence + end_document.
  Status add_document(std::span<const uint32_t> ids);

  // Flushes and fsyncs PREFIX.bin.partial (for a checkpoint).
  Status sync();
  // PREFIX.bin.partial -> PREFIX.bin, then PREFIX.idx (written atomically, last).
  Status finish();
  // Stops and removes PREFIX.bin.partial. (The destructor closes it and leaves it, for a resume.)
  void abort();

  IndexedDType dtype() const { return dtype_; }
  uint64_t bin_bytes() const { return bin_bytes_; }
  uint64_t tokens() const { return bin_bytes_ / indexed_dtype_size(dtype_); }
  const std::vector<int32_t>& lengths() const { return lengths_; }
  const std::vector<int64_t>& document_indices() const { return doc_indices_; }
  std::string partial_path() const { return indexed_bin_path(prefix_) + ".partial"; }

 private:
  Status write_raw(const void* data, size_t bytes);
  std::string prefix_;
  IndexedDType dtype_ = IndexedDType::kUInt16;
  std::FILE* bin_ = nullptr;
  uint64_t bin_bytes_ = 0;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> doc_indices_{0};
  std::vector<uint16_t> narrow_;  // conversion buffer for uint16
};

// One sequence's tokens, pointing into the mapped .bin (no copy). Exactly one of u16/i32 is set,
// by dtype; at(i) reads either.
struct TokenView {
  IndexedDType dtype = IndexedDType::kUInt16;
  std::span<const uint16_t> u16;
  std::span<const int32_t> i32;
  size_t size() const { return dtype == IndexedDType::kUInt16 ? u16.size() : i32.size(); }
  uint32_t at(size_t i) const {
    return dtype == IndexedDType::kUInt16 ? u16[i] : static_cast<uint32_t>(i32[i]);
  }
  std::vector<uint32_t> to_vector() const;
};

// Position of a global token index: which sequence, and where in it.
struct TokenLocation {
  uint64_t sequence = 0;
  uint64_t offset = 0;  // token index within the sequence
};

// Memory-maps PREFIX.idx and PREFIX.bin. open() checks the whole index against the format and the
// .bin size (one pass over the index, none over the tokens) and names the file and byte offset of
// the first problem. After that every access is O(1) (locate: O(log S)) and touches only the pages
// it reads.
class IndexedDataset {
 public:
  IndexedDataset() = default;
  ~IndexedDataset();
  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;
  IndexedDataset(IndexedDataset&&) noexcept;
  IndexedDataset& operator=(IndexedDataset&&) noexcept;

  Status open(const std::string& prefix);
  void close();

  IndexedDType dtype() const { return dtype_; }
  uint64_t sequences() const { return seq_count_; }
  uint64_t documents() const { return doc_count_ == 0 ? 0 : doc_count_ - 1; }
  uint64_t tokens() const { return total_tokens_; }
  uint64_t bin_bytes() const { return bin_size_; }

  // Raw index fields; i < sequences(), j < documents() + 1. Unchecked (see the _checked calls).
  int32_t length(uint64_t i) const { return load<int32_t>(lengths_ + 4 * i); }
  int64_t pointer(uint64_t i) const { return load<int64_t>(pointers_ + 8 * i); }
  int64_t document_index(uint64_t j) const { return load<int64_t>(doc_indices_ + 8 * j); }

  // Tokens of sequence i (unchecked i).
  TokenView sequence(uint64_t i) const;
  // Checked: an error naming the file when i is out of range.
  Status sequence_checked(uint64_t i, TokenView& out) const;
  // Sequences [begin, end) of document d.
  void document_sequences(uint64_t d, uint64_t& begin, uint64_t& end) const {
    begin = static_cast<uint64_t>(document_index(d));
    end = static_cast<uint64_t>(document_index(d + 1));
  }
  // The sequence holding global token index t (t < tokens(); {0, 0} for an empty dataset), by
  // binary search over the pointers.
  TokenLocation locate(uint64_t t) const;

  const std::string& prefix() const { return prefix_; }

 private:
  template <class T>
  static T load(const unsigned char* p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  Status validate();
  std::string prefix_;
  void* idx_map_ = nullptr;
  size_t idx_size_ = 0;
  void* bin_map_ = nullptr;
  size_t bin_size_ = 0;
  IndexedDType dtype_ = IndexedDType::kUInt16;
  uint64_t seq_count_ = 0, doc_count_ = 0, total_tokens_ = 0;
  const unsigned char* lengths_ = nullptr;
  const unsigned char* pointers_ = nullptr;
  const unsigned char* doc_indices_ = nullptr;
};

}  // namespace smelt
