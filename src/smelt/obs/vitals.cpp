// Vital signs (vitals.hpp): [health.vitals], the per-sign trackers and a run folder's report.
// Each sign turns a metrics line into a value and its bands; a tracker judges the value with the
// persistence rule and keeps the worst state, since when, and the steps and ranks responsible.
#include "smelt/obs/vitals.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "smelt/common/config_schema.hpp"

namespace smelt {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const Schema<VitalsConfig>& vitals_schema() {
  using V = VitalsConfig;
  static const Schema<VitalsConfig> s{
      "health.vitals",
      {field("enabled", &V::enabled, "judge the vital signs"),
       field("persist", &V::persist, "a per-step sign counts after this many consecutive steps outside", at_least(1)),
       field("warmup", &V::warmup, "steps before per-step signs are judged", at_least(0)),
       field("min_ms", &V::min_ms, "a time under this is never a problem", at_least(0)),
       field("fetch_p95_warn", &V::fetch_p95_warn, "loader fetch P95 / median compute time: warn"),
       field("fetch_p95_bad", &V::fetch_p95_bad, "loader fetch P95 / median compute time: bad"),
       field("data_wait_warn", &V::data_wait_warn, "the step's data wait / step time: warn"),
       field("data_wait_bad", &V::data_wait_bad, "the step's data wait / step time: bad"),
       field("allreduce_wait_warn", &V::allreduce_wait_warn, "mean all-reduce wait / step time: warn"),
       field("allreduce_wait_bad", &V::allreduce_wait_bad, "mean all-reduce wait / step time: bad"),
       field("rank_spread_warn", &V::rank_spread_warn, "ranks' compute time std / mean: warn"),
       field("rank_spread_bad", &V::rank_spread_bad, "ranks' compute time std / mean: bad"),
       field("ckpt_rate_warn", &V::ckpt_rate_warn, "checkpoint MB/s / the disk's measured rate: warn"),
       field("ckpt_rate_bad", &V::ckpt_rate_bad, "checkpoint MB/s / the disk's measured rate: bad"),
       field("ckpt_min_mb", &V::ckpt_min_mb, "smaller checkpoints are not judged", at_least(0)),
       field("disk_probe_mb", &V::disk_probe_mb, "the start-up disk measurement's size", at_least(0, "0: no measurement")),
       field("grad_ratio_warn", &V::grad_ratio_warn, "gradient norm / median of the window: warn"),
       field("grad_ratio_bad", &V::grad_ratio_bad, "gradient norm / median of the window: bad"),
       field("grad_window", &V::grad_window, "steps in the gradient norm's median", at_least(1)),
       field("entropy_warn_lo", &V::entropy_warn_lo, "token entropy / loss: ok from"),
       field("entropy_warn_hi", &V::entropy_warn_hi, "token entropy / loss: ok up to"),
       field("entropy_bad_lo", &V::entropy_bad_lo, "token entropy / loss: warn from"),
       field("entropy_bad_hi", &V::entropy_bad_hi, "token entropy / loss: warn up to"),
       field("sparsity_warn_hi", &V::sparsity_warn_hi, "attention sparsity: ok up to"),
       field("sparsity_bad_hi", &V::sparsity_bad_hi, "attention sparsity: warn up to")}};
  return s;
}

}  // namespace

SectionDoc vitals_config_doc() { return section_doc(vitals_schema()); }

