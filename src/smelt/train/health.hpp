// Health-driven recovery rules of the trainer ([health]): skip non-finite updates, roll back to the
// last good checkpoint after repeated loss spikes (EMA + deviations) and quarantine the data window
// that caused them, restart the LR schedule when the evaluation's token entropy collapses. Also the
// fault injection the tests use to trigger each rule. Not the actions' mechanics (trainer.cpp, trainer_eval.cpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "smelt/common/status.hpp"
#include "smelt/dataset/blend.hpp"
#include "smelt/obs/vitals.hpp"

namespace smelt {

struct HealthConfig {
  bool skip_nonfinite = true;   // NaN/Inf loss or gradient: skip the update, count it
  double spike_sigma = 6.0;     // a loss above EMA + sigma * EMA deviation is a spike (0: off)
  int spike_repeats = 3;        // this many consecutive spikes -> roll back
  int spike_warmup = 50;        // steps before spikes are judged (the EMA settles)
  double ema_beta = 0.95;       // of the loss mean and variance
  double entropy_floor = 0.0;   // evaluation token entropy (nats) below this counts (0: off)
  int entropy_evals = 3;        // this many consecutive low evaluations -> LR restart
  double lr_restart_scale = 0.3;  // the restarted schedule's peak, as a fraction of lr
  // Fault injection (tests): NaN into the gradients / scrambled targets at these steps (1-based).
  std::vector<int64_t> inject_nan_steps, inject_bad_data_steps;
  VitalsConfig vitals;  // [health.vitals]: the bands the run's vital signs are judged against
};

// Reads [health] and [health.vitals] into c and resolved; every error (type, unknown key, range)
// into errors.
void health_config_read(const toml::table& root, HealthConfig& c, toml::table& resolved,
                        std::vector<std::string>& errors);
struct SectionDoc;
SectionDoc health_config_doc();  // [health]'s field table (docs check)

// Loss-spike detector: an exponential moving mean and variance of accepted losses.
class SpikeDetector {
 public:
  explicit SpikeDetector(const HealthConfig& c) : c_(c) {}
  // Judges `loss` at `step` (1-based); returns true when it is a spike. Non-spikes update the EMA.
  bool observe(int64_t step, double loss);
  int consecutive() const { return run_; }
  void reset_run() { run_ = 0; }
  double mean() const { return mean_; }
  double deviation() const;
  nlohmann::json to_json() const;
  void from_json(const nlohmann::json& j);

 private:
  HealthConfig c_;
  double mean_ = 0, var_ = 0;
  int64_t seen_ = 0;
  int run_ = 0;
};

// The documents a data window touched: for each source, the epoch-order documents between two loader
// positions, resolved to their lineage ids through PREFIX.docs (when present). One JSON line for
// RUN/quarantine.jsonl.
nlohmann::json quarantine_window(const std::vector<DataSource>& sources, uint64_t seed, bool shuffle,
                                 const LoaderPosition& from, const LoaderPosition& to, int64_t step_from,
                                 int64_t step_to, size_t max_ids = 100000);

}  // namespace smelt
