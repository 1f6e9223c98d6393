// Document readers: one file in, a stream of raw documents out, for every input format prep
// accepts (plain text, JSONL, HTML, WARC response/conversion records), each optionally gzip- or
// zstd-compressed. Readers stream: memory is bounded by max_record_bytes, never by file size.
// Not here: HTML extraction (html_extract.hpp) and charset conversion (charset.hpp).
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "smelt/common/enum_names.hpp"
#include "smelt/common/status.hpp"

namespace smelt {

enum class InputFormat { kUnknown, kText, kJsonl, kHtml, kWarc };
const char* input_format_name(InputFormat f);

// One record as read, before extraction and scoring.
struct RawDoc {
  std::string text;        // payload: plain text (UTF-8 after repair) or HTML bytes (is_html)
  bool is_html = false;    // text is HTML still to be extracted (charset not yet applied)
  std::string charset;     // charset from the HTTP Content-Type header or reader knowledge; may be empty
  std::string id;          // stable id: WARC-Record-ID, JSONL id field, else "<file>:<line>"
  std::string source;      // where it came from: "<file>:<line>" or "<file>@<byte offset>"
  std::string url;         // WARC-Target-URI or a JSONL url field, when known
  std::string meta_json;   // JSONL: the other fields as a JSON object text ("{...}"); else empty
  uint64_t record = 0;     // 0-based record index within the file (a resume position)
};

// What one document of a plain-text file is: the whole file, a blank-line separated paragraph, or
// a line ([prep.read] text_unit).
enum class TextUnit { kFile, kParagraph, kLine };
inline constexpr EnumName<TextUnit> kTextUnitNames[] = {
    {TextUnit::kFile, "file"}, {TextUnit::kParagraph, "paragraph"}, {TextUnit::kLine, "line"}};
inline std::span<const EnumName<TextUnit>> enum_names(TextUnit) { return kTextUnitNames; }

struct ReaderOptions {
  std::string text_field = "text";   // JSONL field holding the text
  std::string id_field = "id";       // JSONL field holding the id, when present
  std::string url_field = "url";     // JSONL field holding the URL, when present
  uint64_t max_record_bytes = 64ull << 20;  // longer lines / records are skipped and counted
  TextUnit text_unit = TextUnit::kFile;  // plain text: one doc per file, paragraph or line
};

// A record that was skipped: where, and why. `reason` is a short stable key used in stats
// ("invalid_json", "missing_text_field", "record_too_long", "truncated_stream", "bad_warc_header",
//  "invalid_utf8" (repaired, not skipped), "binary", ...).
struct ReadIssue {
  std::string file;
  uint64_t line = 0;     // 1-based line, 0 when not line-based
  uint64_t offset = 0;   // byte offset in the decompressed stream
  std::string reason;
  std::string message;   // a sentence a person can act on
};

class DocReader {
 public:
  virtual ~DocReader() = default;
  // Fills doc with the next good record; returns false at the end of the file (or when the rest
  // is unreadable: a truncated stream ends the file after reporting an issue).
  virtual bool next(RawDoc& doc) = 0;
  // Bytes consumed from the file on disk so far (compressed bytes for .gz/.zst): progress.
  virtual uint64_t bytes_read() const = 0;
  InputFormat format() const { return format_; }
  // Every skipped/repaired record is reported here (called on the reading thread).
  std::function<void(const ReadIssue&)> on_issue;
  // Counts of issues by reason, including ones not reported through on_issue.
  const std::map<std::string, uint64_t>& issue_counts() const { return issue_counts_; }

 protected:
  void report(ReadIssue issue);
  InputFormat format_ = InputFormat::kUnknown;
  std::map<std::string, uint64_t> issue_counts_;
};

// Detects the format from the name (after stripping .gz/.zst) and, where the name says nothing,
// from the first decompressed bytes. Opens the file. On failure returns null and sets err.
std::unique_ptr<DocReader> doc_reader_open(const std::string& path, const ReaderOptions& opt,
                                           Status& err);

// Files read in order from a resume position: what `smelt prep` and `smelt tokenize` share.
// Records of files[from_file] before from_rec are read and dropped (with their problems); every
// later record goes to `doc` with the input problems met since the previous record, and each file's
// end to `file_end` with its record count and the problems after its last record (an unreadable
// file is one problem, "unreadable_file", unless the resume point is inside it). Problems are logged
// through spdlog up to max_logged in all (`logged` counts them across calls). `bytes_progress` is
// the bytes read of all files so far. Stops when a callback returns false or `stopped()` is true
// (between records); a file interrupted that way gets no file_end.
struct ReadFromPosition {
  const std::vector<std::string>* files = nullptr;
  const std::vector<uint64_t>* sizes = nullptr;  // on disk, for progress
  uint32_t from_file = 0;
  uint64_t from_rec = 0;
  ReaderOptions options;
  std::atomic<uint64_t>* bytes_progress = nullptr;
  std::atomic<size_t>* logged = nullptr;
  size_t max_logged = 50;
  const char* counted_in = "the stats";  // where the problems not logged are counted
  std::function<bool(uint32_t file, uint64_t rec, RawDoc& doc, std::vector<std::string>& issues)> doc;
  std::function<bool(uint32_t file, uint64_t rec, std::vector<std::string>& issues)> file_end;
  std::function<bool()> stopped;
};
void read_from_position(const ReadFromPosition& r);

// Detection alone, for a name and the first bytes of its decompressed content.
InputFormat input_format_detect(std::string_view path, std::string_view head);

}  // namespace smelt