Status vitals_config_read(const toml::table& root, VitalsConfig& c, toml::table& resolved,
                          std::vector<std::string>& errors) {
  schema_read(vitals_schema(), root, c, errors);
  config_insert(resolved, "health.vitals", schema_to_toml(vitals_schema(), c));
  auto need = [&](bool ok, const char* what) {
    if (!ok) errors.push_back(fmt::format("[health.vitals] {}", what));
  };
  need(c.fetch_p95_warn > 0 && c.fetch_p95_warn <= c.fetch_p95_bad, "fetch_p95_warn, fetch_p95_bad: need 0 < warn <= bad");
  need(c.data_wait_warn > 0 && c.data_wait_warn <= c.data_wait_bad, "data_wait_warn, data_wait_bad: need 0 < warn <= bad");
  need(c.allreduce_wait_warn > 0 && c.allreduce_wait_warn <= c.allreduce_wait_bad,
       "allreduce_wait_warn, allreduce_wait_bad: need 0 < warn <= bad");
  need(c.rank_spread_warn > 0 && c.rank_spread_warn <= c.rank_spread_bad,
       "rank_spread_warn, rank_spread_bad: need 0 < warn <= bad");
  need(c.ckpt_rate_bad >= 0 && c.ckpt_rate_bad <= c.ckpt_rate_warn && c.ckpt_rate_warn <= 1,
       "ckpt_rate_warn, ckpt_rate_bad: need 0 <= bad <= warn <= 1 (fractions of the disk's rate)");
  need(c.grad_ratio_warn > 1 && c.grad_ratio_warn <= c.grad_ratio_bad, "grad_ratio_warn, grad_ratio_bad: need 1 < warn <= bad");
  need(c.entropy_bad_lo >= 0 && c.entropy_bad_lo <= c.entropy_warn_lo && c.entropy_warn_lo < c.entropy_warn_hi &&
           c.entropy_warn_hi <= c.entropy_bad_hi,
       "entropy_*: need 0 <= bad_lo <= warn_lo < warn_hi <= bad_hi (fractions of the loss)");
  need(c.sparsity_warn_hi > 0 && c.sparsity_warn_hi <= c.sparsity_bad_hi && c.sparsity_bad_hi <= 1,
       "sparsity_warn_hi, sparsity_bad_hi: need 0 < warn <= bad <= 1");
  return Status::ok();
}

namespace {

enum Level { kUnknown = -1, kOk = 0, kWarn = 1, kBad = 2 };

const char* level_name(int l) {
  switch (l) {
    case kOk: return "ok";
    case kWarn: return "warn";
    case kBad: return "bad";
    default: return "unknown";
  }
}

int level_of(const std::string& s) {
  if (s == "ok") return kOk;
  if (s == "warn") return kWarn;
  if (s == "bad") return kBad;
  return kUnknown;
}

// One step's reading of a sign.
struct Reading {
  double value = NAN;
  int level = kOk;
  std::string band, detail;
  std::vector<int> ranks;
};

// Higher is worse: ok up to warn, warn up to bad.
int level_above(double v, double warn, double bad) { return v > bad ? kBad : v > warn ? kWarn : kOk; }
// Lower is worse: ok down to warn, warn down to bad.
int level_below(double v, double warn, double bad) { return v < bad ? kBad : v < warn ? kWarn : kOk; }

std::string num(double v) { return fmt::format("{:.3g}", v); }

// Judges one sign step by step: a step's level counts once `persist` consecutive steps were at
// least that bad; the sign keeps the worst counted level, the first step of the run that reached
// it, the steps of counted runs (the first 20) and the ranks named.
class Tracker {
 public:
  Tracker(std::string name, std::string label, std::string unit, int persist)
      : persist_(std::max(1, persist)) {
    s_.name = std::move(name);
    s_.label = std::move(label);
    s_.unit = std::move(unit);
  }
  // Returns true when the sign's state got worse.
  bool judge(int64_t step, const Reading& r) {
    s_.value = r.value;
    s_.band = r.band;
    s_.last_step = step;
    if (r.level >= kWarn) {
      if (out_run_ == 0) out_start_ = step;
      out_run_++;
      run_steps_.push_back(step);
    } else {
      out_run_ = 0;
      run_steps_.clear();
    }
    if (r.level >= kBad) {
      if (bad_run_ == 0) bad_start_ = step;
      bad_run_++;
    } else {
      bad_run_ = 0;
    }
    const int now = bad_run_ >= persist_ ? kBad : out_run_ >= persist_ ? kWarn : kOk;
    s_.now = level_name(now);
    if (now >= kWarn) {
      for (int64_t st : run_steps_)
        if (s_.steps.size() < 20 && (s_.steps.empty() || s_.steps.back() < st)) s_.steps.push_back(st);
      run_steps_.clear();
      for (int rk : r.ranks)
        if (std::find(s_.ranks.begin(), s_.ranks.end(), rk) == s_.ranks.end()) s_.ranks.push_back(rk);
    }
    const int before = level_of(s_.state);
    if (now > before) {
      s_.state = level_name(now);
      s_.since = now == kBad ? bad_start_ : now == kWarn ? out_start_ : -1;
      if (now >= kWarn) s_.detail = r.detail;
      return now >= kWarn;
    }
    return false;
  }
  const VitalSign& sign() const { return s_; }
  VitalSign& sign() { return s_; }

