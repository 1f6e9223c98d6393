// HTML file reader: the whole file is one document, handed on as HTML bytes (is_html) with the
// charset left empty, so extraction sniffs the page's own <meta> declaration.
// Not here: parsing, text extraction or charset conversion (html_extract.hpp, charset.hpp).
#include "smelt/text/readers_internal.hpp"

namespace smelt {
namespace {

class HtmlReader final : public ReaderBase {
 public:
  HtmlReader(std::string path, std::unique_ptr<InputBuffer> in, const ReaderOptions& opt)
      : ReaderBase(std::move(path), std::move(in), opt, InputFormat::kHtml) {}

  bool next(RawDoc& doc) override {
    if (done_) return false;
    done_ = true;
    size_t a = 0;
    if (!fill_whole(a, 0, "the page")) return false;
    const std::string_view s(in_->data(), a);
    bool ok = false;
    if (text_looks_binary(s, false)) {
      issue(0, 0, "binary", "binary data (NUL bytes or control characters), not HTML; the file was skipped");
    } else if (!text_is_blank(s)) {
      reset(doc);
      doc.text.assign(s.data(), s.size());
      doc.is_html = true;
      doc.id = path_;
      doc.source = path_;
      doc.record = record_++;
      ok = true;
    }
    in_->consume(a);
    finish();
    return ok;
  }

 private:
  bool done_ = false;
};

}  // namespace

std::unique_ptr<DocReader> reader_html_make(std::string path, std::unique_ptr<InputBuffer> in,
                                            const ReaderOptions& opt) {
  return std::make_unique<HtmlReader>(std::move(path), std::move(in), opt);
}

}  // namespace smelt
