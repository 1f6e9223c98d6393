// IndexedDataset: mmap of PREFIX.idx and PREFIX.bin, checked once on open, then zero-copy views.
// Not the writer (indexed_writer.cpp). Field layout: indexed.hpp.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "smelt/dataset/indexed.hpp"

namespace smelt {

namespace {

// Maps a whole file read-only; an empty file maps to nullptr with size 0.
Status map_file(const std::string& path, void*& map, size_t& size) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::error(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return Status::error(fmt::format("{}: cannot stat: {}", path, std::strerror(e)));
  }
  size = static_cast<size_t>(st.st_size);
  map = nullptr;
  if (size > 0) {
    void* p = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      return Status::error(fmt::format("{}: cannot map: {}", path, std::strerror(e)));
    }
    map = p;
  }
  ::close(fd);  // the mapping stays valid
  return Status::ok();
}

}  // namespace

IndexedDataset::~IndexedDataset() { close(); }

IndexedDataset::IndexedDataset(IndexedDataset&& o) noexcept { *this = std::move(o); }

IndexedDataset& IndexedDataset::operator=(IndexedDataset&& o) noexcept {
  if (this == &o) return *this;
  close();
  prefix_ = std::move(o.prefix_);
  idx_map_ = std::exchange(o.idx_map_, nullptr);
  idx_size_ = std::exchange(o.idx_size_, 0);
  bin_map_ = std::exchange(o.bin_map_, nullptr);
  bin_size_ = std::exchange(o.bin_size_, 0);
  dtype_ = o.dtype_;
  seq_count_ = std::exchange(o.seq_count_, 0);
  doc_count_ = std::exchange(o.doc_count_, 0);
  total_tokens_ = std::exchange(o.total_tokens_, 0);
  lengths_ = std::exchange(o.lengths_, nullptr);
  pointers_ = std::exchange(o.pointers_, nullptr);
  doc_indices_ = std::exchange(o.doc_indices_, nullptr);
  return *this;
}

void IndexedDataset::close() {
  if (idx_map_) munmap(idx_map_, idx_size_);
  if (bin_map_) munmap(bin_map_, bin_size_);
  idx_map_ = bin_map_ = nullptr;
  idx_size_ = bin_size_ = 0;
  seq_count_ = doc_count_ = total_tokens_ = 0;
  lengths_ = pointers_ = doc_indices_ = nullptr;
}

Status IndexedDataset::open(const std::string& prefix) {
  close();
  prefix_ = prefix;
  if (Status s = map_file(indexed_idx_path(prefix), idx_map_, idx_size_); !s) return s;
  if (Status s = map_file(indexed_bin_path(prefix), bin_map_, bin_size_); !s) {
    close();
    return s;
  }
  Status s = validate();
  if (!s) close();
  return s;
}