 private:
  VitalSign s_;
  int persist_;
  int out_run_ = 0, bad_run_ = 0;
  int64_t out_start_ = -1, bad_start_ = -1;
  std::vector<int64_t> run_steps_;
};

double median(std::deque<double> v) {
  if (v.empty()) return NAN;
  const size_t m = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + m, v.end());
  return v[m];
}

double num_at(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : NAN;
}

}  // namespace

json VitalSign::to_json() const {
  return {{"name", name},     {"label", label},   {"unit", unit},   {"state", state},
          {"now", now},       {"value", std::isfinite(value) ? json(value) : json(nullptr)},
          {"band", band},     {"since", since},   {"last_step", last_step},
          {"steps", steps},   {"ranks", ranks},   {"detail", detail}};
}

enum SignIndex { kFetch, kWait, kReduce, kSpread, kCkpt, kGrad, kEntropy, kSparsity, kSpike, kSigns };

struct VitalsMonitor::Impl {
  VitalsConfig c;
  std::vector<Tracker> t;
  std::vector<VitalSign> signs;  // a copy of the trackers' signs (signs() returns a reference)
  std::deque<double> compute_ms;  // the last 101 steps' time less their data wait, for the median
  std::deque<double> norms;       // the last grad_window finite gradient norms
  double disk_mb_s = NAN;
  int64_t step_lines = 0;  // seen: the loader's P95 means something from kP95Samples fetches on
  static constexpr int64_t kP95Samples = 40;  // (two samples above the P95)

  explicit Impl(const VitalsConfig& cfg) : c(cfg) {
    const int p = c.persist;
    t.emplace_back("data_fetch_p95", "data fetch P95", "ms", p);
    t.emplace_back("data_wait", "data wait", "ms", p);
    t.emplace_back("allreduce_wait", "all-reduce wait", "ms", p);
    t.emplace_back("allreduce_spread", "all-reduce wait spread (ranks' arrival)", "ms", p);
    t.emplace_back("ckpt_write", "checkpoint write", "MB/s", 1);
    t.emplace_back("grad_norm_ratio", "gradient-norm ratio (to the recent median)", "", p);
    t.emplace_back("token_entropy", "token entropy", "nats", p);
    t.emplace_back("attn_sparsity", "attention sparsity", "", 1);
    t.emplace_back("loss_spike", "loss spikes", "spikes", 1);
  }

