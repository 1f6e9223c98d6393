// The refinery's models and lists, loaded once when prep starts (before any output), shared read-only
// by every worker: the language identifier, the quality classifiers, the URL filter, the
// decontamination index, the reference model, and the thresholds a score pass measured. Also the
// config of the two parts that have no module of their own ([[prep.classifiers]], [prep.perplexity])
// and the score histograms (`smelt prep --only score` writes them; a real pass reads its
// thresholds from them, so a top fraction means the same whatever the number of tasks).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "smelt/common/status.hpp"
#include "smelt/refine/decontaminate.hpp"
#include "smelt/refine/fasttext_model.hpp"
#include "smelt/refine/langid.hpp"
#include "smelt/refine/reference_scorer.hpp"
#include "smelt/refine/url_filter.hpp"

namespace smelt {

struct SectionDoc;

// One [[prep.classifiers]] entry: a fastText classifier scoring every document.
struct ClassifierConfig {
  std::string name;               // quality.classifiers.NAME in the output
  std::string model;              // the .bin file
  std::string label;              // the label whose probability is the score ("hq": DCLM's)
  double min = 0;                 // a hard filter: a lower probability drops as "classifier_NAME"
  bool factor = false;            // multiply the quality score (what score^2 sampling draws on) by it
  double keep_top_fraction = 1;   // < 1: keep only documents in this top fraction by the probability,
                                  // the threshold read from [prep] scores (a score pass)
};

// [prep.perplexity]: bits per byte under a reference model (CCNet's filter, a model trained here).
struct PerplexityConfig {
  std::string checkpoint;         // a run folder, a checkpoint folder or a .gguf; "" = off
  std::string weights = "auto";   // f32, bf16, q8_0, auto (the fastest the CPU has)
  int threads = 1;                // OpenMP threads of each decoder step
  int contexts = 0;               // documents scored at once (one decoder each; workers wait for a
                                  // free one); 0: one per prep worker thread
  int batch_rows = 8;             // windows of one document run together in a decoder step
  int max_seq_len = 0;            // tokens per window; 0: the model's
  double head = 0.3;              // per-language bpb percentiles: head = lowest 30%,
  double middle = 0.6;            // middle = 30..60%, tail = the rest (CCNet's thirds)
  std::vector<std::string> keep = {"head", "middle", "tail"};  // the buckets kept (the others drop
                                                               // as "perplexity_BUCKET")
};

void classifiers_config_read(const toml::table& root, std::vector<ClassifierConfig>& c,
                             std::vector<std::string>& errors);
toml::array classifiers_config_to_toml(const std::vector<ClassifierConfig>& c);
SectionDoc classifiers_config_doc();
std::vector<std::string> classifiers_config_validate(const std::vector<ClassifierConfig>& c);

void perplexity_config_read(const toml::table& root, PerplexityConfig& c, std::vector<std::string>& errors);
toml::table perplexity_config_to_toml(const PerplexityConfig& c);
SectionDoc perplexity_config_doc();
std::vector<std::string> perplexity_config_validate(const PerplexityConfig& c);

// Histograms of the scores whose thresholds depend on the corpus: each classifier's probability
// (10^4 bins over [0,1]) and the reference bits per byte per language (bins of 0.001 bit; "*":
// every language). Sparse: only bins that hold documents.
struct ScoreHistograms {
  std::map<std::string, std::map<uint32_t, uint64_t>> classifiers, ref_bpb;
  static constexpr int kProbBins = 10000;
  static constexpr double kBpbBin = 0.001;

  void add_classifier(const std::string& name, double p);
  void add_bpb(const std::string& lang, double bpb);
  void merge(const ScoreHistograms& o);
  bool empty() const { return classifiers.empty() && ref_bpb.empty(); }
  nlohmann::json to_json() const;
  Status from_json(const nlohmann::json& j, const std::string& where);
  // The lowest probability p such that documents with probability >= p are at most fraction of
  // those counted (a bin edge), or the top bin's edge when that bin alone holds more; -1 when the
  // classifier was not counted.
  double top_fraction_threshold(const std::string& name, double fraction) const;
  // The bpb cut points at the head and middle percentiles for lang (its own histogram when it
  // holds at least min_docs documents, else "*"). False when nothing was counted.
  bool bpb_cuts(const std::string& lang, double head, double middle, double& cut_head, double& cut_middle) const;
};
// Every scores*.json in dir (one per task of a score pass), summed.
Status score_histograms_read_dir(const std::string& dir, ScoreHistograms& out);

struct LoadedClassifier {
  ClassifierConfig c;
  std::unique_ptr<FastTextModel> model;
  int label = -1;
  double threshold = -1;  // from keep_top_fraction; -1: none
};

struct PrepConfig;

struct Refinery {
  std::unique_ptr<LanguageIdentifier> langid;
  std::vector<LoadedClassifier> classifiers;
  std::unique_ptr<UrlFilter> urls;             // null: no lists
  std::unique_ptr<DecontamIndex> decontam;     // null: no files
  ReferenceScorer* ref = nullptr;              // not owned; null: no perplexity
  std::map<std::string, std::pair<double, double>> bpb_cuts;  // lang -> (head, middle) cuts
  ScoreHistograms thresholds_from;             // the score pass read ([prep] scores)

  // Loads everything c names; ref is the reference model the caller built from
  // c.perplexity (null when that is off). Errors name the file and what was expected.
  static Status load(const PrepConfig& c, ReferenceScorer* ref, Refinery& out);
  // What the resume fingerprint adds for the loaded content (model and list bytes).
  std::string fingerprint() const;
  // One line per loaded part, for the start of the run.
  std::string describe() const;
  // The perplexity bucket of bpb in lang: "head", "middle", "tail", or "" without cuts.
  std::string bpb_bucket(const std::string& lang, double bpb) const;
};

}  // namespace smelt
