// A training rank's memory beyond the model's plan (memory_plan: parameters, gradients, AdamW
// moments, activations, bf16 operands): the buffers the trainer and the communicator hold for the
// step — the micro-batches' gradient sum, the reductions' receive scratch, the pipeline's outgoing
// message copies, the checkpoint writer's staging buffers (periodic saves and the end's), the
// evaluation's task scorer, the start-up GEMM measurement's operands (held while the model is
// allocated, and freed before the step's buffers exist) — and the process itself (binary,
// libraries: the caller's figure). One table, read by the trainer (its summary's planned bytes per
// rank, the memory ceiling's message) and by `smelt plan` (which adds the process's fixed memory
// from the cluster file). Not a measurement: sizes from the layout, but for the process row.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "smelt/dist/communicator.hpp"
#include "smelt/model/activations.hpp"
#include "smelt/model/config.hpp"
#include "smelt/model/lora.hpp"
#include "smelt/model/shard.hpp"

namespace smelt {

struct RunMemoryInput {
  int B = 1, T = 1;           // rows per micro-batch on this rank, their length
  int dp = 1, grad_accum = 1;  // data-parallel replicas; micro-batches per step
  bool zero = false;          // ZeRO-1 over the DP group
  DistConfig dist;            // [dist]: overlap (only without TP and PP) and bucket_mb
  bool checkpoints = false;   // periodic saves ([ckpt] save_every): the writer's two staging buffers fill
  bool save_at_end = false;   // [ckpt] save_at_end: the end's save fills one (when there are no periodic ones)
  bool staged = true;         // [ckpt] async (or a multi-rank part): saves copy into staging; false: written from the tensors
  int64_t eval_bytes = 0;     // [eval] tasks: the scorer's buffers while it scores (TaskEvaluator::bytes; rank 0)
  int64_t process_bytes = 0;  // the process before the plan's buffers: binary, libraries, MPI (the trainer measures it)
  Precision precision = Precision::kFp32;
  int threads = 1;
  LoraConfig lora;  // [lora] (rank 0: none): what trains, is reduced and saved is the adapters
};

struct RunMemory {
  MemoryPlan model;              // memory_plan for the shard
  int64_t accum_bytes = 0;       // grad_accum > 1: the step's gradient sum (one float per parameter)
  int64_t reduce_bytes = 0;      // the deterministic sums' receive scratch: the largest message each group reduces
  int64_t pipeline_bytes = 0;    // a stage's outgoing activations and gradients kept until sent
  int64_t staging_bytes = 0;     // checkpoint writer: two staging buffers of this rank's part (one: the end's save only)
  int64_t writer_bytes = 0;      // the safetensors writer's write buffers while a save is written
  int64_t eval_bytes = 0;        // the task scorer's decoder and logits, made at each evaluation and freed after
  int64_t process_bytes = 0;     // the process's own memory (RunMemoryInput::process_bytes)
  int64_t gemm_probe_bytes = 0;  // the start-up GEMM measurement's operands (gemm_select, the whole model's shapes)
  // The peak: the measurement's operands are freed before the step's buffers are made, so the
  // model holds either them or the step's buffers (a staging buffer, once filled, stays for the
  // run, so an evaluation after a save holds both).
  int64_t step_bytes() const { return accum_bytes + reduce_bytes + pipeline_bytes + staging_bytes + writer_bytes + eval_bytes; }
  int64_t total() const { return process_bytes + model.total() + std::max(gemm_probe_bytes, step_bytes()); }
  std::string report() const;    // memory_plan's lines and these
  // "run total 2401.6 MiB: activations 828.9 MiB, ckpt staging 664.6 MiB, ..." — the total and the
  // largest rows, in one line (the memory ceiling's message)
  std::string summary(int rows = 4) const;
};

RunMemory run_memory_plan(const ModelConfig& c, const ModelShard& shard, const RunMemoryInput& in);

}  // namespace smelt