  void step_line(int64_t step, const json& j, std::vector<VitalSign>& worse) {
    auto judge = [&](int i, const Reading& r) {
      if (t[i].judge(step, r)) worse.push_back(t[i].sign());
    };
    step_lines++;
    const double ms = num_at(j, "step_ms");
    if (std::isfinite(ms)) {
      const double wait = num_at(j, "data_wait_ms");
      compute_ms.push_back(ms - (std::isfinite(wait) ? wait : 0.0));
      if (compute_ms.size() > 101) compute_ms.pop_front();
    }
    const double norm = num_at(j, "grad_norm");
    const double norm_med = median(norms);  // (of the steps before this one)
    if (std::isfinite(norm)) {
      norms.push_back(norm);
      if (norms.size() > (size_t)c.grad_window) norms.pop_front();
    }
    if (auto d = num_at(j, "disk_mb_s"); std::isfinite(d) && d > 0) disk_mb_s = d;
    // Discrete signs are judged from the first step; per-step ones after the warmup.
    if (j.contains("ckpt_write_mb_s") && std::isfinite(disk_mb_s)) {
      const double mb_s = num_at(j, "ckpt_write_mb_s"), mb = num_at(j, "ckpt_write_mb");
      if (std::isfinite(mb_s) && !(std::isfinite(mb) && mb < c.ckpt_min_mb)) {
        Reading r;
        r.value = mb_s;
        r.level = level_below(mb_s / disk_mb_s, c.ckpt_rate_warn, c.ckpt_rate_bad);
        r.band = fmt::format("ok >= {} MB/s, warn >= {} MB/s ({} and {} of the disk's {} MB/s)",
                             num(c.ckpt_rate_warn * disk_mb_s), num(c.ckpt_rate_bad * disk_mb_s), c.ckpt_rate_warn,
                             c.ckpt_rate_bad, num(disk_mb_s));
        r.detail = fmt::format("the checkpoint reported at step {} wrote at {} MB/s, {:.1f}% of the disk's {} MB/s",
                               step, num(mb_s), 100 * mb_s / disk_mb_s, num(disk_mb_s));
        judge(kCkpt, r);
      }
    }
    {
      Reading r;
      const double k = j.value("loss_spike", 0.0);
      r.value = k;
      r.level = k >= 1 ? kWarn : kOk;
      r.band = "ok: none, warn: spikes, bad: as many in a row as [health] spike_repeats (a rollback)";
      r.detail = fmt::format("loss {} at step {}: spike {} in a row ([health] spike_sigma over the loss EMA)",
                             num(num_at(j, "loss")), step, (int)k);
      judge(kSpike, r);
    }
    if (j.contains("attn_sparsity")) {
      const double s = num_at(j, "attn_sparsity");
      Reading r;
      r.value = s;
      r.level = level_above(s, c.sparsity_warn_hi, c.sparsity_bad_hi);
      r.band = fmt::format("ok <= {}, warn <= {}", c.sparsity_warn_hi, c.sparsity_bad_hi);
      r.detail = fmt::format("{:.2f}% of sampled attention weights below 1e-3 at step {}", 100 * s, step);
      judge(kSparsity, r);
    }
    if (step <= c.warmup || !std::isfinite(ms)) return;
    const double med = median(compute_ms);
    // Time signs: a value under min_ms is never a problem (tiny steps make every ratio large).
    auto timed = [&](int i, double v, double ref, double warn, double bad, const char* ref_name) {
      if (!std::isfinite(v)) return;
      Reading r;
      r.value = v;
      r.level = v < c.min_ms ? kOk : level_above(v / ref, warn, bad);
      r.band = fmt::format("ok <= {} ms, warn <= {} ms ({} and {} of {} {} ms)", num(std::max(warn * ref, c.min_ms)),
                           num(std::max(bad * ref, c.min_ms)), warn, bad, ref_name, num(ref));
      r.detail = fmt::format("{} ms at step {}: {:.1f}% of {} {} ms", num(v), step, 100 * v / ref, ref_name, num(ref));
      judge(i, r);
    };
    if (j.contains("fetch_ms") && j["fetch_ms"].is_object() && step_lines >= kP95Samples)
      timed(kFetch, num_at(j["fetch_ms"], "p95"), med, c.fetch_p95_warn, c.fetch_p95_bad, "the median compute");
    timed(kWait, num_at(j, "data_wait_ms"), ms, c.data_wait_warn, c.data_wait_bad, "the step's");
    timed(kReduce, num_at(j, "allreduce_wait_ms"), ms, c.allreduce_wait_warn, c.allreduce_wait_bad, "the step's");
    if (auto it = j.find("rank_compute_ms"); it != j.end() && it->is_array() && it->size() > 1) {
      // Every rank leaves a blocking reduction together, so the ranks' waits differ by exactly
      // their arrival times: the spread of the waits is the spread of the compute before it.
      std::vector<double> a;
      for (const auto& x : *it) a.push_back(x.is_number() ? x.get<double>() : 0.0);
      double mean = 0, var = 0;
      for (double x : a) mean += x;
      mean /= a.size();
      for (double x : a) var += (x - mean) * (x - mean);
      const double sd = std::sqrt(var / a.size());
      const int slow = (int)(std::max_element(a.begin(), a.end()) - a.begin());
      Reading r;
      r.value = sd;
      r.level = sd < c.min_ms ? kOk : level_above(sd / ms, c.rank_spread_warn, c.rank_spread_bad);
      r.band = fmt::format("ok <= {} ms, warn <= {} ms ({} and {} of the step's {} ms)",
                           num(std::max(c.rank_spread_warn * ms, c.min_ms)), num(std::max(c.rank_spread_bad * ms, c.min_ms)),
                           c.rank_spread_warn, c.rank_spread_bad, num(ms));
      if (r.level >= kWarn) r.ranks = {slow};
      r.detail = fmt::format("rank {} reached the reduction after {} ms at step {}, the ranks' mean {} ms", slow,
                             num(a[slow]), step, num(mean));
      judge(kSpread, r);
    }
    {
      Reading r;
      const bool skipped = j.contains("skipped");
      const double g = norm / norm_med;
      if (skipped || (std::isfinite(g) && norm_med > 0)) {
        r.value = skipped ? NAN : g;
        const double lg = skipped ? INFINITY : std::fabs(std::log(g > 0 ? g : 1e-30));
        r.level = level_above(lg, std::log(c.grad_ratio_warn), std::log(c.grad_ratio_bad));
        r.band = fmt::format("ok in [{}, {}], warn in [{}, {}]", num(1 / c.grad_ratio_warn), num(c.grad_ratio_warn),
                             num(1 / c.grad_ratio_bad), num(c.grad_ratio_bad));
        r.detail = skipped ? fmt::format("step {}: a non-finite gradient (the update was skipped)", step)
                           : fmt::format("the gradient norm {} at step {} is {}x the median {} of the {} steps before",
                                         num(norm), step, num(g), num(norm_med), norms.size() - 1);
        judge(kGrad, r);
      }
    }
    const double e = num_at(j, "token_entropy"), loss = num_at(j, "loss");
    if (std::isfinite(e) && std::isfinite(loss) && loss > 0) {
      Reading r;
      r.value = e;
      const double q = e / loss;
      r.level = q < c.entropy_bad_lo || q > c.entropy_bad_hi ? kBad
                : q < c.entropy_warn_lo || q > c.entropy_warn_hi ? kWarn
                                                                 : kOk;
      r.band = fmt::format("ok in [{}, {}] nats, warn in [{}, {}] nats ({}-{} and {}-{} of the loss {})",
                           num(c.entropy_warn_lo * loss), num(c.entropy_warn_hi * loss), num(c.entropy_bad_lo * loss),
                           num(c.entropy_bad_hi * loss), c.entropy_warn_lo, c.entropy_warn_hi, c.entropy_bad_lo,
                           c.entropy_bad_hi, num(loss));
      r.detail = fmt::format("the predictions' entropy {} nats at step {} is {:.2f}x the loss {} ({})", num(e), step, q,
                             num(loss), q < 1 ? "over-confident" : "under-confident");
      judge(kEntropy, r);
    }
  }

