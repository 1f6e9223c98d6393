// WARC reader (WARC/1.0 and 1.1): keeps `response` records holding HTML over HTTP (chunked and
// gzip/deflate bodies decoded, charset taken from the HTTP Content-Type) and `conversion` records
// (Common Crawl WET text). A damaged record is reported and the reader resynchronises on the next
// "WARC/1." line, so the good records after it are still read.
// Not here: HTML extraction, charset conversion, or writing WARC.
#include <zlib.h>

#include <charconv>
#include <cstring>

#include <fmt/format.h>

#include "smelt/text/readers_internal.hpp"

namespace smelt {
namespace {

constexpr size_t kMaxHeaderBytes = 256 << 10;  // a WARC header block longer than this is broken
constexpr std::string_view kVersion = "WARC/1.";

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ws(s.back())) s.remove_suffix(1);
  return s;
}

char lower_char(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) if (lower_char(a[i]) != lower_char(b[i])) return false;
  return true;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = lower_char(c);
  return out;
}

// "<urn:uuid:...>" -> "urn:uuid:..." (WARC/1.0 writers put angle brackets around ids and URIs).
std::string_view strip_angles(std::string_view s) {
  if (s.size() >= 2 && s.front() == '<' && s.back() == '>') return s.substr(1, s.size() - 2);
  return s;
}

// s quoted for a message: printable ASCII as is, other bytes as \xNN, at most 40 bytes.
std::string quoted_bytes(std::string_view s) {
  std::string out = "'";
  for (unsigned char c : s.substr(0, 40)) {
    if (c >= 0x20 && c < 0x7f && c != '\\') out.push_back(static_cast<char>(c));
    else out += fmt::format("\\x{:02x}", c);
  }
  return out + (s.size() > 40 ? "...'" : "'");
}

// Length of the header block at p (through its terminating empty line), or 0 if none in [p, p+n).
size_t header_block_end(const char* p, size_t n) {
  size_t i = 0;
  while (i < n) {
    const void* nl = std::memchr(p + i, '\n', n - i);
    if (!nl) return 0;
    const size_t k = static_cast<size_t>(static_cast<const char*>(nl) - p);
    if (k + 1 < n && p[k + 1] == '\n') return k + 2;
    if (k + 2 < n && p[k + 1] == '\r' && p[k + 2] == '\n') return k + 3;
    i = k + 1;
  }
  return 0;
}

// Calls fn(name, value) for each "Name: value" line of a header block after its first line.
// Returns false (with why) on a line that is not a header.
// Lenient mode (HTTP, where servers send odd lines) skips such lines instead.
template <class Fn>
bool for_each_header(std::string_view block, bool strict, std::string& why, Fn&& fn) {
  size_t pos = block.find('\n');
  size_t line_no = 1;
  while (pos != std::string_view::npos && pos + 1 < block.size()) {
    const size_t start = pos + 1;
    pos = block.find('\n', start);
    std::string_view line = block.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) break;
    if (line[0] == ' ' || line[0] == '\t') continue;  // folded continuation: not a field we use
    const size_t colon = line.find(':');
    std::string_view name = colon == std::string_view::npos ? std::string_view() : trim(line.substr(0, colon));
    bool token = !name.empty();
    for (char c : name) token = token && c > 0x20 && c < 0x7f;
    if (!token) {
      if (!strict) continue;
      why = fmt::format("header line {} is not 'Name: value' ({})", line_no, quoted_bytes(line));
      return false;
    }
    fn(name, trim(line.substr(colon + 1)));
  }
  return true;
}

bool parse_u64(std::string_view s, uint64_t& v) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size();
}

struct WarcHeaders {
  std::string_view type, id, uri;
  uint64_t length = 0;
};

bool warc_headers_parse(std::string_view block, WarcHeaders& h, std::string& why) {
  bool have_length = false;
  std::string_view length_text;
  if (!for_each_header(block, true, why, [&](std::string_view name, std::string_view value) {
        if (iequals(name, "WARC-Type")) h.type = value;
        else if (iequals(name, "WARC-Record-ID")) h.id = value;
        else if (iequals(name, "WARC-Target-URI")) h.uri = value;
        else if (iequals(name, "Content-Length")) { have_length = true; length_text = value; }
      })) {
    return false;
  }
  if (!have_length) { why = "no Content-Length header"; return false; }
  if (!parse_u64(length_text, h.length)) {
    why = fmt::format("Content-Length {} is not a number", quoted_bytes(length_text));
    return false;
  }
  return true;
}

