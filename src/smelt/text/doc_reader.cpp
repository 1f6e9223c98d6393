// The parts every document reader shares: format detection, the factory, issue reporting, the
// read buffer and the bounded-memory line splitter.
// Not here: the formats themselves (reader_text.cpp, reader_jsonl.cpp, reader_html.cpp, reader_warc.cpp).
#include "smelt/text/doc_reader.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <fmt/format.h>
#include <simdjson.h>
#include <spdlog/spdlog.h>

#include "smelt/common/utf8.hpp"
#include "smelt/text/readers_internal.hpp"

namespace smelt {

const char* input_format_name(InputFormat f) {
  switch (f) {
    case InputFormat::kText: return "text";
    case InputFormat::kJsonl: return "jsonl";
    case InputFormat::kHtml: return "html";
    case InputFormat::kWarc: return "warc";
    default: return "unknown";
  }
}

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>((c >= 'A' && c <= 'Z') ? c + 32 : c);
  return out;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v'; }

}  // namespace

InputFormat input_format_detect(std::string_view path, std::string_view head) {
  std::string name = lower(path.substr(path.find_last_of('/') == std::string_view::npos
                                           ? 0 : path.find_last_of('/') + 1));
  for (std::string_view z : {".gz", ".zst", ".zstd"}) {
    if (ends_with(name, z)) { name.resize(name.size() - z.size()); break; }
  }
  const size_t dot = name.find_last_of('.');
  if (dot != std::string::npos) {
    std::string_view ext = std::string_view(name).substr(dot + 1);
    if (ext == "warc" || ext == "wet") return InputFormat::kWarc;
    if (ext == "jsonl" || ext == "json" || ext == "ndjson") return InputFormat::kJsonl;
    if (ext == "html" || ext == "htm" || ext == "xhtml") return InputFormat::kHtml;
    if (ext == "txt" || ext == "text" || ext == "md") return InputFormat::kText;
  }
  head = head.substr(0, 1024);
  std::string_view body = head;
  if (body.substr(0, 3) == "\xEF\xBB\xBF") body.remove_prefix(3);  // UTF-8 byte order mark
  size_t i = 0;
  while (i < body.size() && is_space(body[i])) ++i;
  body.remove_prefix(i);
  if (body.substr(0, 7) == "WARC/1.") return InputFormat::kWarc;
  if (!body.empty() && body[0] == '{') return InputFormat::kJsonl;
  const std::string h = lower(head);
  for (std::string_view tag : {"<!doctype html", "<html", "<head"}) {
    if (h.find(tag) != std::string::npos) return InputFormat::kHtml;
  }
  return InputFormat::kText;
}

void DocReader::report(ReadIssue issue) {
  ++issue_counts_[issue.reason];
  if (on_issue) on_issue(issue);
}

// ---- InputBuffer --------------------------------------------------------------------------

InputBuffer::InputBuffer(std::unique_ptr<ByteStream> stream, uint64_t limit, size_t chunk)
    : stream_(std::move(stream)), limit_(limit), chunk_(chunk) {
  grow(chunk_ + kPad);
}

void InputBuffer::grow(size_t min_cap) {
  size_t cap = std::max(min_cap, static_cast<size_t>(std::min<uint64_t>(2 * uint64_t(cap_), limit_)));
  std::unique_ptr<char[]> nb(new char[cap]);
  if (end_ > pos_) std::memcpy(nb.get(), buf_.get() + pos_, end_ - pos_);
  base_ += pos_;
  end_ -= pos_;
  pos_ = 0;
  buf_ = std::move(nb);
  cap_ = cap;
  std::memset(buf_.get() + end_, 0, kPad);
}

size_t InputBuffer::fill(size_t n) {
  size_t avail = end_ - pos_;
  if (avail >= n || eof_) return avail;
  if (pos_ > 0) {  // slide the window to the front
    if (avail > 0) std::memmove(buf_.get(), buf_.get() + pos_, avail);
    base_ += pos_;
    pos_ = 0;
    end_ = avail;
  }
  while (end_ < n && !eof_) {
    // Keep reads large: grow when the request does not fit or little room is left.
    const size_t room = cap_ - kPad - end_;
    if (room < n - end_ || room < chunk_ / 4) {
      const size_t want = std::max(n, end_ + chunk_ / 4) + kPad;
      if (want > cap_) grow(want);
    }
    size_t r = stream_->read(buf_.get() + end_, cap_ - kPad - end_);
    if (r == 0) { eof_ = true; break; }
    end_ += r;
  }
  std::memset(buf_.get() + end_, 0, kPad);
  return end_ - pos_;
}

// ---- LineSplitter -------------------------------------------------------------------------

