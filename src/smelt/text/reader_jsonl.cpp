// JSONL reader: one JSON object per line, parsed in place with simdjson's DOM parser; the text,
// id and url fields are picked out and every other field is kept as raw JSON in meta_json.
// Not here: writing JSONL (refine/) or any other JSON layout (a single JSON array is not read).
#include <fmt/format.h>
#include <simdjson.h>

#include "smelt/common/json_write.hpp"
#include "smelt/text/readers_internal.hpp"

namespace smelt {
namespace {

class JsonlReader final : public ReaderBase {
 public:
  JsonlReader(std::string path, std::unique_ptr<InputBuffer> in, const ReaderOptions& opt)
      : ReaderBase(std::move(path), std::move(in), opt, InputFormat::kJsonl),
        lines_(*in_, opt.max_record_bytes) {}

  bool next(RawDoc& doc) override {
    Line line;
    while (lines_.next(line)) {
      if (line.too_long) { report_too_long(line.number, line.offset, line.length, "the line"); continue; }
      std::string_view s = line.text;
      if (line.offset == 0 && s.substr(0, 3) == "\xEF\xBB\xBF") s.remove_prefix(3);  // byte order mark
      if (text_is_blank(s)) continue;
      if (parse_line(s, line, doc)) return true;
    }
    finish();
    return false;
  }

 private:
  bool parse_line(std::string_view s, const Line& line, RawDoc& doc) {
    // The line sits inside InputBuffer, which keeps simdjson::SIMDJSON_PADDING readable bytes after it.
    static_assert(InputBuffer::kPad >= simdjson::SIMDJSON_PADDING);
    const char* buf = s.data();
    if (!simdjson::validate_utf8(s.data(), s.size())) {
      RawDoc tmp;
      set_text_repaired(tmp, s, line.number, line.offset);  // reports invalid_utf8
      repaired_.swap(tmp.text);
      const size_t n = repaired_.size();
      repaired_.resize(n + simdjson::SIMDJSON_PADDING, ' ');
      buf = repaired_.data();
      s = std::string_view(buf, n);
    }
    simdjson::dom::element root;
    if (auto e = parser_.parse(buf, s.size(), false).get(root); e != simdjson::SUCCESS) {
      issue(line.number, line.offset, "invalid_json",
            fmt::format("invalid JSON ({}); the line was skipped", simdjson::error_message(e)));
      return false;
    }
    simdjson::dom::object obj;
    if (root.get_object().get(obj) != simdjson::SUCCESS) {
      issue(line.number, line.offset, "invalid_json",
            "invalid JSON (expected an object, one per line); the line was skipped");
      return false;
    }
    std::string_view text;
    bool have_text = false;
    reset(doc);
    doc.meta_json.assign("{");
    for (auto field : obj) {
      const std::string_view key = field.key;
      if (key == opt_.text_field) {
        if (!have_text && field.value.get_string().get(text) == simdjson::SUCCESS) have_text = true;
      } else if (key == opt_.id_field) {
        set_id(field.value, doc);
      } else if (key == opt_.url_field) {
        std::string_view url;
        if (field.value.get_string().get(url) == simdjson::SUCCESS) doc.url.assign(url);
      } else {
        if (doc.meta_json.size() > 1) doc.meta_json.push_back(',');
        json_append_string(doc.meta_json, key);
        doc.meta_json.push_back(':');
        doc.meta_json.append(simdjson::minify(field.value));
      }
    }
    doc.meta_json.push_back('}');
    if (!have_text) {
      issue(line.number, line.offset, "missing_text_field",
            fmt::format("no string field \"{}\" (set text_field to the field holding the text); "
                        "the line was skipped", opt_.text_field));
      return false;
    }
    doc.text.assign(text.data(), text.size());
    set_place(doc.source, ':', line.number);
    if (doc.id.empty()) doc.id = doc.source;
    doc.record = record_++;
    return true;
  }

  // The id may be a string or a number; anything else falls back to "<file>:<line>".
  static void set_id(simdjson::dom::element v, RawDoc& doc) {
    std::string_view sv;
    int64_t i;
    uint64_t u;
    if (v.get_string().get(sv) == simdjson::SUCCESS) doc.id.assign(sv);
    else if (v.get_int64().get(i) == simdjson::SUCCESS) doc.id = std::to_string(i);
    else if (v.get_uint64().get(u) == simdjson::SUCCESS) doc.id = std::to_string(u);
    else if (v.is_double()) doc.id = simdjson::minify(v);
  }

  LineSplitter lines_;
  simdjson::dom::parser parser_;
  std::string repaired_;
};

}  // namespace

std::unique_ptr<DocReader> reader_jsonl_make(std::string path, std::unique_ptr<InputBuffer> in,
                                             const ReaderOptions& opt) {
  return std::make_unique<JsonlReader>(std::move(path), std::move(in), opt);
}

}  // namespace smelt
