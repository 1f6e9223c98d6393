// Plain-text reader: a whole file, each blank-line separated paragraph, or each line becomes one
// document; invalid UTF-8 is repaired and reported, binary junk is skipped.
// Not here: charset conversion (text is taken as UTF-8) or any cleaning beyond that.
#include <fmt/format.h>

#include "smelt/text/readers_internal.hpp"

namespace smelt {
namespace {

class TextReader final : public ReaderBase {
 public:
  TextReader(std::string path, std::unique_ptr<InputBuffer> in, const ReaderOptions& opt)
      : ReaderBase(std::move(path), std::move(in), opt, InputFormat::kText),
        lines_(*in_, opt.max_record_bytes), unit_(opt.text_unit) {}

  bool next(RawDoc& doc) override {
    switch (unit_) {
      case TextUnit::kFile: return next_file(doc);
      case TextUnit::kParagraph: return next_paragraph(doc);
      default: return next_line(doc);
    }
  }

 private:
  // Turns s into doc unless it is blank or binary; false when the record was skipped.
  bool make_doc(std::string_view s, uint64_t line, uint64_t offset, RawDoc& doc) {
    if (s.substr(0, 3) == "\xEF\xBB\xBF" && offset == 0) s.remove_prefix(3);  // byte order mark
    if (text_is_blank(s)) return false;
    const bool valid = text_utf8_valid(s);
    if (text_looks_binary(s, !valid)) {
      issue(line, offset, "binary", "binary data (NUL bytes or mostly non-text bytes); the record was skipped");
      return false;
    }
    reset(doc);
    set_text_repaired(doc, s, line, offset, valid);
    set_place(doc.id, ':', line);
    doc.source = doc.id;
    doc.record = record_++;
    return true;
  }

  bool next_file(RawDoc& doc) {
    if (done_) return false;
    done_ = true;
    size_t a = 0;
    if (!fill_whole(a, 1, "the file")) return false;
    bool ok = make_doc(std::string_view(in_->data(), a), 1, 0, doc);
    in_->consume(a);
    finish();
    return ok;
  }

  bool next_line(RawDoc& doc) {
    Line line;
    while (lines_.next(line)) {
      if (line.too_long) { report_too_long(line.number, line.offset, line.length, "the line"); continue; }
      if (make_doc(line.text, line.number, line.offset, doc)) return true;
    }
    finish();
    return false;
  }

  bool next_paragraph(RawDoc& doc) {
    para_.clear();
    uint64_t first = 0, first_offset = 0;
    bool too_long = false;
    Line line;
    for (;;) {
      const bool more = lines_.next(line);
      const bool blank = more && !line.too_long && text_is_blank(line.text);
      if (!more || blank) {
        if (first != 0 && !too_long && make_doc(para_, first, first_offset, doc)) return true;
        if (!more) break;
        para_.clear();
        first = 0;
        too_long = false;
        continue;
      }
      if (first == 0) { first = line.number; first_offset = line.offset; }
      if (too_long) continue;
      const uint64_t size = para_.size() + (para_.empty() ? 0 : 1) + line.length;
      if (line.too_long || size > opt_.max_record_bytes) {
        report_too_long(first, first_offset, size, "the paragraph");
        too_long = true;
        para_.clear();
        continue;
      }
      if (!para_.empty()) para_.push_back('\n');
      para_.append(line.text);
    }
    finish();
    return false;
  }

  LineSplitter lines_;
  TextUnit unit_;
  std::string para_;
  bool done_ = false;
};

}  // namespace

std::unique_ptr<DocReader> reader_text_make(std::string path, std::unique_ptr<InputBuffer> in,
                                            const ReaderOptions& opt) {
  return std::make_unique<TextReader>(std::move(path), std::move(in), opt);
}

}  // namespace smelt
