// Byte streams over files: plain, gzip (zlib, multi-member) and zstd (multi-frame), detected by
// magic bytes. A damaged or truncated compressed stream ends with error() set; the bytes decoded
// before the damage are still delivered. Not here: lines or records (see doc_reader.hpp).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "smelt/common/status.hpp"

namespace smelt {

class ByteStream {
 public:
  virtual ~ByteStream() = default;
  // Reads up to n bytes into buf; returns 0 at end of stream (or after an error).
  virtual size_t read(char* buf, size_t n) = 0;
  // Non-empty when the stream ended early: "truncated gzip stream at compressed offset 1234", ...
  const std::string& error() const { return error_; }
  // Bytes consumed from the underlying file so far.
  virtual uint64_t compressed_offset() const = 0;

 protected:
  std::string error_;
};

// Opens path; compression is detected from the magic bytes, not the name.
std::unique_ptr<ByteStream> byte_stream_open(const std::string& path, Status& err);

}  // namespace smelt