// The charset parameter of a Content-Type value, lowercased; "" when absent.
// (A local copy on purpose: the readers do not depend on charset.cpp.)
std::string http_charset(std::string_view content_type) {
  const std::string ct = lower(content_type);
  size_t at = 0;
  while ((at = ct.find("charset", at)) != std::string::npos) {
    const bool param_start = at > 0 && (ct[at - 1] == ';' || ct[at - 1] == ' ' || ct[at - 1] == '\t');
    size_t i = at + 7;
    at = i;
    if (!param_start) continue;
    while (i < ct.size() && (ct[i] == ' ' || ct[i] == '\t')) ++i;
    if (i >= ct.size() || ct[i] != '=') continue;
    ++i;
    while (i < ct.size() && (ct[i] == ' ' || ct[i] == '\t')) ++i;
    if (i < ct.size() && (ct[i] == '"' || ct[i] == '\'')) ++i;
    size_t j = i;
    while (j < ct.size() && ct[j] != '"' && ct[j] != '\'' && ct[j] != ';' && ct[j] != ',' && !is_ws(ct[j])) ++j;
    return ct.substr(i, j - i);
  }
  return "";
}

bool looks_like_html(std::string_view body) {
  const std::string h = lower(body.substr(0, 1024));
  return h.find("<html") != std::string::npos || h.find("<!doctype html") != std::string::npos ||
         h.find("<head") != std::string::npos || h.find("<body") != std::string::npos;
}

struct HttpResponse {
  int status = 0;
  std::string_view content_type, transfer_encoding, content_encoding;
  size_t header_len = 0;  // bytes before the body
};

// Parses an HTTP response head. Returns false (with why) when it is not one.
bool http_response_parse(std::string_view block, HttpResponse& r, std::string& why) {
  r.header_len = header_block_end(block.data(), block.size());
  if (r.header_len == 0) { why = "HTTP response without the empty line that ends its headers"; return false; }
  const size_t sp = block.find(' ');
  if (sp == std::string_view::npos || sp + 4 > block.size() ||
      std::from_chars(block.data() + sp + 1, block.data() + sp + 4, r.status).ec != std::errc()) {
    why = "HTTP status line without a status code";
    return false;
  }
  return for_each_header(block.substr(0, r.header_len), false, why,
                         [&](std::string_view name, std::string_view value) {
                           if (iequals(name, "Content-Type")) r.content_type = value;
                           else if (iequals(name, "Transfer-Encoding")) r.transfer_encoding = value;
                           else if (iequals(name, "Content-Encoding")) r.content_encoding = value;
                         });
}

bool media_type_is_html(std::string_view content_type) {
  const std::string mt = lower(trim(content_type.substr(0, content_type.find(';'))));
  return mt == "text/html" || mt == "application/xhtml+xml";
}

enum class Decode { kOk, kNotEncoded, kTooLong, kCorrupt };

// Decodes an HTTP/1.1 chunked body into out. A body whose first chunk-size line does not parse is
// reported kNotEncoded (some archivers store the de-chunked body under the original header). A body
// cut short keeps the chunks before the cut.
Decode http_dechunk(std::string_view in, uint64_t limit, std::string& out) {
  out.clear();
  size_t pos = 0;
  bool first = true;
  while (pos < in.size()) {
    const size_t eol = in.find('\n', pos);
    if (eol == std::string_view::npos) break;
    std::string_view line = trim(in.substr(pos, eol - pos));
    line = line.substr(0, line.find(';'));  // chunk extensions
    uint64_t size = 0;
    auto [p, ec] = std::from_chars(line.data(), line.data() + line.size(), size, 16);
    if (ec != std::errc() || p != line.data() + line.size() || line.empty()) {
      if (first) return Decode::kNotEncoded;
      break;
    }
    first = false;
    pos = eol + 1;
    if (size == 0) break;
    const size_t take = static_cast<size_t>(std::min<uint64_t>(size, in.size() - pos));
    if (out.size() + take > limit) return Decode::kTooLong;
    out.append(in.data() + pos, take);
    pos += take;
    if (in.substr(pos, 2) == "\r\n") pos += 2;
    else if (in.substr(pos, 1) == "\n") pos += 1;
  }
  return Decode::kOk;
}

