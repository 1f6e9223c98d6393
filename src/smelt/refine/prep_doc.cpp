// One document through the refinery (prep_doc.hpp).
#include "smelt/refine/prep_doc.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <chrono>

#include <fmt/format.h>

#include "smelt/common/hash.hpp"
#include "smelt/common/json_write.hpp"
#include "smelt/common/page_key.hpp"
#include "smelt/refine/quality_signals.hpp"
#include "smelt/refine/url_filter.hpp"
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

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// Adds the time since the last lap to a stage.
struct Laps {
  PrepItem& it;
  uint64_t t = now_ns();
  void lap(int stage) {
    const uint64_t n = now_ns();
    it.stage_ns[stage] += n - t;
    t = n;
  }
};

// Raw record -> UTF-8 text (HTML extracted), and the page's HTML signals.
std::string extract_text(const PrepConfig& c, PrepItem& it, HtmlSignals& html) {
  RawDoc& d = it.doc;
  std::string text;
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
  return text;
}

// The language filter: not among [prep] languages, or less sure than its [prep.language] min_score.
std::string language_drop(const PrepConfig& c, const std::string& lang, double score) {
  if (!c.languages.empty() && std::find(c.languages.begin(), c.languages.end(), lang) == c.languages.end())
    return "wrong_language";
  if (score < langid_min_score(c.language, lang)) return "language_unsure";
  return "";
}

// Appends ,"key":value to a JSON object under construction (without its closing brace).
void add_num(std::string& o, const char* key, double v) {
  o += fmt::format("{}\"{}\":{}", o.size() > 1 ? "," : "", key, std::round(v * 10000.0) / 10000.0);
}

// The classifiers, in order: each probability joins the JSON; min and keep_top_fraction drop, factor
// multiplies the score. The score pass records every probability and applies no threshold.
void run_classifiers(const PrepConfig& c, const Refinery& r, std::string_view text, PrepItem& it, std::string& q) {
  if (r.classifiers.empty()) return;
  q += fmt::format("{}\"classifiers\":{{", q.size() > 1 ? "," : "");
  for (size_t i = 0; i < r.classifiers.size(); ++i) {
    const LoadedClassifier& lc = r.classifiers[i];
    const double p = lc.model->probability(text, lc.label);
    it.class_probs.push_back(p);
    q += fmt::format("{}\"{}\":{}", i ? "," : "", lc.c.name, std::round(p * 10000.0) / 10000.0);
    if (lc.c.factor && it.score >= 0) it.score *= p;  // no score without [prep.quality]
    if (!it.drop.empty() || c.only_score) continue;
    if (p < lc.c.min || (lc.threshold >= 0 && p < lc.threshold)) it.drop = "classifier_" + lc.c.name;
  }
  q += "}";
}

// Bits per byte under the reference model, and its per-language bucket (a filter with keep).
void run_perplexity(const PrepConfig& c, const Refinery& r, std::string_view text, PrepItem& it, std::string& q) {
  if (!r.ref) return;
  it.ref_bpb = r.ref->bits_per_byte(text);
  add_num(q, "ref_bpb", it.ref_bpb);
  const std::string bucket = r.bpb_bucket(it.lang, it.ref_bpb);
  if (bucket.empty()) return;
  q += fmt::format(",\"ref_bucket\":\"{}\"", bucket);
  const auto& keep = c.perplexity.keep;
  if (it.drop.empty() && !c.only_score && std::find(keep.begin(), keep.end(), bucket) == keep.end())
    it.drop = "perplexity_" + bucket;
}

// Language, quality signals and every decision on the text; q gets the quality JSON object.
// Score sampling's draw in [0, 1), by content: the least hash of the text's shingles (dedup's),
// so copies of a page on other hosts or in another crawl draw alike, and near copies do with
// probability their Jaccard similarity (consistent sampling, Broder 1997). Drawn by page, a
// mirror got a draw of its own and survived as the only copy when its original was sampled out,
// since dedup comes after sampling (bench/ablation's labelled crawl: 97 of 98 kept mirrors).
// The shingles are not kept for dedup's signature: PII masking comes between and may change the text.
double sample_draw(const PrepConfig& c, std::string_view text, const PrepItem& it) {
  std::vector<uint64_t> shingles;
  dedup_shingles(text, it.lang == "zh", c.dedup, shingles);
  if (shingles.empty()) return hash_unit(hash64(page_key(it.doc.url, it.doc.id), c.seed));
  return hash_unit(hash_mix(*std::min_element(shingles.begin(), shingles.end()) ^ hash_mix(c.seed)));
}

