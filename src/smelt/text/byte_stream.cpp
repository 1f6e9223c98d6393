// Byte streams over files: plain reads, gzip via zlib inflate (member after member) and zstd via
// ZSTD_decompressStream (frame after frame), chosen by the file's magic bytes.
// Not here: lines, records or formats (doc_reader.cpp and the reader_*.cpp files).
#include "smelt/text/byte_stream.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace smelt {
namespace {

constexpr size_t kFileChunk = 1 << 20;  // bytes per read(2) from disk

// The file under a stream: one descriptor and one input buffer, refilled whole.
class FileSource {
 public:
  FileSource(int fd) : fd_(fd), buf_(new char[kFileChunk]) {}
  ~FileSource() { if (fd_ >= 0) ::close(fd_); }
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;

  // Reads the next chunk into the buffer (replacing it). Returns false at end of file or on error.
  bool refill() {
    pos_ = len_ = 0;
    if (eof_) return false;
    ssize_t r = read_some(buf_.get(), kFileChunk);
    if (r <= 0) { eof_ = true; return false; }
    len_ = static_cast<size_t>(r);
    return true;
  }
  // Hands over the unread rest of the buffer (refilled first when empty); empty at end of file.
  std::string_view take() {
    if (pos_ == len_) refill();
    std::string_view v(buf_.get() + pos_, len_ - pos_);
    pos_ = len_;
    return v;
  }
  // Reads straight into dst, bypassing the buffer (plain files). Returns 0 at end or error.
  size_t read_direct(char* dst, size_t n) {
    if (eof_) return 0;
    ssize_t r = read_some(dst, n);
    if (r <= 0) { eof_ = true; return 0; }
    return static_cast<size_t>(r);
  }
  // Peeks up to n bytes at the start of the file (fills the buffer once).
  std::string_view head(size_t n) {
    if (len_ == 0 && !eof_) refill();
    return std::string_view(buf_.get(), std::min(n, len_));
  }

  const char* data() const { return buf_.get() + pos_; }
  size_t avail() const { return len_ - pos_; }
  void consume(size_t n) { pos_ += n; }
  bool eof() const { return eof_; }
  uint64_t file_bytes() const { return file_bytes_; }       // read from disk so far
  const std::string& io_error() const { return io_error_; }  // non-empty after a failed read(2)

 private:
  ssize_t read_some(char* dst, size_t n) {
    for (;;) {
      ssize_t r = ::read(fd_, dst, n);
      if (r >= 0) { file_bytes_ += static_cast<uint64_t>(r); return r; }
      if (errno == EINTR) continue;
      io_error_ = fmt::format("read error at offset {}: {}", file_bytes_, std::strerror(errno));
      return -1;
    }
  }

  int fd_;
  std::unique_ptr<char[]> buf_;
  size_t pos_ = 0, len_ = 0;
  bool eof_ = false;
  uint64_t file_bytes_ = 0;
  std::string io_error_;
};

class PlainStream final : public ByteStream {
 public:
  explicit PlainStream(std::unique_ptr<FileSource> src) : src_(std::move(src)) {}
  size_t read(char* buf, size_t n) override {
    size_t got;
    if (src_->avail() > 0) {  // the bytes peeked for the magic come first
      got = std::min(n, src_->avail());
      std::memcpy(buf, src_->data(), got);
      src_->consume(got);
    } else {
      got = src_->read_direct(buf, n);
    }
    if (got == 0 && !src_->io_error().empty() && error_.empty()) error_ = src_->io_error();
    return got;
  }
  uint64_t compressed_offset() const override { return src_->file_bytes(); }

 private:
  std::unique_ptr<FileSource> src_;
};

class GzipStream final : public ByteStream {
 public:
  explicit GzipStream(std::unique_ptr<FileSource> src) : src_(std::move(src)) {
    std::memset(&zs_, 0, sizeof(zs_));
    ok_ = inflateInit2(&zs_, 16 + MAX_WBITS) == Z_OK;  // gzip wrapper only
    if (!ok_) { error_ = "cannot initialise zlib"; done_ = true; }
  }
  ~GzipStream() override { if (ok_) inflateEnd(&zs_); }