// Inflates a gzip/zlib (or raw deflate) body into out, at most limit bytes. A body cut short
// keeps what decoded.
Decode http_inflate(std::string_view in, int window_bits, uint64_t limit, std::string& out) {
  out.clear();
  z_stream zs;
  std::memset(&zs, 0, sizeof(zs));
  if (inflateInit2(&zs, window_bits) != Z_OK) return Decode::kCorrupt;
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(std::min<size_t>(in.size(), 1u << 30));
  Decode result = Decode::kOk;
  for (;;) {
    const size_t have = out.size();
    if (have >= limit + 1) { result = Decode::kTooLong; break; }
    const size_t grow = std::min<size_t>(std::max<size_t>(have, 64 << 10), limit + 1 - have);
    out.resize(have + grow);
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + have);
    zs.avail_out = static_cast<uInt>(grow);
    const int r = inflate(&zs, Z_NO_FLUSH);
    out.resize(have + grow - zs.avail_out);
    if (out.size() > limit) { result = Decode::kTooLong; break; }
    if (r == Z_STREAM_END) break;
    if (r == Z_OK) continue;
    if (r == Z_BUF_ERROR && zs.avail_out > 0) break;  // input ended early: keep what decoded
    if (r == Z_BUF_ERROR) continue;
    result = Decode::kCorrupt;
    break;
  }
  inflateEnd(&zs);
  return result;
}

class WarcReader final : public ReaderBase {
 public:
  WarcReader(std::string path, std::unique_ptr<InputBuffer> in, const ReaderOptions& opt)
      : ReaderBase(std::move(path), std::move(in), opt, InputFormat::kWarc) {}

  bool next(RawDoc& doc) override {
    while (!done_) {
      if (!skip_line_breaks()) break;
      const uint64_t rec_off = in_->offset();
      size_t a = in_->fill(kVersion.size());
      if (a < kVersion.size() || std::memcmp(in_->data(), kVersion.data(), kVersion.size()) != 0) {
        if (in_->failed()) break;
        issue(0, rec_off, "bad_warc_header",
              "expected a 'WARC/1.x' version line; skipping to the next record");
        resync(false);
        continue;
      }
      const size_t hlen = find_header_end();
      if (hlen == 0) {
        if (in_->failed()) break;
        issue(0, rec_off, "bad_warc_header",
              in_->eof() && in_->avail() < kMaxHeaderBytes
                  ? "the file ends inside a WARC header; it was skipped"
                  : "WARC header block without its terminating empty line; skipping to the next record");
        resync(false);
        continue;
      }
      WarcHeaders h;
      std::string why;
      if (!warc_headers_parse(std::string_view(in_->data(), hlen), h, why)) {
        issue(0, rec_off, "bad_warc_header", why + "; skipping to the next record");
        resync(false);
        continue;
      }
      // Copy what outlives the buffer window (the window moves on the next fill).
      const bool is_response = h.type == "response", is_conversion = h.type == "conversion";
      const bool keep = is_response || is_conversion;
      if (keep) {
        id_.assign(strip_angles(h.id));
        uri_.assign(strip_angles(h.uri));
      }
      const uint64_t n = h.length;
      in_->consume(hlen);

      if (n > opt_.max_record_bytes) {
        skip_large(n, keep, is_response, rec_off);
        continue;
      }
      a = in_->fill(n + 4);
      size_t trailer = 0;
      if (!block_trailer(n, a, trailer)) {
        if (in_->failed()) break;
        issue(0, rec_off, "bad_warc_length",
              a < n ? fmt::format("Content-Length {} runs past the end of the file; skipping to the "
                                  "next record", n)
                    : fmt::format("the {}-byte block (Content-Length) is not followed by CRLF CRLF; "
                                  "skipping to the next record", n));
        resync(true);
        continue;
      }
      const std::string_view block(in_->data(), n);
      bool ok = false;
      if (is_response) ok = take_response(block, rec_off, doc);
      else if (is_conversion) ok = take_conversion(block, rec_off, doc);
      in_->consume(n + trailer);
      if (ok) return true;
    }
    done_ = true;
    finish();
    return false;
  }

 private:
  // Skips CR/LF between records. False at end of input.
  bool skip_line_breaks() {
    for (;;) {
      size_t a = in_->fill(1);
      if (a == 0) return false;
      const char* p = in_->data();
      size_t i = 0;
      while (i < a && (p[i] == '\r' || p[i] == '\n')) ++i;
      in_->consume(i);
      if (i < a) return true;
    }
  }

