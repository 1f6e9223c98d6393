// The refinery's loaded models and lists, the config of [[prep.classifiers]] and [prep.perplexity],
// and the score histograms of a score pass (refinery.hpp).
#include "smelt/refine/refinery.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "smelt/common/config_schema.hpp"
#include "smelt/common/files.hpp"
#include "smelt/common/hash.hpp"
#include "smelt/refine/prep.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace smelt {

namespace {

using C = ClassifierConfig;
using PX = PerplexityConfig;

const Schema<ClassifierConfig>& classifier_schema() {
  static const Schema<ClassifierConfig> s{
      "prep.classifiers",
      {field("name", &C::name, "the score's name: quality.classifiers.NAME in the output"),
       field("model", &C::model, "a fastText supervised model (.bin), e.g. from `smelt quality train`"),
       field("label", &C::label, "the label whose probability is the score (without __label__)"),
       field("min", &C::min, "hard filter: a lower probability drops as classifier_NAME", in_range(0, 1)),
       field("factor", &C::factor, "multiply the quality score (what sampling draws on) by the probability"),
       field("keep_top_fraction", &C::keep_top_fraction,
             "keep only this top fraction by probability (threshold from [prep] scores)", in_range(0, 1))}};
  return s;
}

const Schema<PerplexityConfig>& perplexity_schema() {
  static const Schema<PerplexityConfig> s{
      "prep.perplexity",
      {field("checkpoint", &PX::checkpoint, "reference model: a run folder, checkpoint folder or .gguf; \"\" = off"),
       field("weights", &PX::weights, "f32, bf16, q8_0 or auto (the fastest the CPU has)"),
       field("threads", &PX::threads, "OpenMP threads of each decoder step", at_least(1)),
       field("contexts", &PX::contexts, "documents scored at once (one decoder each); 0: one per worker thread",
             at_least(0)),
       field("batch_rows", &PX::batch_rows, "windows of one document run together in a decoder step", at_least(1)),
       field("max_seq_len", &PX::max_seq_len, "tokens per window; 0: the model's", at_least(0)),
       field("head", &PX::head, "per-language bpb percentile ending the head bucket", in_range(0, 1)),
       field("middle", &PX::middle, "per-language bpb percentile ending the middle bucket", in_range(0, 1)),
       field("keep", &PX::keep, "buckets kept (head, middle, tail); the others drop as perplexity_BUCKET")}};
  return s;
}

}  // namespace

void classifiers_config_read(const toml::table& root, std::vector<ClassifierConfig>& c,
                             std::vector<std::string>& errors) {
  c.clear();
  const toml::node* n = root.at_path("prep.classifiers").node();
  if (!n) return;
  const toml::array* a = n->as_array();
  if (!a) {
    errors.push_back("[[prep.classifiers]]: expected an array of tables ([[prep.classifiers]] entries)");
    return;
  }
  for (size_t i = 0; i < a->size(); ++i) {
    const toml::table* t = (*a)[i].as_table();
    if (!t) {
      errors.push_back(fmt::format("[[prep.classifiers]] entry {}: expected a table", i + 1));
      continue;
    }
    toml::table wrap;
    toml::table prep;
    prep.insert("classifiers", *t);
    wrap.insert("prep", std::move(prep));
    ClassifierConfig cc;
    std::vector<std::string> errs;
    schema_read(classifier_schema(), wrap, cc, errs);
    for (auto& e : errs) errors.push_back(fmt::format("entry {}: {}", i + 1, e));
    c.push_back(std::move(cc));
  }
}

toml::array classifiers_config_to_toml(const std::vector<ClassifierConfig>& c) {
  toml::array a;
  for (const auto& cc : c) a.push_back(schema_to_toml(classifier_schema(), cc));
  return a;
}

SectionDoc classifiers_config_doc() { return section_doc(classifier_schema()); }

