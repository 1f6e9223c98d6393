// The prep stage: raw inputs -> URL filter -> extraction -> language ID -> quality signals -> hard
// filters, decontamination, classifiers, reference perplexity and quality-based sampling ->
// personal-data masking -> exact and near dedup -> size-capped refined parts + stats.json. One reader thread,
// N worker threads, and one committer that takes documents in input order (so output is
// byte-identical for any thread count) and persists a resume point after every finished part.
// Not here: the CLI flags (cli/prep_cmd.cpp) or any single algorithm (text/, refine/).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "smelt/common/status.hpp"
#include "smelt/refine/decontaminate.hpp"
#include "smelt/refine/dedup.hpp"
#include "smelt/refine/langid.hpp"
#include "smelt/refine/pii.hpp"
#include "smelt/refine/quality_score.hpp"
#include "smelt/refine/refinery.hpp"
#include "smelt/refine/url_filter.hpp"
#include "smelt/stage/stage.hpp"
#include "smelt/text/doc_reader.hpp"
#include "smelt/text/html_extract.hpp"

namespace smelt {

struct PrepConfig {
  // [prep]
  std::vector<std::string> inputs;  // files, folders, globs (flag --input)
  std::string output;               // output folder (flag --output)
  int threads = 0;                  // worker threads; 0 = all cores
  int task = 0, tasks = 1;          // this task's share of the inputs: files i with i % tasks == task
  uint64_t seed = 42;               // sampling draws hash (least shingle hash of the text, seed)
  bool only_extract = false;        // extraction alone: no quality, filtering, sampling or dedup
  bool only_score = false;          // a score pass: no output parts, only the histograms of the
                                    // classifier and reference scores (DIR/scores.json) that a real
                                    // pass reads its thresholds from ([prep] scores)
  double score_sample = 1.0;        // the score pass counts this share of documents (by page hash)
  std::string scores;               // a score pass's output folder: thresholds for keep_top_fraction
                                    // and the perplexity buckets
  std::vector<std::string> languages;  // keep these languages (ISO 639-1, e.g. ["en", "de"]); empty: any
  std::string labels;               // a labelled crawl's labels (prep_labels.hpp): the drop decision
                                    // per kind in the summary and stats.json; never changes the output
  uint64_t keep_rejected = 0;       // keep this many examples per drop reason in DIR/rejected/
  uint64_t shard_mb = 256;          // output part size cap, uncompressed MiB
  int zstd_level = 3;
  double log_interval_s = 10;       // plain progress lines when stderr is not a terminal
  bool overwrite = false;           // replace a different earlier run in the output folder
  // [prep.read]
  ReaderOptions read;
  // [prep.extract]
  bool extract_enabled = true;
  HtmlExtractOptions extract;
  bool strip_terminal_codes = true;  // every document, HTML or not (text/terminal_codes.hpp)
  // [prep.language]
  LangIdConfig language;
  // [prep.url_filter]
  UrlFilterConfig url_filter;
  // [prep.quality]
  QualityConfig quality;
  // [prep.decontaminate]
  DecontamConfig decontaminate;
  // [[prep.classifiers]]
  std::vector<ClassifierConfig> classifiers;
  // [prep.perplexity]
  PerplexityConfig perplexity;
  // [prep.pii]
  PiiConfig pii;
  // [prep.sample]
  bool sample_enabled = true;
  double sample_threshold = 0.7;    // score >= threshold: kept; below: kept with probability score^2
  // [prep.dedup]
  DedupConfig dedup;
};

// Reads every [prep...] key of root into c; unknown keys and wrong types are errors.
Status prep_config_read(const toml::table& root, PrepConfig& c);
// Rejects bad combinations before any work starts.
Status prep_config_validate(const PrepConfig& c);
// The resolved config as TOML (what a run records and what resume compares).
toml::table prep_config_to_toml(const PrepConfig& c);
struct SectionDoc;
// The field tables of [prep], [prep.read], [prep.extract], [prep.quality], [prep.sample] and
// [prep.dedup] (docs check).
std::vector<SectionDoc> prep_config_docs();

struct PrepSummary : StageSummary {
  uint64_t docs_read = 0, docs_kept = 0, parts = 0;
};

// Runs the stage. A stop request (stage_request_stop, stage/stage.hpp: the CLI's SIGINT/SIGTERM)
// ends it at a clean point with an error saying how to resume; rerunning the same command resumes
// from the last finished part.
// ref: the reference model [prep.perplexity] names, built by the caller (perplexity/ref_scorer.hpp;
// null when that section is off).
Status prep_run(const PrepConfig& c, PrepSummary& out, ReferenceScorer* ref = nullptr);

}  // namespace smelt