  // Length of the header block at the current position, or 0 when it has no end in reach.
  size_t find_header_end() {
    for (size_t want : {size_t(64) << 10, kMaxHeaderBytes}) {
      const size_t a = in_->fill(want);
      const size_t end = header_block_end(in_->data(), std::min(a, kMaxHeaderBytes));
      if (end) return end;
      if (a < want) return 0;
    }
    return 0;
  }

  // Checks what follows an n-byte block in a window of a bytes: CRLF CRLF (or a shorter run of
  // line breaks before the next "WARC/1." or a clean end of file). Sets the trailer length.
  bool block_trailer(uint64_t n, size_t a, size_t& trailer) {
    if (a < n) return false;
    const char* p = in_->data() + n;
    const size_t rest = a - n;
    if (rest >= 4 && std::memcmp(p, "\r\n\r\n", 4) == 0) { trailer = 4; return true; }
    size_t k = 0;
    while (k < rest && k < 4 && (p[k] == '\r' || p[k] == '\n')) ++k;
    if (k < rest && !(p[k] == '\r' || p[k] == '\n')) {
      // a short trailer is fine when the next record starts right after it
      const size_t more = in_->fill(n + k + kVersion.size());
      p = in_->data() + n;
      if (k > 0 && more >= n + k + kVersion.size() && std::memcmp(p + k, kVersion.data(), kVersion.size()) == 0) {
        trailer = k;
        return true;
      }
      return false;
    }
    if (k == rest && in_->eof() && !in_->failed()) { trailer = k; return true; }  // block ends the file
    if (k == 4) { trailer = 4; return true; }  // "\n\n\n\n" and the like
    return false;
  }

  // Scans forward for "WARC/1." at the start of a line and stops there (or at the end of input).
  void resync(bool at_line_start) {
    if (at_line_start && in_->fill(kVersion.size()) >= kVersion.size() &&
        std::memcmp(in_->data(), kVersion.data(), kVersion.size()) == 0) {
      return;
    }
    static constexpr std::string_view kPattern = "\nWARC/1.";
    for (;;) {
      const size_t a = in_->fill(kPattern.size());
      if (a < kPattern.size()) { in_->consume(a); return; }
      const void* hit = memmem(in_->data(), a, kPattern.data(), kPattern.size());
      if (hit) {
        in_->consume(static_cast<size_t>(static_cast<const char*>(hit) - in_->data()) + 1);
        return;
      }
      in_->consume(a - (kPattern.size() - 1));
    }
  }

  // Consumes a block too large to keep, without storing it. A record boundary
  // ("\r\n\r\nWARC/1.") inside the claimed length means the length was wrong: stop there.
  void skip_large(uint64_t n, bool keep, bool is_response, uint64_t rec_off) {
    if (keep && is_response) {
      // Peek at the HTTP head: oversized images and the like are skipped silently.
      const size_t a = in_->fill(64 << 10);
      HttpResponse r;
      std::string why;
      const std::string_view peek(in_->data(), a);
      if (peek.substr(0, 5) == "HTTP/" && http_response_parse(peek, r, why) &&
          !r.content_type.empty() && !media_type_is_html(r.content_type)) {
        keep = false;
        count("non_html");
      }
    }
    static constexpr std::string_view kBoundary = "\r\n\r\nWARC/1.";
    uint64_t left = n;
    for (;;) {
      const size_t a = in_->fill(kBoundary.size());
      const char* p = in_->data();
      const size_t window = static_cast<size_t>(std::min<uint64_t>(a, left + kBoundary.size()));
      const void* hit = memmem(p, window, kBoundary.data(), kBoundary.size());
      if (hit) {
        const size_t i = static_cast<size_t>(static_cast<const char*>(hit) - p);
        in_->consume(i + 4);
        if (i == left) break;  // the block ended where its length said
        issue(0, rec_off, "bad_warc_length",
              fmt::format("Content-Length {} runs past the start of the next record; skipping to it", n));
        return;
      }
      if (a < left && in_->eof()) {  // the file ends inside the block
        in_->consume(a);
        if (!in_->failed()) {
          issue(0, rec_off, "bad_warc_length",
                fmt::format("Content-Length {} runs past the end of the file", n));
        }
        return;
      }
      if (a >= left + 4 || (in_->eof() && a >= left)) {
        // block and trailer in view, no boundary: accept any run of line breaks as the trailer
        in_->consume(static_cast<size_t>(left));
        break;
      }
      const size_t take = static_cast<size_t>(std::min<uint64_t>(a - (kBoundary.size() - 1), left));
      in_->consume(take);
      left -= take;
    }
    if (keep) report_too_long(0, rec_off, n, "the WARC record");
  }

