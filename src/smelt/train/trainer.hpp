// The training loop of `smelt train` (docs/train.md): model + loader + schedule + AdamW, gradient
// accumulation, periodic evaluation, metrics.jsonl with health signals, a live console status,
// checkpoints (every N steps, at the end, on SIGINT/SIGTERM) and --resume. Not the evaluation
// (evaluate.hpp), the config parsing (train_config.hpp) nor checkpoint files (ckpt/).
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "smelt/common/status.hpp"
#include "smelt/dataset/loader.hpp"
#include "smelt/model/model.hpp"
#include "smelt/train/evaluate.hpp"
#include "smelt/train/step_report.hpp"
#include "smelt/train/train_config.hpp"

namespace smelt {

// Runs training as configured. Returns an error before any step for a bad setup (data, memory
// plan, resume mismatch); a SIGINT/SIGTERM (train_request_stop) ends it after the current step with
// a checkpoint and an ok status.
Status train_run(const TrainConfig& c, TrainSummary& out);
// Async-signal-safe; the request lasts for the rest of the process (a request made while a run is
// being set up ends it after its first step).
void train_request_stop();

}  // namespace smelt
