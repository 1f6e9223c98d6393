// safetensors files (https://github.com/huggingface/safetensors, "Format"): 8-byte little-endian
// header length N, N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__":
// {string: string}} padded with spaces to 8-byte alignment, then the data. The writer streams one
// tensor at a time from the caller's memory through two aligned bounce buffers (CRC32C on the way)
// written with O_DIRECT where the filesystem allows it; the reader checks the header against the file. Not the checkpoint layout (checkpoint.cpp) and not export.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "smelt/common/status.hpp"

namespace smelt {

struct SafetensorsTensor {
  std::string name;
  std::string dtype = "F32";   // the writer writes F32 only; the reader accepts every spec dtype
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;  // absolute byte offsets of the data in the file
  uint32_t crc32c = 0;         // writer: CRC32C of the data bytes (the reader leaves 0)
  int64_t bytes() const { return end - begin; }
};

// Product of the dimensions (1 for a scalar); -1 when a dimension is negative or it overflows.
int64_t safetensors_numel(const std::vector<int64_t>& shape);

class SafetensorsWriter {
 public:
  SafetensorsWriter() = default;
  ~SafetensorsWriter();  // closes the file if open (a partial file is left for the caller to remove)
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // Creates PATH (truncating) and writes the header; tensors need name and shape (F32, row-major),
  // in the order their data will follow.
  Status open(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
              const std::map<std::string, std::string>& metadata);
  // Writes the data of the next tensor: numel floats (little-endian, as in memory on x86).
  Status write_next(const float* data);
  // Every tensor written: fsync and close.
  Status finish();

  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }  // offsets and CRCs
  uint32_t file_crc32c() const { return file_crc_; }                         // of the whole file
  int64_t file_bytes() const { return pos_; }

 private:
  Status write_bytes(const void* p, int64_t n, uint32_t* tensor_crc);
  Status flush(bool last);
  Status join_io();
  void close_file();
  std::string path_;
  int fd_ = -1;
  bool direct_ = false;  // O_DIRECT: the filesystem took it (tmpfs and some others do not)
  std::vector<SafetensorsTensor> tensors_;
  size_t next_ = 0;
  int64_t pos_ = 0;      // bytes accepted
  int64_t flushed_ = 0;  // bytes handed to the io thread
  uint32_t file_crc_ = 0;
  // Two aligned bounce buffers: one fills (copy + CRC) while the io thread writes the other.
  char* bounce_[2] = {nullptr, nullptr};
  int cur_ = 0;
  size_t fill_ = 0;
  std::thread io_;
  Status io_status_;
};

class SafetensorsReader {
 public:
  SafetensorsReader() = default;
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  // Reads and checks the header: length inside the file, valid JSON, known dtypes, data_offsets
  // matching shape x dtype size, tensors covering the data region without holes or overlaps.
  Status open(const std::string& path);
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }  // in file order
  const SafetensorsTensor* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  int64_t data_start() const { return data_start_; }
  int64_t file_size() const { return file_size_; }
  // Reads `bytes` bytes at absolute offset `offset` (errors name the file, offset and what was read).
  Status read_at(int64_t offset, void* out, int64_t bytes) const;

 private:
  std::string path_;
  int fd_ = -1;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, std::string> metadata_;
  int64_t data_start_ = 0, file_size_ = 0;
};

}  // namespace smelt