bool LineSplitter::next(Line& line) {
  if (pending_) { in_.consume(pending_); pending_ = 0; }
  size_t scanned = 0;
  for (;;) {
    const size_t avail = in_.avail();
    const char* p = in_.data();
    const void* nl = scanned < avail ? std::memchr(p + scanned, '\n', avail - scanned) : nullptr;
    size_t len = nl ? static_cast<size_t>(static_cast<const char*>(nl) - p) : avail;
    if (len > max_) {
      // Too long: consume it without storing, up to and including its line break.
      line = Line{};
      line.number = ++number_;
      line.offset = in_.offset();
      line.too_long = true;
      uint64_t skipped = 0;
      for (;;) {
        const size_t a = in_.avail();
        const char* q = in_.data();
        const void* e = std::memchr(q, '\n', a);
        if (e) {
          size_t k = static_cast<size_t>(static_cast<const char*>(e) - q);
          skipped += k;
          in_.consume(k + 1);
          break;
        }
        skipped += a;
        in_.consume(a);
        if (in_.fill(1) == 0) break;
      }
      line.length = skipped;
      return true;
    }
    if (nl || in_.eof()) {
      if (!nl) {
        if (avail == 0) return false;
        if (in_.failed()) { in_.consume(avail); return false; }  // cut by the damage: dropped
      }
      pending_ = nl ? len + 1 : len;
      if (len > 0 && p[len - 1] == '\r') --len;
      line = Line{};
      line.text = std::string_view(p, len);
      line.number = ++number_;
      line.offset = in_.offset();
      line.length = len;
      return true;
    }
    scanned = avail;
    in_.fill(avail + 1);
  }
}

// ---- ReaderBase ---------------------------------------------------------------------------

ReaderBase::ReaderBase(std::string path, std::unique_ptr<InputBuffer> in, const ReaderOptions& opt,
                       InputFormat format)
    : path_(std::move(path)), in_(std::move(in)), opt_(opt) {
  format_ = format;
}

void ReaderBase::issue(uint64_t line, uint64_t offset, const char* reason, std::string what) {
  ReadIssue is;
  is.file = path_;
  is.line = line;
  is.offset = offset;
  is.reason = reason;
  is.message = line > 0 ? fmt::format("{} line {}: {}", path_, line, what)
                        : fmt::format("{} at offset {}: {}", path_, offset, what);
  report(std::move(is));
}

void ReaderBase::finish() {
  if (finished_) return;
  finished_ = true;
  if (in_->failed()) {
    ReadIssue is;
    is.file = path_;
    is.offset = in_->offset();
    is.reason = "truncated_stream";
    is.message = fmt::format(
        "{}: {} (decompressed offset {}); the records before the damage were kept, the rest of "
        "the file was skipped", path_, in_->error(), in_->offset());
    report(std::move(is));
  }
}

void ReaderBase::reset(RawDoc& doc) {
  doc.is_html = false;
  doc.charset.clear();
  doc.id.clear();
  doc.source.clear();
  doc.url.clear();
  doc.meta_json.clear();
  doc.record = 0;
}

void ReaderBase::set_text_repaired(RawDoc& doc, std::string_view s, uint64_t line, uint64_t offset,
                                   bool known_valid) {
  if (known_valid || simdjson::validate_utf8(s.data(), s.size())) {
    doc.text.assign(s.data(), s.size());
    return;
  }
  doc.text.clear();
  const size_t first = utf8_first_invalid(s);
  const size_t n = utf8_repair_append(s, doc.text);
  if (n == 0) return;
  issue(line, offset, "invalid_utf8",
        fmt::format("invalid UTF-8 at byte {} of the record ({} bad byte{} replaced by U+FFFD); "
                    "the document was kept", first, n, n == 1 ? "" : "s"));
}

void ReaderBase::set_place(std::string& out, char sep, uint64_t n) const {
  char digits[24];
  const auto r = std::to_chars(digits, digits + sizeof(digits), n);
  out.assign(path_);
  out.push_back(sep);
  out.append(digits, r.ptr);
}

void ReaderBase::report_too_long(uint64_t line, uint64_t offset, uint64_t bytes, const char* what) {
  issue(line, offset, "record_too_long",
        fmt::format("{} of {} bytes is longer than max_record_bytes ({}); it was skipped "
                    "(raise max_record_bytes to keep it)", what, bytes, opt_.max_record_bytes));
}

bool ReaderBase::fill_whole(size_t& size, uint64_t line, const char* what) {
  const uint64_t max = opt_.max_record_bytes;
  size_t a = in_->fill(max + 1);
  if (a > max) {  // too long: drain it without keeping it
    uint64_t total = 0;
    while (a > 0) { total += a; in_->consume(a); a = in_->fill(1); }
    if (!in_->failed()) report_too_long(line, 0, total, what);
    finish();
    return false;
  }
  if (in_->failed()) { in_->consume(a); finish(); return false; }  // incomplete: dropped
  size = a;
  return true;
}

// ---- helpers ------------------------------------------------------------------------------

bool text_utf8_valid(std::string_view s) { return simdjson::validate_utf8(s.data(), s.size()); }

bool text_is_blank(std::string_view s) {
  for (char c : s) if (!is_space(c)) return false;
  return true;
}

