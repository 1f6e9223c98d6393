// Health rules (health.hpp): the [health] section, the loss-spike detector and the quarantine record.
#include "smelt/train/health.hpp"

#include <cmath>

#include <fmt/format.h>

#include "smelt/common/config.hpp"
#include "smelt/dataset/indexed.hpp"
#include "smelt/dataset/lineage.hpp"

namespace smelt {

namespace {
// "steps" as a TOML integer array, or a comma-separated string (what --set gives).
bool read_steps(const toml::table& root, const char* path, std::vector<int64_t>& out) {
  const toml::node* n = root.at_path(path).node();
  if (!n) return true;
  out.clear();
  if (const toml::array* a = n->as_array()) {
    for (const auto& x : *a) {
      if (!x.is_integer()) return false;
      out.push_back(*x.value<int64_t>());
    }
    return true;
  }
  if (auto i = n->value<int64_t>()) {
    out.push_back(*i);
    return true;
  }
  if (auto s = n->value<std::string>()) {
    size_t at = 0;
    while (at < s->size()) {
      size_t end = s->find(',', at);
      if (end == std::string::npos) end = s->size();
      try {
        out.push_back(std::stoll(s->substr(at, end - at)));
      } catch (...) {
        return false;
      }
      at = end + 1;
    }
    return true;
  }
  return false;
}
}  // namespace

Status health_config_read(const toml::table& root, HealthConfig& c, toml::table& resolved,
                          std::vector<std::string>& errors) {
  ConfigSection h(root, "health");
  h.get("skip_nonfinite", c.skip_nonfinite);
  h.get("spike_sigma", c.spike_sigma);
  h.get("spike_repeats", c.spike_repeats);
  h.get("spike_warmup", c.spike_warmup);
  h.get("ema_beta", c.ema_beta);
  h.get("entropy_floor", c.entropy_floor);
  h.get("entropy_evals", c.entropy_evals);
  h.get("lr_restart_scale", c.lr_restart_scale);
  h.known("inject_nan_steps");
  h.known("inject_bad_data_steps");
  h.known("vitals");
  if (!read_steps(root, "health.inject_nan_steps", c.inject_nan_steps))
    errors.push_back("[health] inject_nan_steps: expected an array of step numbers");
  if (!read_steps(root, "health.inject_bad_data_steps", c.inject_bad_data_steps))
    errors.push_back("[health] inject_bad_data_steps: expected an array of step numbers");
  for (auto& e : h.finish()) errors.push_back(e);
  toml::table t = h.resolved();
  toml::array a, b;
  for (auto x : c.inject_nan_steps) a.push_back(x);
  for (auto x : c.inject_bad_data_steps) b.push_back(x);
  t.insert_or_assign("inject_nan_steps", std::move(a));
  t.insert_or_assign("inject_bad_data_steps", std::move(b));
  config_insert(resolved, "health", t);
  if (Status s = vitals_config_read(root, c.vitals, resolved, errors); !s) return s;
  if (!(c.spike_sigma >= 0)) errors.push_back(fmt::format("[health] spike_sigma = {}: must be >= 0 (0: off)", c.spike_sigma));
  if (c.spike_repeats < 1) errors.push_back(fmt::format("[health] spike_repeats = {}: must be >= 1", c.spike_repeats));
  if (c.spike_warmup < 1) errors.push_back(fmt::format("[health] spike_warmup = {}: must be >= 1", c.spike_warmup));
  if (!(c.ema_beta > 0 && c.ema_beta < 1)) errors.push_back(fmt::format("[health] ema_beta = {}: must be in (0, 1)", c.ema_beta));
  if (!(c.entropy_floor >= 0)) errors.push_back(fmt::format("[health] entropy_floor = {}: must be >= 0 (0: off)", c.entropy_floor));
  if (c.entropy_evals < 1) errors.push_back(fmt::format("[health] entropy_evals = {}: must be >= 1", c.entropy_evals));
  if (!(c.lr_restart_scale > 0 && c.lr_restart_scale <= 1))
    errors.push_back(fmt::format("[health] lr_restart_scale = {}: must be in (0, 1]", c.lr_restart_scale));
  return Status::ok();
}

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