std::vector<std::string> classifiers_config_validate(const std::vector<ClassifierConfig>& c) {
  std::vector<std::string> errs;
  std::map<std::string, int> seen;
  for (size_t i = 0; i < c.size(); ++i) {
    const auto& cc = c[i];
    std::string where = fmt::format("[[prep.classifiers]] entry {}", i + 1);
    if (cc.name.empty() || cc.name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") != std::string::npos)
      errs.push_back(fmt::format("{}: name = \"{}\": expected lower-case letters, digits and _", where, cc.name));
    if (seen[cc.name]++ > 0) errs.push_back(fmt::format("{}: name \"{}\" used twice", where, cc.name));
    if (cc.model.empty()) errs.push_back(fmt::format("{}: model: expected the path of a fastText .bin", where));
    if (cc.label.empty()) errs.push_back(fmt::format("{}: label: expected one of the model's labels", where));
    if (cc.keep_top_fraction <= 0) errs.push_back(fmt::format("{}: keep_top_fraction: expected (0, 1]", where));
  }
  return errs;
}

void perplexity_config_read(const toml::table& root, PerplexityConfig& c, std::vector<std::string>& errors) {
  schema_read(perplexity_schema(), root, c, errors);
}
toml::table perplexity_config_to_toml(const PerplexityConfig& c) { return schema_to_toml(perplexity_schema(), c); }
SectionDoc perplexity_config_doc() { return section_doc(perplexity_schema()); }

std::vector<std::string> perplexity_config_validate(const PerplexityConfig& c) {
  std::vector<std::string> errs;
  if (c.head > c.middle) errs.push_back("[prep.perplexity] head: expected at most middle");
  static const std::vector<std::string> kW{"auto", "f32", "bf16", "q8_0"};
  if (std::find(kW.begin(), kW.end(), c.weights) == kW.end())
    errs.push_back(fmt::format("[prep.perplexity] weights = \"{}\": expected auto, f32, bf16 or q8_0", c.weights));
  for (const auto& b : c.keep)
    if (b != "head" && b != "middle" && b != "tail")
      errs.push_back(fmt::format("[prep.perplexity] keep: \"{}\" is not head, middle or tail", b));
  return errs;
}

// ---- score histograms ----

void ScoreHistograms::add_classifier(const std::string& name, double p) {
  uint32_t bin = static_cast<uint32_t>(std::clamp(static_cast<int>(p * kProbBins), 0, kProbBins - 1));
  classifiers[name][bin]++;
}

void ScoreHistograms::add_bpb(const std::string& lang, double bpb) {
  uint32_t bin = static_cast<uint32_t>(std::clamp(bpb / kBpbBin, 0.0, 1e8));
  ref_bpb[lang][bin]++;
  ref_bpb["*"][bin]++;
}

void ScoreHistograms::merge(const ScoreHistograms& o) {
  for (const auto& [k, m] : o.classifiers)
    for (const auto& [b, n] : m) classifiers[k][b] += n;
  for (const auto& [k, m] : o.ref_bpb)
    for (const auto& [b, n] : m) ref_bpb[k][b] += n;
}

namespace {

json hist_json(const std::map<std::string, std::map<uint32_t, uint64_t>>& h) {
  json j = json::object();
  for (const auto& [k, m] : h) {
    json bins = json::array();
    for (const auto& [b, n] : m) bins.push_back({b, n});
    j[k] = bins;
  }
  return j;
}

bool hist_from(const json& j, std::map<std::string, std::map<uint32_t, uint64_t>>& h) {
  if (!j.is_object()) return false;
  for (const auto& [k, bins] : j.items()) {
    if (!bins.is_array()) return false;
    for (const auto& p : bins) {
      if (!p.is_array() || p.size() != 2 || !p[0].is_number_unsigned() || !p[1].is_number_unsigned()) return false;
      h[k][p[0].get<uint32_t>()] += p[1].get<uint64_t>();
    }
  }
  return true;
}

uint64_t hist_total(const std::map<uint32_t, uint64_t>& m) {
  uint64_t t = 0;
  for (const auto& [b, n] : m) t += n;
  return t;
}

// The bin edge at percentile q: the first bin whose cumulative count reaches q x total.
double hist_percentile(const std::map<uint32_t, uint64_t>& m, double q, double bin_width) {
  const double want = q * static_cast<double>(hist_total(m));
  uint64_t cum = 0;
  for (const auto& [b, n] : m) {
    cum += n;
    if (static_cast<double>(cum) >= want) return (b + 1) * bin_width;
  }
  return m.empty() ? 0 : (m.rbegin()->first + 1) * bin_width;
}

}  // namespace

json ScoreHistograms::to_json() const {
  return {{"prob_bins", kProbBins}, {"bpb_bin", kBpbBin}, {"classifiers", hist_json(classifiers)},
          {"ref_bpb", hist_json(ref_bpb)}};
}

Status ScoreHistograms::from_json(const json& j, const std::string& where) {
  if (!j.is_object() || j.value("prob_bins", 0) != kProbBins || !j.contains("classifiers") || !j.contains("ref_bpb") ||
      !hist_from(j["classifiers"], classifiers) || !hist_from(j["ref_bpb"], ref_bpb))
    return Status::error(fmt::format("{}: not a score histogram file of `smelt prep --only score` "
                                     "(expected prob_bins {}, classifiers and ref_bpb)",
                                     where, kProbBins));
  return Status::ok();
}

double ScoreHistograms::top_fraction_threshold(const std::string& name, double fraction) const {
  auto it = classifiers.find(name);
  if (it == classifiers.end() || it->second.empty()) return -1;
  const double allowed = fraction * static_cast<double>(hist_total(it->second));
  uint64_t above = 0;
  double t = 1.0;
  for (auto b = it->second.rbegin(); b != it->second.rend(); ++b) {
    // the top bin is kept even when it alone holds more than the fraction: "the best documents"
    // never means none of them
    if (above > 0 && static_cast<double>(above + b->second) > allowed) break;
    above += b->second;
    t = static_cast<double>(b->first) / kProbBins;
    if (static_cast<double>(above) > allowed) break;
  }
  return t;
}

bool ScoreHistograms::bpb_cuts(const std::string& lang, double head, double middle, double& cut_head,
                               double& cut_middle) const {
  auto it = ref_bpb.find(lang);
  if (it == ref_bpb.end() || it->second.empty()) return false;
  cut_head = hist_percentile(it->second, head, kBpbBin);
  cut_middle = hist_percentile(it->second, middle, kBpbBin);
  return true;
}

Status score_histograms_read_dir(const std::string& dir, ScoreHistograms& out) {
  std::error_code ec;
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind("scores", 0) == 0 && name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0)
      files.push_back(e.path().string());
  }
  if (ec) return Status::error(fmt::format("{}: cannot read the score pass folder: {}", dir, ec.message()));
  if (files.empty())
    return Status::error(fmt::format("{}: no scores*.json (expected the output of `smelt prep --only score`)", dir));
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::string text;
    if (Status s = files_read_small(f, text); !s) return s;
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded()) return Status::error(fmt::format("{}: not valid JSON", f));
    if (!j.value("complete", false))
      return Status::error(fmt::format("{}: the score pass that wrote it did not finish", f));
    ScoreHistograms h;
    if (Status s = h.from_json(j.value("histograms", json()), f); !s) return s;
    out.merge(h);
  }
  return Status::ok();
}