// Control characters other than \t \n \v \f \r and ESC, 16 bytes at a time (it runs on every
// line of a text file, so a byte loop showed up as the top cost of line-mode reading).
static size_t count_control_chars(std::string_view s) {
  const auto* u = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = 0, i = 0;
#if defined(__SSE2__)
  const __m128i k1f = _mm_set1_epi8(0x1f), k9 = _mm_set1_epi8(9), k4 = _mm_set1_epi8(4);
  const __m128i kEsc = _mm_set1_epi8(0x1b), kDel = _mm_set1_epi8(0x7f);
  for (; i + 16 <= s.size(); i += 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(u + i));
    const __m128i low = _mm_cmpeq_epi8(_mm_min_epu8(v, k1f), v);       // v <= 0x1f
    const __m128i w = _mm_sub_epi8(v, k9);
    const __m128i space = _mm_or_si128(_mm_cmpeq_epi8(_mm_min_epu8(w, k4), w),  // 9..13
                                       _mm_cmpeq_epi8(v, kEsc));
    const __m128i ctrl = _mm_or_si128(_mm_andnot_si128(space, low), _mm_cmpeq_epi8(v, kDel));
    n += static_cast<size_t>(__builtin_popcount(static_cast<unsigned>(_mm_movemask_epi8(ctrl))));
  }
#endif
  for (; i < s.size(); ++i) {
    const unsigned c = u[i];
    const bool space = (c - 9u <= 4u) || c == 0x1bu;
    n += (c < 0x20u && !space) || c == 0x7fu;
  }
  return n;
}

bool text_looks_binary(std::string_view s, bool utf8_expected) {
  if (std::memchr(s.data(), 0, s.size())) return true;
  const std::string_view head = s.substr(0, 1024);
  const size_t ctrl = count_control_chars(head);
  if (ctrl * 16 > head.size()) return true;  // text has (almost) no control characters
  if (!utf8_expected || simdjson::validate_utf8(head.data(), head.size())) return false;
  size_t bad = 0;
  for (size_t i = 0; i < head.size();) {
    const size_t at = i;
    if (utf8_next(head, i) == kReplacementChar && i == at + 1 && at + 4 <= head.size()) ++bad;
  }
  return (ctrl + bad) * 10 > head.size() * 3;  // more than 30% of it is not text
}

// ---- factory ------------------------------------------------------------------------------

std::unique_ptr<DocReader> doc_reader_open(const std::string& path, const ReaderOptions& opt,
                                           Status& err) {
  if (opt.max_record_bytes == 0) {
    err = Status::error("max_record_bytes must be greater than 0");
    return nullptr;
  }
  Status serr;
  std::unique_ptr<ByteStream> stream = byte_stream_open(path, serr);
  if (!stream) { err = serr; return nullptr; }
  constexpr size_t kChunk = 1 << 20;
  auto in = std::make_unique<InputBuffer>(std::move(stream), opt.max_record_bytes + 2 * kChunk, kChunk);
  in->fill(1024);
  const InputFormat f =
      input_format_detect(path, std::string_view(in->data(), std::min<size_t>(in->avail(), 1024)));
  err = Status::ok();
  switch (f) {
    case InputFormat::kJsonl: return reader_jsonl_make(path, std::move(in), opt);
    case InputFormat::kHtml: return reader_html_make(path, std::move(in), opt);
    case InputFormat::kWarc: return reader_warc_make(path, std::move(in), opt);
    default: return reader_text_make(path, std::move(in), opt);
  }
}

void read_from_position(const ReadFromPosition& r) {
  const std::vector<std::string>& files = *r.files;
  uint64_t bytes_before = 0;
  std::vector<std::string> pending;
  bool skipping = false;
  auto log = [&](const std::string& msg) {
    const size_t k = (*r.logged)++;
    if (k < r.max_logged) spdlog::warn("{}", msg);
    else if (k == r.max_logged) spdlog::warn("further input problems are counted in {}, not logged", r.counted_in);
  };
  for (uint32_t f = 0; f < files.size() && !r.stopped(); ++f) {
    if (f < r.from_file) {
      bytes_before += (*r.sizes)[f];
      continue;
    }
    *r.bytes_progress = bytes_before;
    Status err;
    auto reader = doc_reader_open(files[f], r.options, err);
    uint64_t rec = 0;
    pending.clear();
    if (!reader) {
      if (!(f == r.from_file && r.from_rec > 0)) {
        pending.push_back("unreadable_file");
        log(err.message() + "; the file was skipped");
      }
    } else {
      reader->on_issue = [&](const ReadIssue& is) {
        if (skipping) return;
        pending.push_back(is.reason);
        log(is.message);
      };
      RawDoc d;
      for (;;) {
        skipping = f == r.from_file && rec < r.from_rec;
        if (!reader->next(d)) break;
        *r.bytes_progress = bytes_before + reader->bytes_read();
        if (skipping) {
          ++rec;
          pending.clear();
          continue;
        }
        std::vector<std::string> issues = std::move(pending);
        pending.clear();
        if (!r.doc(f, rec++, d, issues)) return;
        d = RawDoc{};
        if (r.stopped()) break;
      }
      skipping = false;
    }
    if (r.stopped()) break;
    if (!r.file_end(f, rec, pending)) return;
    pending.clear();
    bytes_before += (*r.sizes)[f];
    *r.bytes_progress = bytes_before;
  }
}

}  // namespace smelt