Status IndexedDataset::validate() {
  const std::string idx = indexed_idx_path(prefix_), bin = indexed_bin_path(prefix_);
  const auto* p = static_cast<const unsigned char*>(idx_map_);
  if (idx_size_ < kIndexedHeaderBytes)
    return Status::error(fmt::format("{}: {} bytes, shorter than the {}-byte MMIDIDX header (truncated file?)", idx,
                                     idx_size_, kIndexedHeaderBytes));
  if (std::memcmp(p, kIndexedMagic, sizeof kIndexedMagic) != 0)
    return Status::error(fmt::format("{}: offset 0: not an MMIDIDX index (expected the magic \"MMIDIDX\\0\\0\")", idx));
  if (uint64_t v = load<uint64_t>(p + 9); v != kIndexedVersion)
    return Status::error(fmt::format("{}: offset 9: version {}, expected {}", idx, v, kIndexedVersion));
  const uint8_t code = p[17];
  if (code != static_cast<uint8_t>(IndexedDType::kUInt16) && code != static_cast<uint8_t>(IndexedDType::kInt32))
    return Status::error(fmt::format(
        "{}: offset 17: dtype code {}; token shards use 8 (uint16) or 4 (int32)", idx, code));
  dtype_ = static_cast<IndexedDType>(code);
  seq_count_ = load<uint64_t>(p + 18);
  doc_count_ = load<uint64_t>(p + 26);
  if (seq_count_ > (1ull << 56) || doc_count_ > (1ull << 56))
    return Status::error(fmt::format("{}: offset 18: implausible counts ({} sequences, {} document indices)", idx,
                                     seq_count_, doc_count_));
  const uint64_t expected = kIndexedHeaderBytes + 12 * seq_count_ + 8 * doc_count_;
  if (idx_size_ < expected)
    return Status::error(fmt::format(
        "{}: {} bytes, but its header ({} sequences, {} document indices) needs {} (truncated file?)", idx,
        idx_size_, seq_count_, doc_count_, expected));
  if (idx_size_ > expected)
    return Status::error(fmt::format(
        "{}: {} bytes, {} more than its header ({} sequences, {} document indices) describes "
        "(a multimodal index, or damage)", idx, idx_size_, idx_size_ - expected, seq_count_, doc_count_));
  if (doc_count_ == 0)
    return Status::error(fmt::format("{}: offset 26: document_indices is empty; it starts with 0 even for 0 "
                                     "documents", idx));
  lengths_ = p + kIndexedHeaderBytes;
  pointers_ = lengths_ + 4 * seq_count_;
  doc_indices_ = pointers_ + 8 * seq_count_;

  // sequences: non-negative lengths, stored back to back
  const uint64_t item = indexed_dtype_size(dtype_);
  uint64_t at = 0;
  for (uint64_t i = 0; i < seq_count_; ++i) {
    const int32_t len = length(i);
    if (len < 0)
      return Status::error(fmt::format("{}: offset {}: sequence_lengths[{}] is {}", idx,
                                       lengths_ - p + 4 * i, i, len));
    const int64_t ptr = pointer(i);
    if (ptr < 0 || static_cast<uint64_t>(ptr) != at)
      return Status::error(fmt::format("{}: offset {}: sequence_pointers[{}] is {}, expected {} (sequences are "
                                       "stored back to back)", idx, pointers_ - p + 8 * i, i, ptr, at));
    at += static_cast<uint64_t>(len) * item;
  }
  total_tokens_ = at / item;
  if (bin_size_ < at)
    return Status::error(fmt::format("{}: {} bytes, but {} describes {} ({} tokens); the .bin is truncated", bin,
                                     bin_size_, idx, at, total_tokens_));
  if (bin_size_ > at)
    return Status::error(fmt::format("{}: {} bytes, {} more than {} describes; the pair does not belong together",
                                     bin, bin_size_, bin_size_ - at, idx));
  // documents: 0, non-decreasing, ending at the sequence count
  int64_t prev = 0;
  for (uint64_t j = 0; j < doc_count_; ++j) {
    const int64_t d = document_index(j);
    const bool bad = (j == 0 && d != 0) || d < prev || static_cast<uint64_t>(d) > seq_count_;
    if (bad)
      return Status::error(fmt::format("{}: offset {}: document_indices[{}] is {} (expected 0 first, then "
                                       "non-decreasing up to {})", idx, doc_indices_ - p + 8 * j, j, d, seq_count_));
    prev = d;
  }
  if (static_cast<uint64_t>(prev) != seq_count_)
    return Status::error(fmt::format("{}: offset {}: the last document index is {}, expected the sequence count {}",
                                     idx, doc_indices_ - p + 8 * (doc_count_ - 1), prev, seq_count_));
  return Status::ok();
}

TokenView IndexedDataset::sequence(uint64_t i) const {
  TokenView v;
  v.dtype = dtype_;
  const size_t n = static_cast<size_t>(length(i));
  if (n == 0) return v;
  const auto* base = static_cast<const unsigned char*>(bin_map_) + pointer(i);
  if (dtype_ == IndexedDType::kUInt16)
    v.u16 = std::span<const uint16_t>(reinterpret_cast<const uint16_t*>(base), n);
  else
    v.i32 = std::span<const int32_t>(reinterpret_cast<const int32_t*>(base), n);
  return v;
}

Status IndexedDataset::sequence_checked(uint64_t i, TokenView& out) const {
  if (i >= seq_count_)
    return Status::error(fmt::format("{}: sequence {} requested, the dataset has {}", indexed_idx_path(prefix_), i,
                                     seq_count_));
  out = sequence(i);
  return Status::ok();
}

TokenLocation IndexedDataset::locate(uint64_t t) const {
  // last sequence whose first token index <= t; empty sequences share a start with the next one,
  // so the search lands on the one that holds tokens
  if (seq_count_ == 0) return TokenLocation{};
  const uint64_t item = indexed_dtype_size(dtype_);
  uint64_t lo = 0, hi = seq_count_;  // answer in [lo, hi)
  while (hi - lo > 1) {
    uint64_t mid = lo + (hi - lo) / 2;
    if (static_cast<uint64_t>(pointer(mid)) / item <= t) lo = mid;
    else hi = mid;
  }
  return TokenLocation{lo, t - static_cast<uint64_t>(pointer(lo)) / item};
}

}  // namespace smelt