  void event_line(int64_t step, const json& j, std::vector<VitalSign>& worse) {
    const std::string ev = j.value("event", "");
    if (ev == "rollback" || ev == "spike_no_checkpoint") {
      Reading r;
      r.value = 1;
      r.level = kBad;
      r.band = "ok: none, warn: spikes, bad: as many in a row as [health] spike_repeats (a rollback)";
      r.detail = ev == "rollback" ? fmt::format("repeated loss spikes rolled the run back at step {} to step {}", step,
                                                j.value("to_step", (int64_t)-1))
                                  : fmt::format("repeated loss spikes at step {} and no checkpoint to roll back to", step);
      if (t[kSpike].judge(step, r)) worse.push_back(t[kSpike].sign());
    }
  }
};

VitalsMonitor::VitalsMonitor(const VitalsConfig& c) : p_(std::make_unique<Impl>(c)) {
  for (auto& x : p_->t) p_->signs.push_back(x.sign());
}
VitalsMonitor::~VitalsMonitor() = default;
VitalsMonitor::VitalsMonitor(VitalsMonitor&&) noexcept = default;
VitalsMonitor& VitalsMonitor::operator=(VitalsMonitor&&) noexcept = default;

std::vector<VitalSign> VitalsMonitor::observe(const json& line) {
  std::vector<VitalSign> worse;
  if (!p_->c.enabled || !line.is_object() || !line.contains("step") || !line["step"].is_number_integer()) return worse;
  const int64_t step = line["step"].get<int64_t>();
  if (line.contains("event")) p_->event_line(step, line, worse);
  else if (line.contains("loss")) p_->step_line(step, line, worse);
  p_->signs.clear();
  for (auto& x : p_->t) p_->signs.push_back(x.sign());
  return worse;
}

