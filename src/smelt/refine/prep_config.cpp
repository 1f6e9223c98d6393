// [prep] configuration: TOML sections into PrepConfig, validation, and the resolved table.
#include <filesystem>

#include <fmt/format.h>

#include "smelt/common/config_schema.hpp"
#include "smelt/refine/prep.hpp"

namespace smelt {

namespace {

using P = PrepConfig;

const Schema<PrepConfig>& prep_schema() {
  static const Schema<PrepConfig> s{
      "prep",
      {field("threads", &P::threads, "worker threads; 0 = all cores"),
       field("task", &P::task, "this task's share of the inputs: files i with i % tasks == task"),
       field("tasks", &P::tasks, "tasks the inputs are split over"),
       field("seed", &P::seed, "sampling draws hash (least shingle hash of the text, seed)"),
       field("only_extract", &P::only_extract, "extraction alone: no quality, filtering, sampling or dedup"),
       field("only_score", &P::only_score, "a score pass: only the histograms of classifier and reference scores"),
       field("score_sample", &P::score_sample, "the score pass counts this share of documents (by page hash)",
             in_range(0, 1)),
       field("scores", &P::scores, "a score pass's output folder: thresholds for keep_top_fraction and buckets"),
       field("languages", &P::languages, "keep these languages (ISO 639-1 codes, e.g. en, de, zh); empty: any"),
       field("labels", &P::labels,
             "a labelled crawl's labels (JSONL: url or id, kind, keep): the drop decision per kind in the summary"),
       field("keep_rejected", &P::keep_rejected, "keep this many examples per drop reason in DIR/rejected/"),
       field("shard_mb", &P::shard_mb, "output part size cap, uncompressed MiB"),
       field("zstd_level", &P::zstd_level, "zstd level of the output parts"),
       field("log_interval_s", &P::log_interval_s, "plain progress lines when stderr is not a terminal")},
      {"read", "extract", "language", "url_filter", "quality", "decontaminate", "classifiers", "perplexity", "pii",
       "sample", "dedup"}};
  return s;
}

// max_record_mb: MiB in the file, bytes in ReaderOptions.
std::string read_max_record_mb(const toml::node* n, PrepConfig& c) {
  if (!n) return "";
  if (!n->is_integer() || *n->value<int64_t>() < 0) return "a non-negative integer";
  c.read.max_record_bytes = static_cast<uint64_t>(*n->value<int64_t>()) << 20;
  return "";
}

const Schema<PrepConfig>& read_schema() {
  static const Schema<PrepConfig> s{
      "prep.read",
      {field_at<P>("text_field", [](auto& c) -> auto& { return c.read.text_field; }, "JSONL field holding the text"),
       field_at<P>("id_field", [](auto& c) -> auto& { return c.read.id_field; }, "JSONL field holding the id"),
       field_at<P>("url_field", [](auto& c) -> auto& { return c.read.url_field; }, "JSONL field holding the URL"),
       field_custom<P>("max_record_mb", "longer records are skipped and counted", "integer", read_max_record_mb,
                       [](const P& c, toml::table& t) {
                         t.insert_or_assign("max_record_mb", static_cast<int64_t>(c.read.max_record_bytes >> 20));
                       }),
       field_at<P>("text_unit", [](auto& c) -> auto& { return c.read.text_unit; },
                   "plain text: file (one document per file), paragraph or line")}};
  return s;
}

const Schema<PrepConfig>& extract_schema() {
  static const Schema<PrepConfig> s{
      "prep.extract",
      {field("enabled", &P::extract_enabled, "HTML to text"),
       field_at<P>("remove_boilerplate", [](auto& c) -> auto& { return c.extract.remove_boilerplate; },
                   "false: all visible text"),
       field_at<P>("keep_headings", [](auto& c) -> auto& { return c.extract.keep_headings; },
                   "headings become their own paragraphs"),
       field_at<P>("keep_title", [](auto& c) -> auto& { return c.extract.keep_title; },
                   "prepend <title> as the first paragraph"),
       field("strip_terminal_codes", &P::strip_terminal_codes, "every document, HTML or not")}};
  return s;
}

const Schema<PrepConfig>& sample_schema() {
  static const Schema<PrepConfig> s{
      "prep.sample",
      {field("enabled", &P::sample_enabled, "quality-based sampling"),
       field("threshold", &P::sample_threshold, "score >= threshold: kept; below: kept with probability score^2")}};
  return s;
}

// The sections whose tables are here, in PrepConfig ([prep.quality] and [prep.dedup] have theirs
// beside their structs: quality_score.cpp, dedup.cpp).
const std::vector<const Schema<PrepConfig>*>& prep_schemas() {
  static const std::vector<const Schema<PrepConfig>*> s{&prep_schema(), &read_schema(), &extract_schema(),
                                                        &sample_schema()};
  return s;
}

}  // namespace

Status prep_config_read(const toml::table& root, PrepConfig& c) {
  std::vector<std::string> errs;
  for (const Schema<PrepConfig>* sc : prep_schemas()) schema_read_keys(*sc, root, c, errs);
  langid_config_read(root, c.language, errs);
  url_filter_config_read(root, c.url_filter, errs);
  quality_config_read(root, c.quality, errs);
  decontam_config_read(root, c.decontaminate, errs);
  classifiers_config_read(root, c.classifiers, errs);
  perplexity_config_read(root, c.perplexity, errs);
  pii_config_read(root, c.pii, errs);
  dedup_config_read(root, c.dedup, errs);
  return config_errors_status(errs);
}

toml::table prep_config_to_toml(const PrepConfig& c) {
  toml::table resolved;
  for (const Schema<PrepConfig>* sc : prep_schemas()) config_insert(resolved, sc->section, schema_to_toml(*sc, c));
  config_insert(resolved, "prep.language", langid_config_to_toml(c.language));
  config_insert(resolved, "prep.url_filter", url_filter_config_to_toml(c.url_filter));
  config_insert(resolved, "prep.quality", quality_config_to_toml(c.quality));
  config_insert(resolved, "prep.decontaminate", decontam_config_to_toml(c.decontaminate));
  if (!c.classifiers.empty()) {
    toml::table* prep = resolved["prep"].as_table();
    if (prep) prep->insert_or_assign("classifiers", classifiers_config_to_toml(c.classifiers));
  }
  config_insert(resolved, "prep.perplexity", perplexity_config_to_toml(c.perplexity));
  config_insert(resolved, "prep.pii", pii_config_to_toml(c.pii));
  config_insert(resolved, "prep.dedup", dedup_config_to_toml(c.dedup));
  return resolved;
}

std::vector<SectionDoc> prep_config_docs() {
  std::vector<SectionDoc> out;
  for (const Schema<PrepConfig>* sc : prep_schemas()) out.push_back(section_doc(*sc));
  out.push_back(langid_config_doc());
  out.push_back(url_filter_config_doc());
  out.push_back(quality_config_doc());
  out.push_back(decontam_config_doc());
  out.push_back(classifiers_config_doc());
  out.push_back(perplexity_config_doc());
  out.push_back(pii_config_doc());
  out.push_back(dedup_config_doc());
  return out;
}

Status prep_config_validate(const PrepConfig& c) {
  std::vector<std::string> errs;
  if (c.inputs.empty()) errs.push_back("no input: give --input PATH (files, folders or globs)");
  if (c.output.empty()) errs.push_back("no output folder: give --output DIR");
  if (c.threads < 0) errs.push_back("[prep] threads: expected 0 (all cores) or more");
  if (c.tasks < 1) errs.push_back("[prep] tasks: expected 1 or more");
  if (c.task < 0 || c.task >= c.tasks)
    errs.push_back(fmt::format("[prep] task {}: expected 0 <= task < tasks ({})", c.task, c.tasks));
  if (c.shard_mb < 1) errs.push_back("[prep] shard_mb: expected at least 1");
  if (c.zstd_level < 1 || c.zstd_level > 19) errs.push_back("[prep] zstd_level: expected 1..19");
  if (c.sample_threshold < 0 || c.sample_threshold > 1)
    errs.push_back("[prep.sample] threshold: expected a number in [0,1]");
  if (c.sample_enabled && !c.quality.enabled && !c.only_extract)
    errs.push_back("[prep.sample] enabled needs [prep.quality] enabled (sampling draws on the score)");
  if (c.read.max_record_bytes == 0) errs.push_back("[prep.read] max_record_mb: expected at least 1");
  if (c.only_extract && c.only_score) errs.push_back("[prep] only_extract and only_score: expected at most one");
  if (std::error_code ec; !c.labels.empty() && !std::filesystem::is_regular_file(c.labels, ec))
    errs.push_back(fmt::format("[prep] labels: {}: no such file (expected JSON lines with url or id, kind, keep)",
                               c.labels));
  for (const std::string& l : c.languages)
    if (l.empty() || l.find_first_not_of("abcdefghijklmnopqrstuvwxyz_-") != std::string::npos)
      errs.push_back(fmt::format("[prep] languages: \"{}\" is not a language code (expected ISO 639-1 such as en, de, "
                                 "zh, or the language model's own label)",
                                 l));
  std::vector<std::vector<std::string>> parts{langid_config_validate(c.language),
                                              url_filter_config_validate(c.url_filter),
                                              decontam_config_validate(c.decontaminate),
                                              classifiers_config_validate(c.classifiers),
                                              perplexity_config_validate(c.perplexity),
                                              pii_config_validate(c.pii),
                                              dedup_config_validate(c.dedup)};
  for (const auto& p : parts) errs.insert(errs.end(), p.begin(), p.end());
  for (const auto& e : quality_config_check(c.quality)) errs.push_back(e);
  return config_errors_status(errs);
}

}  // namespace smelt