void judge(const PrepConfig& c, const Refinery& r, std::string_view text, const HtmlSignals& html, PrepItem& it,
           std::string& q, Laps& laps) {
  const LangGuess g = r.langid->identify(text);
  it.lang = g.lang;
  laps.lap(kStageLanguage);
  QualitySignals qs;
  if (c.quality.enabled) {
    quality_compute(text, html.present ? &html : nullptr, qs);
    quality_set_language(qs, g.lang, g.score, g.top);
    it.drop = quality_hard_filter(qs, c.quality);
    it.score = quality_score(qs, c.quality);
    qs.append_json(q);
  } else {
    qs.language.lang = g.lang;
    q = fmt::format("{{\"lang\":\"{}\"", g.lang);
    add_num(q, "lang_score", g.score);
    q += "}";
  }
  q.pop_back();  // the decisions below join the same object
  if (it.drop.empty()) it.drop = language_drop(c, g.lang, g.score);
  laps.lap(kStageQuality);
  if (r.decontam) {
    it.contaminated = r.decontam->find(text).file;
    if (it.contaminated >= 0) {
      q += ",\"contaminated\":";
      json_append_string(q, r.decontam->files()[it.contaminated]);
      if (it.drop.empty() && c.decontaminate.action == DecontamAction::kDrop) it.drop = "contaminated";
    }
  }
  laps.lap(kStageDecontaminate);
  it.scored = it.drop.empty();
  run_classifiers(c, r, text, it, q);
  laps.lap(kStageClassifiers);
  run_perplexity(c, r, text, it, q);
  laps.lap(kStagePerplexity);
  if (it.score >= 0) add_num(q, "score", it.score);
  q += "}";
  if (it.drop.empty() && c.sample_enabled && c.quality.enabled && it.score < c.sample_threshold && !c.only_score &&
      sample_draw(c, text, it) >= it.score * it.score)
    it.drop = "sampled_out";
  if (!it.drop.empty() && c.keep_rejected > 0 && c.quality.enabled) it.rules = quality_failed_rules(qs, c.quality);
}

void write_line(const std::string& text, const std::string& quality_json, PrepItem& it) {
  const RawDoc& d = it.doc;
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

}  // namespace

const char* prep_stage_name(int stage) {
  static const char* kNames[kPrepStages] = {"extract", "url_filter", "language", "quality", "decontaminate",
                                            "classifiers", "perplexity", "pii", "dedup_signature"};
  return stage >= 0 && stage < kPrepStages ? kNames[stage] : "?";
}

void process_item(const PrepConfig& c, const Refinery& r, PrepItem& it) {
  Laps laps{it};
  it.raw_bytes = it.doc.text.size();
  if (r.urls && !it.doc.url.empty()) {
    const UrlFilter::Verdict v = r.urls->check(it.doc.url);
    if (v.blocked) it.drop = "url_blocked", it.url_block = v.category.empty() ? v.list : v.list + "/" + v.category;
  }
  laps.lap(kStageUrl);
  if (!it.drop.empty() && c.keep_rejected == 0) return;  // not worth extracting
  HtmlSignals html;
  std::string text = extract_text(c, it, html);
  laps.lap(kStageExtract);
  std::string quality_json;
  if (!has_visible_text(text)) {
    if (it.drop.empty()) it.drop = "empty";
  } else if (!c.only_extract && it.drop.empty()) {
    judge(c, r, text, html, it, quality_json, laps);
    if (it.drop.empty() || c.keep_rejected > 0) {
      if (c.pii.enabled && !c.only_score) it.pii = pii_mask(c.pii, text);
      laps.lap(kStagePii);
    }
    if (it.drop.empty() && c.dedup.enabled && !c.only_score) dedup_signature(text, it.lang == "zh", c.dedup, it.sig);
    laps.lap(kStageDedup);
  }
  if (c.only_score || (!it.drop.empty() && c.keep_rejected == 0)) return;
  write_line(text, quality_json, it);
}

}  // namespace smelt
