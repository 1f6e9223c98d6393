// The planner's cost model (docs/plan.md): for a model, a global batch and a cluster, every
// layout DP x TP x PP x ZeRO-1 x recompute x micro-batch, its memory per rank and its step time.
// Memory comes from the trainer's own tables (run_memory_plan: memory_plan plus the step's
// buffers) and the cluster's fixed memory per process; time from the FLOPs and bytes of each
// rank's share at the cluster's rates, the communication from the measured curves (or bandwidth
// and latency), the 1F1B schedule simulated with each stage's own times, and the checkpoint
// stall. Not the cluster file (cluster.hpp) nor the measurement (calibrate.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "smelt/common/status.hpp"
#include "smelt/model/config.hpp"
#include "smelt/plan/cluster.hpp"
#include "smelt/train/run_memory.hpp"

namespace smelt {

struct PlanRequest {
  ModelConfig model;
  int64_t global_batch = 0;  // sequences per optimizer step
  int seq = 0;
  Precision precision = Precision::kFp32;
  int ranks = 0;               // 0: every device of the cluster
  int64_t save_every = 0;      // periodic checkpoints (0: none): staging memory and the stall
  bool save_at_end = true;     // [ckpt] save_at_end (the trainer's default): the end's save stages one copy
  DistConfig dist;             // [dist] overlap, bucket_mb (the run's section, its defaults)
  std::vector<int> micro_batches;  // rows per micro-batch per rank to try (empty: every divisor)
};

struct Layout {
  int dp = 1, tp = 1, pp = 1;
  bool zero = false, recompute = false;
  int micro = 1;   // rows per micro-batch per rank ([data] batch_size = dp x micro)
  int accum = 1;   // micro-batches per step ([train] grad_accum)
  std::string name() const;  // "dp2-tp1-pp2-z1-rc0-mb4" (parsed back by layout_parse)
};
// "dp2-tp1-pp2-z1-rc0-mb4"; missing parts default (dp 1, tp 1, pp 1, z0, rc0), mb is required
// unless the batch fixes it.
Status layout_parse(const std::string& s, Layout& out);

struct MemoryEstimate {
  RunMemory run;          // the largest rank's (the first stage's under 1F1B, usually)
  int stage = 0;          // which stage that is
  int64_t process_bytes = 0;  // the cluster's fixed memory per process
  int64_t total() const { return run.total() + process_bytes; }
};

struct TimeEstimate {
  // per step on the slowest rank, milliseconds
  double gemm_ms = 0, attention_ms = 0, elementwise_ms = 0;  // compute of every micro-batch (busiest stage)
  double optimizer_ms = 0;     // gradient norm, AdamW, zeroing, the micro-batches' sum
  double tp_ms = 0;            // tensor-parallel all-reduces (inside the micro-batches)
  double tp_wait_ms = 0;       // the part of tp_ms that waits for the slowest rank (the sync curve)
  double pp_send_ms = 0;       // the busiest stage's point-to-point messages
  double bubble_ms = 0;        // the 1F1B schedule's idle on the busiest stage (simulated)
  double dp_ms = 0, dp_exposed_ms = 0;  // the gradient reduction (ZeRO-1: + the weights' all-gather); the part not hidden
  double ckpt_ms = 0;          // checkpoint stall per step (staging copy; the write where it outlasts the interval)
  double oversubscription = 1;  // ranks x threads over cores (CPU nodes): compute slows by this
  double step_ms = 0;
  std::string dominant;        // the largest part: "gemm", "attention", "elementwise", "tp", "pp bubble", "dp", ...
};

struct Prediction {
  Layout layout;
  bool fits = false;
  std::string reason;          // why not (does not fit: by how much; not divisible: what)
  MemoryEstimate memory;
  int64_t memory_limit = 0;    // bytes per device
  TimeEstimate time;
  double tokens_per_s = 0, mfu = 0;  // mfu: model FLOPs over the ranks' GEMM peak
};

// One layout. A layout the model or the batch does not allow comes back with fits = false and
// the reason, before any cost is computed.
Prediction plan_predict(const PlanRequest& r, const ClusterSpec& c, const Layout& l);
// Every layout for the request's rank count: the ones that fit, fastest first, then the rejected.
std::vector<Prediction> plan_search(const PlanRequest& r, const ClusterSpec& c);

// The GEMM rate (GFLOP/s, forward + backward) for (rows, in, out): the cluster's measured point at
// these shapes (nearest rows), else its rate for the precision.
double plan_gemm_rate(const ClusterSpec& c, int64_t rows, int64_t in, int64_t out, Precision p);

}  // namespace smelt
