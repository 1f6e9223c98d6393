// A training rank's memory beyond the model's plan (memory_plan: parameters, gradients, AdamW
// moments, activations, bf16 operands): the buffers the trainer and the communicator hold for the
// step — the micro-batches' gradient sum, the reductions' receive scratch, the pipeline's outgoing
// message copies, the checkpoint writer's staging buffers, the start-up GEMM measurement's operands
// (held while the model is allocated, and freed before the step's buffers exist). One table, read by the trainer (its
// summary's planned bytes per rank) and by `smelt plan` (which adds the process's fixed memory
// from the cluster file). Not a measurement: sizes from the layout.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "smelt/dist/communicator.hpp"
#include "smelt/model/activations.hpp"
#include "smelt/model/config.hpp"
#include "smelt/model/shard.hpp"

namespace smelt {

struct RunMemoryInput {
  int B = 1, T = 1;           // rows per micro-batch on this rank, their length
  int dp = 1, grad_accum = 1;  // data-parallel replicas; micro-batches per step
  bool zero = false;          // ZeRO-1 over the DP group
  DistConfig dist;            // [dist]: overlap (only without TP and PP) and bucket_mb
  bool checkpoints = false;   // periodic saves: the writer's two staging buffers fill
  Precision precision = Precision::kFp32;
  int threads = 1;
};

struct RunMemory {
  MemoryPlan model;              // memory_plan for the shard
  int64_t accum_bytes = 0;       // grad_accum > 1: the step's gradient sum (one float per parameter)
  int64_t reduce_bytes = 0;      // the deterministic sums' receive scratch: the largest message each group reduces
  int64_t pipeline_bytes = 0;    // a stage's outgoing activations and gradients kept until sent
  int64_t staging_bytes = 0;     // checkpoint writer: two staging buffers of this rank's part
  int64_t gemm_probe_bytes = 0;  // the start-up GEMM measurement's operands (gemm_select, the whole model's shapes)
  // The peak: the measurement's operands are freed before the step's buffers are made, so the
  // model holds either them or the step's buffers.
  int64_t step_bytes() const { return accum_bytes + reduce_bytes + pipeline_bytes + staging_bytes; }
  int64_t total() const { return model.total() + std::max(gemm_probe_bytes, step_bytes()); }
  std::string report() const;    // memory_plan's lines and these
};

RunMemory run_memory_plan(const ModelConfig& c, const ModelShard& shard, const RunMemoryInput& in);

}  // namespace smelt