  size_t read(char* buf, size_t n) override {
    if (done_ || n == 0) return 0;
    zs_.next_out = reinterpret_cast<Bytef*>(buf);
    zs_.avail_out = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    const uInt want = zs_.avail_out;
    while (zs_.avail_out > 0) {
      if (zs_.avail_in == 0 && !src_->eof()) {
        std::string_view in = src_->take();
        zs_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
        zs_.avail_in = static_cast<uInt>(in.size());
      }
      if (!in_member_) {
        if (zs_.avail_in == 0) { end_stream(); break; }  // clean end after the last member
        if (zs_.next_in[0] != 0x1f) {  // not another member: report, keep what decoded
          fail(fmt::format("unexpected data after the end of a gzip member at compressed offset {}",
                           consumed()));
          break;
        }
        inflateReset(&zs_);
        in_member_ = true;
      }
      int r = inflate(&zs_, Z_NO_FLUSH);
      if (r == Z_STREAM_END) { in_member_ = false; continue; }
      if (r == Z_OK) continue;
      if (r == Z_BUF_ERROR && !(zs_.avail_in == 0 && src_->eof())) continue;
      if (r == Z_BUF_ERROR) {
        fail(fmt::format("truncated gzip stream at compressed offset {}", consumed()));
      } else {
        fail(fmt::format("corrupt gzip stream at compressed offset {}: {}", consumed(),
                         zs_.msg ? zs_.msg : "invalid data"));
      }
      break;
    }
    return want - zs_.avail_out;
  }
  uint64_t compressed_offset() const override { return src_->file_bytes(); }

 private:
  // Compressed bytes the decoder has used so far.
  uint64_t consumed() const { return src_->file_bytes() - zs_.avail_in; }
  void end_stream() {
    done_ = true;
    if (!src_->io_error().empty()) error_ = src_->io_error();
  }
  void fail(std::string msg) {
    done_ = true;
    error_ = src_->io_error().empty() ? std::move(msg) : src_->io_error();
  }

  std::unique_ptr<FileSource> src_;
  z_stream zs_;
  bool ok_ = false, done_ = false, in_member_ = false;
};

class ZstdStream final : public ByteStream {
 public:
  explicit ZstdStream(std::unique_ptr<FileSource> src) : src_(std::move(src)) {
    ds_ = ZSTD_createDStream();
    if (!ds_) { error_ = "cannot initialise zstd"; done_ = true; }
  }
  ~ZstdStream() override { ZSTD_freeDStream(ds_); }

  size_t read(char* buf, size_t n) override {
    if (done_ || n == 0) return 0;
    ZSTD_outBuffer out{buf, n, 0};
    while (out.pos < out.size) {
      if (in_.pos == in_.size && !src_->eof()) {
        std::string_view in = src_->take();
        in_ = ZSTD_inBuffer{in.data(), in.size(), 0};
      }
      const bool input_done = in_.pos == in_.size && src_->eof();
      if (input_done && frame_done_) { end_stream(); break; }
      const size_t before = out.pos;
      size_t r = ZSTD_decompressStream(ds_, &out, &in_);
      if (ZSTD_isError(r)) {
        fail(fmt::format("corrupt zstd stream at compressed offset {}: {}", consumed(),
                         ZSTD_getErrorName(r)));
        break;
      }
      frame_done_ = r == 0;
      // Out of input with the frame unfinished, and the decoder has nothing more to flush.
      if (input_done && !frame_done_ && out.pos == before) {
        fail(fmt::format("truncated zstd stream at compressed offset {}", consumed()));
        break;
      }
    }
    return out.pos;
  }
  uint64_t compressed_offset() const override { return src_->file_bytes(); }

 private:
  uint64_t consumed() const { return src_->file_bytes() - (in_.size - in_.pos); }
  void end_stream() {
    done_ = true;
    if (!src_->io_error().empty()) error_ = src_->io_error();
  }
  void fail(std::string msg) {
    done_ = true;
    error_ = src_->io_error().empty() ? std::move(msg) : src_->io_error();
  }

  std::unique_ptr<FileSource> src_;
  ZSTD_DStream* ds_ = nullptr;
  ZSTD_inBuffer in_{nullptr, 0, 0};
  bool done_ = false;
  bool frame_done_ = true;  // an empty file is a clean (empty) stream
};

}  // namespace

std::unique_ptr<ByteStream> byte_stream_open(const std::string& path, Status& err) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    err = Status::error(fmt::format("cannot open {}: {}", path, std::strerror(errno)));
    return nullptr;
  }
  struct stat st;
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    err = Status::error(fmt::format("cannot read {}: it is a directory", path));
    return nullptr;
  }
#ifdef POSIX_FADV_SEQUENTIAL
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
  auto src = std::make_unique<FileSource>(fd);
  std::string_view head = src->head(4);
  if (!src->io_error().empty()) {
    err = Status::error(fmt::format("cannot read {}: {}", path, src->io_error()));
    return nullptr;
  }
  auto u = [&](size_t i) { return static_cast<unsigned char>(head[i]); };
  err = Status::ok();
  if (head.size() >= 2 && u(0) == 0x1f && u(1) == 0x8b) return std::make_unique<GzipStream>(std::move(src));
  if (head.size() >= 4) {
    uint32_t magic = u(0) | (u(1) << 8) | (u(2) << 16) | (uint32_t(u(3)) << 24);
    if (magic == 0xFD2FB528u || (magic & 0xFFFFFFF0u) == 0x184D2A50u)  // zstd frame or skippable frame
      return std::make_unique<ZstdStream>(std::move(src));
  }
  return std::make_unique<PlainStream>(std::move(src));
}

}  // namespace smelt