// ---- the loaded refinery ----

namespace {

Status load_classifiers(const PrepConfig& c, Refinery& r) {
  for (const auto& cc : c.classifiers) {
    LoadedClassifier lc;
    lc.c = cc;
    if (Status s = FastTextModel::load(cc.model, lc.model); !s)
      return Status::error(fmt::format("[[prep.classifiers]] {}: {}", cc.name, s.message()));
    lc.label = lc.model->label_index(cc.label);
    if (lc.label < 0) {
      std::string labels;
      for (const auto& l : lc.model->labels()) labels += (labels.empty() ? "" : ", ") + l;
      return Status::error(fmt::format("[[prep.classifiers]] {}: {}: has no label \"{}\" (its labels: {})", cc.name,
                                       cc.model, cc.label, labels));
    }
    if (cc.keep_top_fraction < 1 && !c.only_score) {
      lc.threshold = r.thresholds_from.top_fraction_threshold(cc.name, cc.keep_top_fraction);
      if (lc.threshold < 0)
        return Status::error(fmt::format("[[prep.classifiers]] {}: keep_top_fraction needs its threshold from a score "
                                         "pass: run `smelt prep --only score` with this classifier and give its "
                                         "output folder as [prep] scores (\"{}\" holds no histogram for it)",
                                         cc.name, c.scores));
    }
    r.classifiers.push_back(std::move(lc));
  }
  return Status::ok();
}

Status load_bpb_cuts(const PrepConfig& c, Refinery& r) {
  const auto& p = c.perplexity;
  for (const auto& [lang, m] : r.thresholds_from.ref_bpb) {
    double h = 0, mid = 0;
    if (r.thresholds_from.bpb_cuts(lang, p.head, p.middle, h, mid)) r.bpb_cuts[lang] = {h, mid};
  }
  const bool filters = p.keep.size() < 3;
  if (filters && !c.only_score && r.bpb_cuts.empty())
    return Status::error(fmt::format("[prep.perplexity] keep = a subset of the buckets needs the bpb percentiles of a "
                                     "score pass: run `smelt prep --only score` with [prep.perplexity] and give its "
                                     "output folder as [prep] scores{}",
                                     c.scores.empty() ? "" : fmt::format(" (\"{}\" holds none)", c.scores)));
  return Status::ok();
}

}  // namespace

