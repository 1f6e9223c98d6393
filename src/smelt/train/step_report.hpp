// The trainer's reports: one optimizer step's numbers (StepStats) and its metrics.jsonl line, and
// the run's summary (TrainSummary: its text and summary.json). Formatting only: the trainer
// gathers the numbers and hands them over in StepLineFacts and RunFacts; nothing here talks to a
// rank, a file or the model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "smelt/dataset/loader.hpp"
#include "smelt/hw/cpu_info.hpp"
#include "smelt/machine/gemm_select.hpp"
#include "smelt/model/activations.hpp"

namespace smelt {

// One optimizer step's numbers, summed over its micro-batches (and, after the trainer's
// reduction, its ranks).
struct StepStats {
  double lr = 0, loss_sum = 0, entropy = 0, wait_ms = 0, sparsity = -1;
  double forward_ms = 0;  // in the model's forward passes (against the evaluation's speed)
  uint64_t tokens = 0;
  int T = 0;                           // the step's row length (bucketed batches vary)
  std::vector<double> src_sum, src_n;  // per-source loss sums and target counts
  // communication: all of the step's (allreduce_ms) and the part the step waited for
  double allreduce_ms = 0, allreduce_wait_ms = 0;
  double compute_ms = 0;                 // from the step's start to its reduction (this rank)
  std::vector<double> rank_compute_ms;   // [rank] every rank's compute_ms (several ranks)
  uint64_t bytes_before = 0;
  // tensor and pipeline parallel: bytes this rank sent per group before the step, its time in TP
  // collectives and waiting for its pipeline neighbours; after the reduction, every stage's wait
  // and the groups' bytes over all ranks
  uint64_t tp_bytes_before = 0, pp_bytes_before = 0;
  double tp_ms = 0, pp_wait_ms = 0;
  std::vector<double> stage_wait_ms;
  double tp_bytes = 0, pp_bytes = 0, dp_bytes = 0;
  int buckets = 0;
  bool overlap = false;
  // the update and its timing
  bool finite = true;
  double loss = 0, grad_norm = NAN, step_ms = 0, tok_s = 0, flops_per_s = 0, mfu = 0;
};

// What a step's line needs beyond the step's own numbers.
struct StepLineFacts {
  int64_t step = 0;
  uint64_t tokens = 0;          // trained on so far
  double prev_grad_norm = 0;    // the last finite step's (0: none)
  int grad_accum = 1;  // [train] grad_accum: the micro-batches of the step (through the pipeline too)
  int ranks = 1;
  uint64_t allreduce_bytes = 0;  // this rank's data-parallel bytes sent in the step
  bool model_parallel = false;
  int pp = 1;
  const std::vector<std::string>* sources = nullptr;  // [source index] names
  double mfu_peak = 0;
  LatencyWindow::Stats fetch;
  double ckpt_stall_ms = 0;  // waiting for the previous save's staging copy (0: none)
};

// The step's metrics.jsonl line, before evaluation and checkpoint fields are added. The timing
// fields come last: they are the only ones that differ between identical runs.
nlohmann::ordered_json step_metrics_line(const StepStats& st, const StepLineFacts& f);

// What the run's summary reports.
struct RunFacts {
  std::string run_dir, checkpoint;
  int64_t start_step = 0, steps = 0, total_steps = 0;
  uint64_t tokens = 0, tokens_this_run = 0;
  int64_t parameters = 0, parameters_this_rank = 0;
  int dp = 1, tp = 1, pp = 1, ranks = 1, nodes = 1, threads = 1, zero = 0;
  // [3 r] planned bytes (the process row included), [3 r + 1] peak RSS, [3 r + 2] the plan's
  // process row (measured at the start) of rank r
  std::vector<double> memory_per_rank;
  double first_loss = NAN, last_loss = NAN, eval_first = -1, eval_last = -1;
  double eval_first_bpb = -1, eval_last_bpb = -1;
  bool stopped_by_signal = false, lead = true;
  // [train] time_budget_minutes (budget_s 0: none)
  double budget_s = 0, budget_minutes = 0, plan_step_s = 0;
  bool planned = false, out_of_time = false;
  int64_t planned_at = -1;
  // timing
  double seconds = 0, sum_step_ms = 0, sum_wait_ms = 0, sum_forward_ms = 0;
  double flops_per_token = 0, gemm_gflops = 0;  // gemm_gflops: the MFU denominator
  double gemm_gflops_start = 0, gemm_gflops_end = -1;  // the start-up measurement; the end's (-1: none)
  PeakRate peak;
  const GemmChoice* gemm = nullptr;
  const MemoryPlan* plan = nullptr;
  std::string precision, allreduce;
  LatencyWindow::Stats fetch;
};

// MFU against the GEMM rate at the model's shapes (per rank). A step that includes every other
// op cannot beat its own GEMMs, so a rate above the start-up measurement means the measurement was
// low: the achieved rate is then the best seen, and MFU is 100%.
double mfu_of(double per_rank_gflops, double gemm_gflops);
// Against the CPU's peak from its clock; a clock read low (turbo above the nominal MHz) is
// corrected the same way.
double mfu_peak_of(double per_rank_gflops, double gemm_gflops, double peak_gflops);

// The GEMM rate the steps reached, per rank: FLOPs per token x tokens this run over the steps'
// time (0 before any step).
double steps_gflops_per_rank(const RunFacts& f);

// What a run reports (train_run fills it through run_summary).
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

// Fills out's numbers, text and json from the facts.
void run_summary(const RunFacts& f, TrainSummary& out);

// This process's peak resident memory (VmHWM), 0 where /proc does not say.
int64_t peak_rss_bytes();
// This process's resident memory now (/proc/self/statm: one short read), and of it the pages
// backed by files (mapped token shards, the binary, libraries) and shared memory, which the kernel
// can drop or that others share; 0 where /proc does not say.
struct ResidentMemory {
  int64_t bytes = 0, file_bytes = 0;
  int64_t own() const { return bytes - file_bytes; }  // anonymous: what only this process holds
};
ResidentMemory resident_memory();
// 1.23M, 4.5k: for the console.
std::string human_count(double x);
// 1h02m, 3m04s, 5s; "?" for a negative or unknown time.
std::string duration_str(double seconds);
// Seconds left for a status line: the pace so far times the steps left, and never past a time
// budget (budget_s > 0, counted from the same start as elapsed_s), which ends the run whatever
// the first steps' pace (start-up included) said; -1 when neither tells.
double eta_seconds(double elapsed_s, double steps_done, double steps_left, double budget_s);

}  // namespace smelt
