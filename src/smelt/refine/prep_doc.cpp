// One document through the refinery (prep_doc.hpp).
#include "smelt/refine/prep_doc.hpp"

#include <cctype>

#include <fmt/format.h>

#include "smelt/common/hash.hpp"
#include "smelt/common/json_write.hpp"
#include "smelt/common/page_key.hpp"
#include "smelt/refine/quality_signals.hpp"
#include "smelt/text/charset.hpp"
#include "smelt/text/html_extract.hpp"

namespace smelt {

namespace {

constexpr size_t kRejectedTextCap = 20000;  // bytes of text kept per rejected example

bool has_visible_text(std::string_view s) {
  for (unsigned char c : s)
    if (!std::isspace(c)) return true;
  return false;
}

}  // namespace

void process_item(const PrepConfig& c, PrepItem& it) {
  RawDoc& d = it.doc;
  it.raw_bytes = d.text.size();
  std::string text;
  HtmlSignals html;
  if (d.is_html) {
    std::string utf8;
    charset_to_utf8(d.text, d.charset, utf8);
    if (c.extract_enabled) {
      HtmlExtractResult r;
      html_extract(utf8, c.extract, r);
      text = std::move(r.text);
      html = HtmlSignals{true, r.tag_density, r.link_text_ratio};
    } else {
      text = std::move(utf8);
    }
  } else {
    text = std::move(d.text);
  }
  d.text.clear();
  d.text.shrink_to_fit();
  if (c.strip_terminal_codes) it.stripped = strip_terminal_codes(text);
  it.text_bytes = text.size();

  std::string quality_json;
  if (!has_visible_text(text)) {
    it.drop = "empty";
  } else if (!c.only_extract) {
    if (c.quality.enabled) {
      QualitySignals q;
      quality_compute(text, html.present ? &html : nullptr, q);
      it.lang = q.language.lang;
      it.drop = quality_hard_filter(q, c.quality);
      it.score = quality_score(q, c.quality);
      q.append_json(quality_json);
      // the score joins the signals inside the same object
      if (!quality_json.empty() && quality_json.back() == '}') {
        quality_json.pop_back();
        quality_json += fmt::format("{}\"score\":{:.4f}}}", quality_json.size() > 1 ? "," : "", it.score);
      }
      if (it.drop.empty() && c.sample_enabled && it.score < c.sample_threshold) {
        // By page, so that another crawl of the same pages keeps the same ones.
        double u = hash_unit(hash64(page_key(d.url, d.id), c.seed));
        if (u >= it.score * it.score) it.drop = "sampled_out";
      }
      if (!it.drop.empty() && c.keep_rejected > 0) it.rules = quality_failed_rules(q, c.quality);
    }
    if (it.drop.empty() && c.dedup.enabled) dedup_signature(text, it.lang == "zh", c.dedup, it.sig);
  }
  if (!it.drop.empty() && c.keep_rejected == 0) return;

  std::string& o = it.line;
  o.reserve(text.size() + quality_json.size() + d.meta_json.size() + 256);
  o += "{\"id\":";
  json_append_string(o, d.id);
  o += ",\"source\":";
  json_append_string(o, d.source);
  if (!d.url.empty()) {
    o += ",\"url\":";
    json_append_string(o, d.url);
  }
  o += ",\"text\":";
  if (it.drop.empty() || text.size() <= kRejectedTextCap) {
    json_append_string(o, text);
  } else {
    size_t cut = kRejectedTextCap;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    json_append_string(o, std::string_view(text).substr(0, cut));
  }
  if (!quality_json.empty()) {
    o += ",\"quality\":";
    o += quality_json;
  }
  if (!d.meta_json.empty()) {
    o += ",\"meta\":";
    o += d.meta_json;
  }
}

}  // namespace smelt
