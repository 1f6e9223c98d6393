// Health rules (health.hpp): the [health] section, the loss-spike detector and the quarantine record.
#include "smelt/train/health.hpp"

#include <cmath>

#include <fmt/format.h>

#include "smelt/common/config_schema.hpp"
#include "smelt/dataset/indexed.hpp"
#include "smelt/dataset/lineage.hpp"

namespace smelt {

namespace {

// "steps" as a TOML integer array, one integer, or a comma-separated string (what --set gives);
// "" or what was expected.
std::string read_steps(const toml::node* n, std::vector<int64_t>& out) {
  const char* expected = "an array of step numbers";
  if (!n) return "";
  std::vector<int64_t> steps;
  if (const toml::array* a = n->as_array()) {
    for (const auto& x : *a) {
      if (!x.is_integer()) return expected;
      steps.push_back(*x.value<int64_t>());
    }
  } else if (auto i = n->value<int64_t>()) {
    steps.push_back(*i);
  } else if (auto s = n->value<std::string>()) {
    for (size_t at = 0; at < s->size();) {
      size_t end = s->find(',', at);
      if (end == std::string::npos) end = s->size();
      try {
        steps.push_back(std::stoll(s->substr(at, end - at)));
      } catch (...) {
        return expected;
      }
      at = end + 1;
    }
  } else {
    return expected;
  }
  out = std::move(steps);
  return "";
}

Field<HealthConfig> steps_field(const char* name, std::vector<int64_t> HealthConfig::*m, const char* doc) {
  return field_custom<HealthConfig>(
      name, doc, "array", [m](const toml::node* n, HealthConfig& c) { return read_steps(n, c.*m); },
      [name, m](const HealthConfig& c, toml::table& t) { schema_detail::put(t, name, c.*m); });
}

const Schema<HealthConfig>& health_schema() {
  using H = HealthConfig;
  static const Schema<HealthConfig> s{
      "health",
      {field("skip_nonfinite", &H::skip_nonfinite, "a NaN/Inf loss or gradient skips the update; counted"),
       field("spike_sigma", &H::spike_sigma, "a loss above its EMA + sigma x EMA deviation is a spike",
             at_least(0, "0: off")),
       field("spike_repeats", &H::spike_repeats, "this many spikes in a row roll back", at_least(1)),
       field("spike_warmup", &H::spike_warmup, "steps before spikes are judged", at_least(1)),
       field("ema_beta", &H::ema_beta, "of the loss EMA mean and variance", Limits{0, 1, true, true, ""}),
       field("entropy_floor", &H::entropy_floor, "evaluation token entropy below this counts as collapse",
             at_least(0, "0: off")),
       field("entropy_evals", &H::entropy_evals, "this many low evaluations in a row restart the LR schedule",
             at_least(1)),
       field("lr_restart_scale", &H::lr_restart_scale, "the restarted schedule's peak / lr",
             Limits{0, 1, true, false, ""}),
       steps_field("inject_nan_steps", &H::inject_nan_steps, "fault injection (tests): a NaN gradient at these steps"),
       steps_field("inject_bad_data_steps", &H::inject_bad_data_steps,
                   "fault injection (tests): scrambled targets at these steps")},
      {"vitals"}};
  return s;
}

}  // namespace

void health_config_read(const toml::table& root, HealthConfig& c, toml::table& resolved,
                        std::vector<std::string>& errors) {
  schema_read(health_schema(), root, c, errors);
  config_insert(resolved, "health", schema_to_toml(health_schema(), c));
  (void)vitals_config_read(root, c.vitals, resolved, errors);  // its errors are in `errors`
}

SectionDoc health_config_doc() { return section_doc(health_schema()); }

double SpikeDetector::deviation() const { return std::sqrt(std::max(0.0, var_)); }

bool SpikeDetector::observe(int64_t step, double loss) {
  if (!std::isfinite(loss)) return false;  // the non-finite rule handles it
  const bool judged = c_.spike_sigma > 0 && seen_ >= c_.spike_warmup;
  const bool spike = judged && loss > mean_ + c_.spike_sigma * std::max(deviation(), 1e-3 * std::abs(mean_));
  (void)step;
  if (spike) {
    run_++;
    return true;
  }
  run_ = 0;
  if (seen_ == 0) {
    mean_ = loss;
    var_ = 0;
  } else {
    const double b = c_.ema_beta, d = loss - mean_;
    mean_ += (1 - b) * d;
    var_ = b * (var_ + (1 - b) * d * d);
  }
  seen_++;
  return false;
}

nlohmann::json SpikeDetector::to_json() const { return {{"mean", mean_}, {"var", var_}, {"seen", seen_}, {"run", run_}}; }

void SpikeDetector::from_json(const nlohmann::json& j) {
  mean_ = j.value("mean", 0.0);
  var_ = j.value("var", 0.0);
  seen_ = j.value("seen", (int64_t)0);
  run_ = j.value("run", 0);
}

nlohmann::json quarantine_window(const std::vector<DataSource>& sources, uint64_t seed, bool shuffle,
                                 const LoaderPosition& from, const LoaderPosition& to, int64_t step_from,
                                 int64_t step_to, size_t max_ids) {
  nlohmann::json j;
  j["steps"] = {step_from + 1, step_to};
  j["sources"] = nlohmann::json::object();
  nlohmann::json ids = nlohmann::json::array();
  for (const auto& s : sources) {
    auto a = from.sources.find(s.name), b = to.sources.find(s.name);
    if (b == to.sources.end()) continue;
    SourceCursor c0 = a == from.sources.end() ? SourceCursor{} : a->second, c1 = b->second;
    IndexedDataset ds;
    if (!ds.open(s.prefix)) continue;
    const uint64_t docs = ds.documents();
    if (docs == 0) continue;
    // Documents from c0 (its partly read one included) to c1 (its partly read one included).
    uint64_t begin = c0.epoch * docs + c0.docs, end = c1.epoch * docs + c1.docs + (c1.offset > 0 ? 1 : 0);
    if (end <= begin) continue;
    j["sources"][s.name] = {{"from", {{"epoch", c0.epoch}, {"docs", c0.docs}, {"offset", c0.offset}}},
                            {"to", {{"epoch", c1.epoch}, {"docs", c1.docs}, {"offset", c1.offset}}},
                            {"documents", end - begin}};
    LineageReader lin;
    const bool have_ids = (bool)lin.open(lineage_path(s.prefix));
    DocSampler order(seed, s.name, docs, shuffle);
    for (uint64_t k = begin; k < end && ids.size() < max_ids; k++) {
      const uint64_t d = order.doc_at(k / docs, k % docs);
      uint64_t sb = 0, se = 0;
      ds.document_sequences(d, sb, se);
      nlohmann::json e = {{"source", s.name}, {"doc", d}};
      if (have_ids && sb < lin.size()) e["id"] = std::string(lin.id_of(sb));
      ids.push_back(std::move(e));
    }
  }
  j["documents"] = std::move(ids);
  return j;
}

}  // namespace smelt