  bool take_response(std::string_view block, uint64_t rec_off, RawDoc& doc) {
    if (block.substr(0, 5) != "HTTP/") { count("non_http"); return false; }
    HttpResponse r;
    std::string why;
    if (!http_response_parse(block, r, why)) {
      issue(0, rec_off, "bad_http_header", why + "; the record was skipped");
      return false;
    }
    if (r.status < 200 || r.status > 299) { count("http_status"); return false; }
    std::string_view body = block.substr(r.header_len);
    const bool html = r.content_type.empty() ? looks_like_html(body) : media_type_is_html(r.content_type);
    if (!html) { count("non_html"); return false; }

    if (lower(r.transfer_encoding).find("chunked") != std::string::npos) {
      switch (http_dechunk(body, opt_.max_record_bytes, dechunked_)) {
        case Decode::kOk: body = dechunked_; break;
        case Decode::kTooLong:
          report_too_long(0, rec_off, dechunked_.size(), "the de-chunked HTTP body");
          return false;
        default: break;  // not chunked after all: read as it is
      }
    }
    const std::string coding = lower(trim(r.content_encoding));
    if (!coding.empty() && coding != "identity") {
      int bits = 0;
      if ((coding == "gzip" || coding == "x-gzip") && body.size() >= 2 &&
          static_cast<unsigned char>(body[0]) == 0x1f && static_cast<unsigned char>(body[1]) == 0x8b) {
        bits = 32 + MAX_WBITS;
      } else if (coding == "deflate") {
        bits = (!body.empty() && (static_cast<unsigned char>(body[0]) & 0x0f) == 8) ? MAX_WBITS : -MAX_WBITS;
      } else if (coding != "gzip" && coding != "x-gzip") {
        issue(0, rec_off, "unsupported_encoding",
              fmt::format("HTTP Content-Encoding {} is not supported (gzip and deflate are); the "
                          "record was skipped", quoted_bytes(coding)));
        return false;
      }
      if (bits != 0) {  // (a "gzip" body without the gzip magic was stored decoded: read as it is)
        Decode d = http_inflate(body, bits, opt_.max_record_bytes, inflated_);
        if (d == Decode::kCorrupt && bits == MAX_WBITS) d = http_inflate(body, -MAX_WBITS, opt_.max_record_bytes, inflated_);
        if (d == Decode::kTooLong) {
          report_too_long(0, rec_off, inflated_.size(), "the decompressed HTTP body");
          return false;
        }
        if (d == Decode::kCorrupt) {
          issue(0, rec_off, "bad_content_encoding",
                fmt::format("HTTP body is not valid {} data; the record was skipped", coding));
          return false;
        }
        body = inflated_;
      }
    }
    if (text_is_blank(body)) { count("empty"); return false; }
    reset(doc);
    doc.text.assign(body.data(), body.size());
    doc.is_html = true;
    doc.charset = http_charset(r.content_type);
    fill_ids(rec_off, doc);
    return true;
  }

  bool take_conversion(std::string_view block, uint64_t rec_off, RawDoc& doc) {
    if (text_is_blank(block)) { count("empty"); return false; }
    reset(doc);
    set_text_repaired(doc, block, 0, rec_off);
    fill_ids(rec_off, doc);
    return true;
  }

  void fill_ids(uint64_t rec_off, RawDoc& doc) {
    set_place(doc.source, '@', rec_off);
    doc.id = id_.empty() ? doc.source : id_;
    doc.url = uri_;
    doc.record = record_++;
  }

  bool done_ = false;
  std::string id_, uri_;                // of the record being read
  std::string dechunked_, inflated_;    // reused body buffers
};

}  // namespace

std::unique_ptr<DocReader> reader_warc_make(std::string path, std::unique_ptr<InputBuffer> in,
                                            const ReaderOptions& opt) {
  return std::make_unique<WarcReader>(std::move(path), std::move(in), opt);
}

}  // namespace smelt
