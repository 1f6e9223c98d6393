// Vital signs of a training run ([health.vitals]): the bands each sign should stay in, and one
// monitor that judges metrics.jsonl lines against them, step by step. The trainer feeds it each
// line as it writes it (and logs the first time a sign leaves its band); `smelt health` and the
// dashboard feed it a finished or running file and get the same verdict. Not the recovery rules
// (train/health.hpp) nor how the lines are made (train/trainer_report.cpp).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "smelt/common/status.hpp"
#include "smelt/obs/run_restarts.hpp"
#include "smelt/obs/task_trend.hpp"

namespace smelt {

// Bands: a value inside [warn_lo, warn_hi] is ok, inside [bad_lo, bad_hi] but not the first
// band is warn, outside both is bad. Relative bands are fractions of the measured reference named
// in the comment (the step time, the disk rate at start, the loss), so one default holds on any
// machine. docs/observability.md gives each default and why.
struct VitalsConfig {
  bool enabled = true;
  int persist = 3;              // a per-step sign counts after this many consecutive steps outside
  int64_t warmup = 10;          // steps before per-step signs are judged (first touches, the EMA)
  double min_ms = 5;            // a time under this is never a problem (tiny steps make ratios large)
  // data: the loader's fetch P95 as a fraction of the median compute time (the step less its
  // wait: beyond 1 the prefetcher cannot keep up; judged from the 40th step, when one slow fetch
  // no longer is the P95), and the step's wait as a fraction of the step
  double fetch_p95_warn = 0.5, fetch_p95_bad = 1.0;
  double data_wait_warn = 0.05, data_wait_bad = 0.2;
  // all-reduce: the mean wait as a fraction of step time, and the spread of the ranks' compute
  // time before the reduction (std / mean), which names the straggler
  double allreduce_wait_warn = 0.2, allreduce_wait_bad = 0.5;
  double rank_spread_warn = 0.1, rank_spread_bad = 0.3;
  // checkpoint write MB/s as a fraction of the disk's rate measured at the start of the run
  double ckpt_rate_warn = 0.25, ckpt_rate_bad = 0.05;
  double ckpt_min_mb = 8;       // smaller checkpoints are not judged (their time is fsync latency)
  int disk_probe_mb = 32;       // the trainer's measurement of that rate, at most the checkpoint's
                                // size (0: none)
  // gradient-norm ratio, this step's norm over the median of the last grad_window steps' norms:
  // inside [1/warn, warn] ok, [1/bad, bad] warn (step-to-step ratios swing too much to judge)
  double grad_ratio_warn = 4.0, grad_ratio_bad = 10.0;
  int grad_window = 20;
  // token entropy over the loss (a calibrated model's entropy is near its loss): ok inside
  // [entropy_warn_lo, entropy_warn_hi], warn inside [entropy_bad_lo, entropy_bad_hi]
  double entropy_warn_lo = 0.5, entropy_warn_hi = 1.5, entropy_bad_lo = 0.25, entropy_bad_hi = 2.5;
  // attention sparsity (the share of attention weights below 1e-3): ok up to sparsity_warn_hi,
  // warn up to sparsity_bad_hi, bad beyond (heads that attend to one token and nothing else)
  double sparsity_warn_hi = 0.97, sparsity_bad_hi = 0.995;
  // loss spikes (the trainer's detector, [health] spike_*): a spike warns; as many in a row as
  // [health] spike_repeats (the trainer then rolls back) are bad
};

Status vitals_config_read(const toml::table& root, VitalsConfig& c, toml::table& resolved,
                          std::vector<std::string>& errors);
struct SectionDoc;
SectionDoc vitals_config_doc();  // [health.vitals]'s field table (docs check)

// One sign's verdict over the lines seen.
struct VitalSign {
  std::string name;    // "data_fetch_p95", "data_wait", "allreduce_wait", "rank_spread", "ckpt_write",
                       // "grad_norm_ratio", "token_entropy", "attn_sparsity", "loss_spike"
  std::string label;   // what a person reads: "data fetch P95"
  std::string unit;    // of value: "ms", "MB/s", "nats", "", ...
  std::string state = "unknown";  // the worst seen: ok | warn | bad | unknown (nothing judged yet)
  std::string now = "unknown";    // at the latest step judged
  double value = 0;    // the latest value (NaN: none)
  std::string band;    // the bands in the value's unit, as text: "ok <= 12.5 ms, warn <= 25 ms"
  int64_t since = -1;  // the first step of the worst state's first run (-1: ok all along)
  int64_t last_step = -1;          // the latest step judged
  std::vector<int64_t> steps;      // steps outside the ok band (the first 20)
  std::vector<int> ranks;          // ranks responsible, where the sign can tell (the straggler)
  std::string detail;  // one line: "rank 1 computed 2.3x the others' mean at step 14"
  nlohmann::json to_json() const;
};

// Judges metrics.jsonl lines in order: step lines and event lines ({"event": ...}).
class VitalsMonitor {
 public:
  explicit VitalsMonitor(const VitalsConfig& c);
  ~VitalsMonitor();
  VitalsMonitor(VitalsMonitor&&) noexcept;
  VitalsMonitor& operator=(VitalsMonitor&&) noexcept;
  // Feeds one line; returns the signs whose state got worse with it (for the trainer's warnings).
  std::vector<VitalSign> observe(const nlohmann::json& line);
  const std::vector<VitalSign>& signs() const;
  std::string worst() const;  // the worst state of all signs: ok | warn | bad (unknown counts as ok)

 private:
  struct Impl;
  std::unique_ptr<Impl> p_;
};

// A run folder's verdict: [health.vitals] from RUN/config.toml (defaults where absent), every line
// of RUN/metrics.jsonl (a line that does not parse is skipped and counted), only steps above
// from_step when given. The downstream tasks of its evaluation lines follow the signs; a task
// that fell behind its best (TaskTrend::regressed) makes an ok run warn. The JSON: {"run",
// "state", "lines", "bad_lines", "last_step", "signs": [..], "tasks": {NAME: ..}, "warnings": [..]}.
struct VitalsReport {
  std::string run_dir, state = "ok";
  int64_t lines = 0, bad_lines = 0, last_step = -1;
  std::vector<VitalSign> signs;
  std::vector<TaskTrend> tasks;       // in order of first appearance
  std::vector<std::string> warnings;  // one per regressed task (TaskTrend::warning)
  RunRestarts restarts;               // smelt launch's restarts and goodput (none: not supervised)
  nlohmann::json to_json() const;
  std::string text() const;  // a table a person reads
};
Status vitals_check_run(const std::string& run_dir, VitalsReport& out, int64_t from_step = -1);

}  // namespace smelt
