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
#include "smelt/train/train_config.hpp"

namespace smelt {

struct TrainSummary {
  int64_t start_step = 0, steps = 0;  // steps: optimizer steps completed in total
  uint64_t tokens = 0;                // target tokens trained on (whole run, resumes included)
  double first_loss = 0, last_loss = 0;
  double eval_first = -1, eval_last = -1;  // -1: no evaluation
  double tokens_per_s = 0, seconds = 0;
  double mfu = 0;           // against the model's GEMM rate (back end and precision of the run)
  double mfu_peak = 0;      // against the CPU's peak from its instruction set and clock
  double sgemm_gflops = 0;  // that GEMM rate (measured at the start, again at the end when the steps beat it;
                            // at least the rate the steps reached)
  double data_wait_fraction = 0;      // data wait / step time over this process's steps
  std::string checkpoint;             // the last committed checkpoint ("" if none)
  bool stopped_by_signal = false;
  bool lead = true;                   // rank 0 (the one that prints and writes)
  std::string text;                   // the human-readable summary
  nlohmann::json json;                // the same as JSON (also RUN/summary.json)
};

// Runs training as configured. Returns an error before any step for a bad setup (data, memory
// plan, resume mismatch); a SIGINT/SIGTERM (train_request_stop) ends it after the current step with
// a checkpoint and an ok status.
Status train_run(const TrainConfig& c, TrainSummary& out);
// Async-signal-safe; the request lasts for the rest of the process (a request made while a run is
// being set up ends it after its first step).
void train_request_stop();

// The model's planned batch (rows B, length T) for the largest batch the loader hands one rank.
void train_batch_shape(const LoaderConfig& d, int& B, int& T);
// FLOPs per token of a training step: 6 x matmul parameters + 12 x layers x d_model x T.
double train_flops_per_token(const ModelConfig& c, int T);

}  // namespace smelt