const std::vector<VitalSign>& VitalsMonitor::signs() const { return p_->signs; }

std::string VitalsMonitor::worst() const {
  int w = kOk;
  for (const auto& s : p_->signs) w = std::max(w, level_of(s.state));
  return level_name(w);
}

json VitalsReport::to_json() const {
  json j = {{"run", run_dir}, {"state", state}, {"lines", lines}, {"bad_lines", bad_lines}, {"last_step", last_step}};
  j["signs"] = json::array();
  for (const auto& s : signs) j["signs"].push_back(s.to_json());
  j["tasks"] = json::object();
  for (const auto& t : tasks) j["tasks"][t.name] = t.to_json();
  j["warnings"] = warnings;
  if (restarts.any()) j["restarts"] = restarts.to_json();
  return j;
}

std::string VitalsReport::text() const {
  std::string out = fmt::format("vital signs of {} (up to step {}, {} lines{}): {}\n", run_dir, last_step, lines,
                                bad_lines ? fmt::format(", {} unreadable", bad_lines) : std::string(), state);
  size_t w = 4;
  for (const auto& s : signs) w = std::max(w, s.label.size());
  for (const auto& s : signs) {
    const std::string value = std::isfinite(s.value) ? fmt::format("{} {}", num(s.value), s.unit) : std::string("-");
    out += fmt::format("  {:<{}}  {:<7}  {:>14}", s.label, w, s.state, value);
    if (s.state == "unknown") {
      out += "  (nothing to judge in this run)\n";
      continue;
    }
    out += fmt::format("  {}", s.band);
    if (s.since >= 0) {
      out += fmt::format("; since step {}", s.since);
      if (s.state != s.now) out += fmt::format(", {} now", s.now);
      if (!s.ranks.empty()) {
        out += "; rank";
        for (int r : s.ranks) out += fmt::format(" {}", r);
      }
      out += fmt::format("\n  {:<{}}  {}", "", w, s.detail);
      if (!s.steps.empty()) {
        out += " (steps";
        for (int64_t st : s.steps) out += fmt::format(" {}", st);
        out += ")";
      }
    }
    out += "\n";
  }
  for (const auto& t : tasks) out += "  " + t.summary() + "\n";
  if (restarts.any()) out += "  " + restarts.summary() + "\n";
  for (const auto& w : warnings) out += "  warning: " + w + "\n";
  return out;
}

Status vitals_check_run(const std::string& run_dir, VitalsReport& out, int64_t from_step) {
  out = VitalsReport{};
  out.run_dir = run_dir;
  const std::string metrics = (fs::path(run_dir) / "metrics.jsonl").string();
  std::ifstream in(metrics);
  if (!in) return Status::error(fmt::format("{}: cannot open (is {} a run folder?)", metrics, run_dir));
  VitalsConfig c;
  const std::string cfg = (fs::path(run_dir) / "config.toml").string();
  if (fs::exists(cfg)) {
    toml::table root, resolved;
    if (Status s = config_load(cfg, root); !s) return s;
    std::vector<std::string> errors;
    // (a run folder's config has every section; only [health.vitals] matters here)
    if (Status s = vitals_config_read(root, c, resolved, errors); !s) return s;
    if (!errors.empty()) return Status::error(fmt::format("{}: {}", cfg, errors.front()));
  }
  VitalsMonitor mon(c);
  TaskTrends tasks;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) {
      // (a torn last line of a run being written, or a hand edit)
      out.bad_lines++;
      continue;
    }
    out.lines++;
    out.restarts.observe(j);  // (the whole run's, whatever --from-step says)
    const int64_t step = j["step"].get<int64_t>();
    out.last_step = std::max(out.last_step, step);
    if (step <= from_step) continue;
    mon.observe(j);
    tasks.observe(j);
  }
  out.signs = mon.signs();
  out.state = mon.worst();
  out.tasks = tasks.trends();
  for (const auto& t : out.tasks)
    if (t.regressed()) out.warnings.push_back(t.warning());
  if (!out.warnings.empty() && out.state == "ok") out.state = "warn";
  return Status::ok();
}

}  // namespace smelt
