// IndexedWriter: streams tokens into PREFIX.bin.partial, then commits .bin and .idx (the index
// last, atomically). Not the reader (indexed_reader.cpp). Field layout: indexed.hpp.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

#include <fmt/format.h>

#include "smelt/common/files.hpp"
#include "smelt/dataset/indexed.hpp"

namespace fs = std::filesystem;

namespace smelt {

IndexedDType indexed_dtype_for_vocab(uint64_t vocab_size) {
  return vocab_size < kIndexedUInt16VocabLimit ? IndexedDType::kUInt16 : IndexedDType::kInt32;
}

size_t indexed_dtype_size(IndexedDType t) { return t == IndexedDType::kUInt16 ? 2 : 4; }

const char* indexed_dtype_name(IndexedDType t) { return t == IndexedDType::kUInt16 ? "uint16" : "int32"; }

std::string indexed_bin_path(const std::string& prefix) { return prefix + ".bin"; }
std::string indexed_idx_path(const std::string& prefix) { return prefix + ".idx"; }

std::vector<uint32_t> TokenView::to_vector() const {
  std::vector<uint32_t> v(size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = at(i);
  return v;
}

IndexedWriter::~IndexedWriter() {
  // keeps PREFIX.bin.partial: an interrupted run resumes from it
  if (bin_) std::fclose(bin_);
}

Status IndexedWriter::open(const std::string& prefix, IndexedDType dtype) {
  abort();
  prefix_ = prefix;
  dtype_ = dtype;
  bin_bytes_ = 0;
  lengths_.clear();
  doc_indices_.assign(1, 0);
  bin_ = std::fopen(partial_path().c_str(), "wb");
  if (!bin_) return Status::error(fmt::format("{}: cannot create: {}", partial_path(), std::strerror(errno)));
  return Status::ok();
}

Status IndexedWriter::resume(const std::string& prefix, IndexedDType dtype, uint64_t bin_bytes,
                             std::vector<int32_t> lengths, std::vector<int64_t> document_indices) {
  abort();
  prefix_ = prefix;
  dtype_ = dtype;
  uint64_t sum = 0;
  for (int32_t l : lengths) sum += static_cast<uint64_t>(l);
  if (sum * indexed_dtype_size(dtype) != bin_bytes)
    return Status::error(fmt::format("{}: resume point says {} bytes but its {} sequence lengths add up to {}",
                                     partial_path(), bin_bytes, lengths.size(), sum * indexed_dtype_size(dtype)));
  if (document_indices.empty() || document_indices.front() != 0 ||
      static_cast<uint64_t>(document_indices.back()) > lengths.size())
    return Status::error(fmt::format("{}: resume point has damaged document indices", partial_path()));
  std::error_code ec;
  uint64_t size = fs::file_size(partial_path(), ec);
  if (ec || size < bin_bytes)
    return Status::error(fmt::format("{}: {} bytes on disk, fewer than the {} the resume point covers",
                                     partial_path(), ec ? 0 : size, bin_bytes));
  if (truncate(partial_path().c_str(), static_cast<off_t>(bin_bytes)) != 0)
    return Status::error(fmt::format("{}: cannot cut back to {} bytes: {}", partial_path(), bin_bytes,
                                     std::strerror(errno)));
  bin_ = std::fopen(partial_path().c_str(), "ab");
  if (!bin_) return Status::error(fmt::format("{}: cannot reopen: {}", partial_path(), std::strerror(errno)));
  bin_bytes_ = bin_bytes;
  lengths_ = std::move(lengths);
  doc_indices_ = std::move(document_indices);
  return Status::ok();
}

Status IndexedWriter::write_raw(const void* data, size_t bytes) {
  if (bytes > 0 && std::fwrite(data, 1, bytes, bin_) != bytes)
    return Status::error(fmt::format("{}: write failed: {}", partial_path(), std::strerror(errno)));
  bin_bytes_ += bytes;
  return Status::ok();
}

Status IndexedWriter::add_sequence(std::span<const uint32_t> ids) {
  if (!bin_) return Status::error(fmt::format("{}: writer is not open", partial_path()));
  if (ids.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    return Status::error(fmt::format("{}: a sequence of {} tokens does not fit the int32 length field",
                                     partial_path(), ids.size()));
  const uint32_t limit = dtype_ == IndexedDType::kUInt16 ? 0xFFFFu : 0x7FFFFFFFu;
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] > limit)
      return Status::error(fmt::format("{}: token id {} at position {} does not fit {}", partial_path(), ids[i], i,
                                       indexed_dtype_name(dtype_)));
  Status s;
  if (dtype_ == IndexedDType::kUInt16) {
    narrow_.assign(ids.begin(), ids.end());
    s = write_raw(narrow_.data(), narrow_.size() * 2);
  } else {
    // ids <= INT32_MAX have the same bits as int32
    s = write_raw(ids.data(), ids.size() * 4);
  }
  if (!s) return s;
  lengths_.push_back(static_cast<int32_t>(ids.size()));
  return Status::ok();
}

void IndexedWriter::end_document() { doc_indices_.push_back(static_cast<int64_t>(lengths_.size())); }

Status IndexedWriter::add_document(std::span<const uint32_t> ids) {
  if (Status s = add_sequence(ids); !s) return s;
  end_document();
  return Status::ok();
}

Status IndexedWriter::sync() {
  if (!bin_) return Status::error(fmt::format("{}: writer is not open", partial_path()));
  if (std::fflush(bin_) != 0 || fsync(fileno(bin_)) != 0)
    return Status::error(fmt::format("{}: flush failed: {}", partial_path(), std::strerror(errno)));
  return Status::ok();
}

Status IndexedWriter::finish() {
  if (!bin_) return Status::error(fmt::format("{}: writer is not open", partial_path()));
  if (static_cast<uint64_t>(doc_indices_.back()) != lengths_.size())
    return Status::error(fmt::format("{}: the last {} sequence(s) belong to no document (end_document missing)",
                                     partial_path(), lengths_.size() - doc_indices_.back()));
  bool ok = std::fflush(bin_) == 0 && fsync(fileno(bin_)) == 0;
  ok = std::fclose(bin_) == 0 && ok;
  bin_ = nullptr;
  if (!ok) return Status::error(fmt::format("{}: flush failed: {}", partial_path(), std::strerror(errno)));
  // an old index must not describe the new .bin, not even for a moment
  std::error_code ec;
  fs::remove(indexed_idx_path(prefix_), ec);
  if (std::rename(partial_path().c_str(), indexed_bin_path(prefix_).c_str()) != 0)
    return Status::error(fmt::format("{}: cannot rename to {}: {}", partial_path(), indexed_bin_path(prefix_),
                                     std::strerror(errno)));

  AtomicFile idx;
  if (Status s = idx.open(indexed_idx_path(prefix_)); !s) return s;
  std::string buf;
  auto put = [&](const void* p, size_t n) { buf.append(static_cast<const char*>(p), n); };
  auto drain = [&](bool force) -> Status {
    if (buf.size() < (4u << 20) && !force) return Status::ok();
    Status s = idx.write(buf);
    buf.clear();
    return s;
  };
  const uint64_t version = kIndexedVersion;
  const uint8_t code = static_cast<uint8_t>(dtype_);
  const uint64_t seqs = lengths_.size(), docs = doc_indices_.size();
  put(kIndexedMagic, sizeof kIndexedMagic);
  put(&version, 8);
  put(&code, 1);
  put(&seqs, 8);
  put(&docs, 8);
  for (int32_t l : lengths_) {
    put(&l, 4);
    if (Status s = drain(false); !s) return s;
  }
  int64_t ptr = 0;
  const int64_t item = static_cast<int64_t>(indexed_dtype_size(dtype_));
  for (int32_t l : lengths_) {
    put(&ptr, 8);
    ptr += l * item;
    if (Status s = drain(false); !s) return s;
  }
  for (int64_t d : doc_indices_) {
    put(&d, 8);
    if (Status s = drain(false); !s) return s;
  }
  if (Status s = drain(true); !s) return s;
  return idx.commit();
}

void IndexedWriter::abort() {
  if (bin_) {
    std::fclose(bin_);
    bin_ = nullptr;
    std::error_code ec;
    fs::remove(partial_path(), ec);
  }
}

}  // namespace smelt
