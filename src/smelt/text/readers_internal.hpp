// Internals shared by the document readers: a growable read buffer over a ByteStream, a line
// splitter with bounded memory, and the common reader base (issues, UTF-8 repair, binary sniff).
// Not a public interface: only doc_reader.cpp, the reader_*.cpp files and their tests include it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "smelt/text/byte_stream.hpp"
#include "smelt/text/doc_reader.hpp"

namespace smelt {

// A window [data(), data()+avail()) over a decompressed stream. fill(n) makes n bytes contiguous
// (unless the stream ends first); consume(n) drops them. The allocation always has kPad readable
// bytes after the window, so simdjson can parse in place. Pointers are invalidated by fill().
class InputBuffer {
 public:
  static constexpr size_t kPad = 64;

  // limit: the size the buffer may grow to (max_record_bytes plus some slack); chunk: read size.
  InputBuffer(std::unique_ptr<ByteStream> stream, uint64_t limit, size_t chunk = 1 << 20);

  size_t fill(size_t n);
  const char* data() const { return buf_.get() + pos_; }
  size_t avail() const { return end_ - pos_; }
  void consume(size_t n) { pos_ += n; }
  uint64_t offset() const { return base_ + pos_; }  // decompressed offset of data()
  bool eof() const { return eof_; }                  // the stream has returned 0
  // True once the stream has ended early (truncated or corrupt); error() says where.
  bool failed() const { return eof_ && !stream_->error().empty(); }
  const std::string& error() const { return stream_->error(); }
  const ByteStream& stream() const { return *stream_; }
  size_t capacity() const { return cap_; }  // bytes allocated now (tests check it stays bounded)

 private:
  void grow(size_t min_cap);

  std::unique_ptr<ByteStream> stream_;
  std::unique_ptr<char[]> buf_;
  size_t cap_ = 0, pos_ = 0, end_ = 0;
  uint64_t base_ = 0;  // decompressed offset of buf_[0]
  uint64_t limit_;
  size_t chunk_;
  bool eof_ = false;
};

// One line as split: text without "\n" or "\r\n". A line longer than the maximum is consumed
// without being stored; it comes back with too_long set, empty text and its length.
struct Line {
  std::string_view text;  // valid until the next call to LineSplitter::next
  uint64_t number = 0;    // 1-based
  uint64_t offset = 0;    // decompressed offset of its first byte
  uint64_t length = 0;    // bytes, without the line break
  bool too_long = false;
};

class LineSplitter {
 public:
  LineSplitter(InputBuffer& in, uint64_t max_line) : in_(in), max_(max_line) {}
  // False at the end of input. When the stream failed, an unterminated last line is dropped.
  bool next(Line& line);

 private:
  InputBuffer& in_;
  uint64_t max_;
  uint64_t number_ = 0;
  size_t pending_ = 0;  // bytes of the previous line (and its break) still to consume
};

// Everything a concrete reader shares: the input, the options, issue reporting.
class ReaderBase : public DocReader {
 public:
  ReaderBase(std::string path, std::unique_ptr<InputBuffer> in, const ReaderOptions& opt,
             InputFormat format);
  uint64_t bytes_read() const override { return in_->stream().compressed_offset(); }
  InputBuffer& input() { return *in_; }

 protected:
  // Reports an issue located by line (line > 0) or by offset.
  void issue(uint64_t line, uint64_t offset, const char* reason, std::string what);
  // Counts a record skipped on purpose (not an error): no message, only issue_counts().
  void count(const char* reason) { ++issue_counts_[reason]; }
  // Called once when the input is exhausted: reports a truncated/corrupt stream if there was one.
  void finish();
  // Fills doc.text with s, repairing invalid UTF-8 (reported as invalid_utf8, doc kept).
  // known_valid: the caller has already validated s.
  void set_text_repaired(RawDoc& doc, std::string_view s, uint64_t line, uint64_t offset,
                         bool known_valid = false);
  // Clears every field of doc except text, which the caller sets.
  static void reset(RawDoc& doc);
  // out = path + sep + n, reusing out's storage (per-document ids on the hot path).
  void set_place(std::string& out, char sep, uint64_t n) const;
  // Reports a record that is longer than max_record_bytes.
  void report_too_long(uint64_t line, uint64_t offset, uint64_t bytes, const char* what);
  // Buffers the whole (rest of the) input as one record and returns its size in `size`; false,
  // with the input drained and finished, when it is over max_record_bytes (reported as `what`
  // at `line`) or the stream is damaged (an incomplete record is dropped).
  bool fill_whole(size_t& size, uint64_t line, const char* what);

  std::string path_;
  std::unique_ptr<InputBuffer> in_;
  ReaderOptions opt_;
  uint64_t record_ = 0;  // records delivered so far
  bool finished_ = false;
};

// True for binary junk: a NUL byte anywhere, or mostly non-text bytes in the first KiB (control
// characters; with utf8_expected also invalid UTF-8 sequences; pass false when s is known valid).
bool text_looks_binary(std::string_view s, bool utf8_expected);
// True when s is well-formed UTF-8 (simdjson's vectorised check).
bool text_utf8_valid(std::string_view s);
// True when s holds only spaces, tabs, CR, LF, FF, VT.
bool text_is_blank(std::string_view s);

std::unique_ptr<DocReader> reader_text_make(std::string path, std::unique_ptr<InputBuffer> in,
                                            const ReaderOptions& opt);
std::unique_ptr<DocReader> reader_jsonl_make(std::string path, std::unique_ptr<InputBuffer> in,
                                             const ReaderOptions& opt);
std::unique_ptr<DocReader> reader_html_make(std::string path, std::unique_ptr<InputBuffer> in,
                                            const ReaderOptions& opt);
std::unique_ptr<DocReader> reader_warc_make(std::string path, std::unique_ptr<InputBuffer> in,
                                            const ReaderOptions& opt);

}  // namespace smelt