Status Refinery::load(const PrepConfig& c, ReferenceScorer* ref, Refinery& r) {
  if (!c.scores.empty())
    if (Status s = score_histograms_read_dir(c.scores, r.thresholds_from); !s) return s;
  if (Status s = LanguageIdentifier::load(c.language, r.langid); !s) return s;
  if (Status s = load_classifiers(c, r); !s) return s;
  if (url_filter_config_active(c.url_filter))
    if (Status s = UrlFilter::load(c.url_filter, r.urls); !s) return s;
  if (c.decontaminate.enabled && !c.decontaminate.files.empty())
    if (Status s = DecontamIndex::build(c.decontaminate, r.decontam); !s) return s;
  if (!c.perplexity.checkpoint.empty() && !ref)
    return Status::error("[prep.perplexity] checkpoint is set but no reference model was built for it");
  r.ref = ref;
  if (r.ref)
    if (Status s = load_bpb_cuts(c, r); !s) return s;
  return Status::ok();
}

std::string Refinery::fingerprint() const {
  std::string s = fmt::format("langid {:016x}", langid ? langid->content_hash() : 0);
  for (const auto& lc : classifiers) {
    uint64_t h = 0;
    (void)files_hash(lc.c.model, h);
    s += fmt::format("\nclassifier {} {:016x} threshold {}", lc.c.name, h, lc.threshold);
  }
  if (urls) s += fmt::format("\nurl lists {:016x}", urls->content_hash());
  if (decontam) s += fmt::format("\ndecontaminate {:016x}", decontam->content_hash());
  if (ref) s += "\nreference " + ref->describe();
  for (const auto& [lang, cut] : bpb_cuts) s += fmt::format("\nbpb cuts {} {} {}", lang, cut.first, cut.second);
  return s;
}

std::string Refinery::describe() const {
  std::string s = fmt::format("  language: {}\n", langid ? langid->describe() : "off");
  for (const auto& lc : classifiers)
    s += fmt::format("  classifier {}: {} label {}{}\n", lc.c.name, lc.c.model, lc.c.label,
                     lc.threshold >= 0 ? fmt::format(", keeps probability >= {:.4f} (top {})", lc.threshold,
                                                     lc.c.keep_top_fraction)
                                       : "");
  if (urls) s += "  url filter: " + urls->summary() + "\n";
  if (decontam) s += "  decontaminate: " + decontam->summary() + "\n";
  if (ref) s += "  reference model: " + ref->describe() + "\n";
  return s;
}

std::string Refinery::bpb_bucket(const std::string& lang, double bpb) const {
  auto it = bpb_cuts.find(lang);
  if (it == bpb_cuts.end()) it = bpb_cuts.find("*");
  if (it == bpb_cuts.end() || bpb < 0) return "";
  return bpb <= it->second.first ? "head" : bpb <= it->second.second ? "middle" : "tail";
}

}  // namespace smelt
