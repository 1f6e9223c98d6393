// The run configuration of `smelt train`: [model], [data], [train], [optim], [eval], [ckpt], [health],
// [dist], [trace] read from TOML (+ --set overrides and the plain flags) into typed structs, validated before any
// work starts, and written back fully resolved into the run folder and every checkpoint.
// Not the loop (trainer.hpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "smelt/common/config_schema.hpp"
#include "smelt/common/status.hpp"
#include "smelt/dataset/loader.hpp"
#include "smelt/dist/communicator.hpp"
#include "smelt/model/config.hpp"
#include "smelt/model/lora.hpp"
#include "smelt/model/model.hpp"
#include "smelt/train/optimizer.hpp"
#include "smelt/train/health.hpp"
#include "smelt/train/schedule.hpp"

namespace smelt {

// [train] precision: the linear layers' numerics; auto = bf16 where the CPU has bf16 units.
enum class PrecisionMode { kFp32, kBf16, kAuto };
inline constexpr EnumName<PrecisionMode> kPrecisionModeNames[] = {
    {PrecisionMode::kFp32, "fp32"}, {PrecisionMode::kBf16, "bf16"}, {PrecisionMode::kAuto, "auto"}};
inline std::span<const EnumName<PrecisionMode>> enum_names(PrecisionMode) { return kPrecisionModeNames; }

// [train] gemm: the GEMM back end (auto: measured, cached per machine; in bf16 also the engine of
// each linear product, oneDNN or the packed kernel).
enum class GemmRequest { kAuto, kOpenblas, kOnednn, kBlis };
inline constexpr EnumName<GemmRequest> kGemmRequestNames[] = {{GemmRequest::kAuto, "auto"},
                                                              {GemmRequest::kOpenblas, "openblas"},
                                                              {GemmRequest::kOnednn, "onednn"},
                                                              {GemmRequest::kBlis, "blis"}};
inline std::span<const EnumName<GemmRequest>> enum_names(GemmRequest) { return kGemmRequestNames; }

// [train] device: where the model's steps run (cuda: one NVIDIA GPU, docs/cuda.md).
enum class DeviceKind { kCpu, kCuda };
inline constexpr EnumName<DeviceKind> kDeviceKindNames[] = {{DeviceKind::kCpu, "cpu"}, {DeviceKind::kCuda, "cuda"}};
inline std::span<const EnumName<DeviceKind>> enum_names(DeviceKind) { return kDeviceKindNames; }

// [ckpt] on_error: what a failed save does to the run.
enum class CkptOnError { kStop, kContinue };
inline constexpr EnumName<CkptOnError> kCkptOnErrorNames[] = {{CkptOnError::kStop, "stop"},
                                                              {CkptOnError::kContinue, "continue"}};
inline std::span<const EnumName<CkptOnError>> enum_names(CkptOnError) { return kCkptOnErrorNames; }

// Each section's keys, defaults, limits and docs: the struct's initializers plus its field table
// in train_config.cpp (docs/config.md).
struct TrainOptions {            // [train]
  std::string run_dir = "runs/default";
  int64_t steps = 1000;          // stop after this many optimizer steps (0: only max_tokens stops)
  int64_t max_tokens = 0;        // stop once this many target tokens were trained on (0: no limit)
  // Stop when this much wall time (evaluations and checkpoints included) is spent; the schedule is
  // laid out over the steps it buys, planned once from the first steps' time (0: no budget).
  double time_budget_minutes = 0;
  int grad_accum = 1;            // micro-batches per optimizer step
  int threads = 0;               // 0: every core
  uint64_t seed = 1234;          // weight init (the loader's order comes from [data] seed)
  std::string tokenizer;         // optional: EOD id, hash in checkpoints, a copy for generate
  // Continued pretraining: start from these weights (a run folder, a checkpoint step folder or a
  // Hugging Face folder; train/init_from.hpp) with a fresh optimizer and schedule.
  std::string init_from;
  int64_t memory_mb = 0;         // refuse a model whose plan exceeds this (0: physical memory)
  int64_t memory_ceiling_mb = 0;  // stop a rank whose resident memory passes this, plan beside it (0: off)
  int log_every = 1;             // metrics.jsonl line every N steps
  int sparsity_every = 50;       // attention sparsity sampled every K steps (0: never)
  int entropy_rows = 128;        // rows sampled for the prediction entropy
  double peak_gflops = 0;        // MFU denominator; 0 = the GEMM rate measured at the model's shapes
  PrecisionMode precision = PrecisionMode::kFp32;  // linear layers (bf16: bf16 inputs, fp32 sums and master weights)
  GemmRequest gemm = GemmRequest::kAuto;           // GEMM back end
  DeviceKind device = DeviceKind::kCpu;            // where forward, backward and AdamW run
  double status_interval_s = 10; // console status lines when stderr is not a terminal
};

struct EvalOptions {             // [eval]
  std::string data;              // held-out prefix(es), "[NAME=]PREFIX,..." ("" = no evaluation)
  int every = 0;                 // evaluate every N steps (0: only at the start and the end)
  int points = 0;                // or this many evaluations spread over the run's steps (every = 0)
  int64_t tokens = 65536;        // target tokens per evaluation (capped at the data's size)
  std::vector<std::string> tasks;  // downstream task files / folders scored at each evaluation (docs/eval.md)
  int64_t task_limit = 500;      // items per task at each evaluation (0: all)
  int task_fewshot = -1;         // examples per item (-1: each task's num_fewshot)
  bool evaluates() const { return !data.empty() || !tasks.empty(); }
};

struct CkptOptions {             // [ckpt]
  int64_t save_every = 0;        // save every N steps (0: only at the end and on SIGINT/SIGTERM)
  int keep_last = 3;             // retention: the newest K
  int64_t keep_every = 0;        //            and every step divisible by M (0: none)
  bool save_at_end = true;
  bool async = true;             // the step pays for a copy into a staging buffer; a thread writes
  CkptOnError on_error = CkptOnError::kStop;  // a failed save (disk full, ...): stop the run or continue
  double inject_write_mb_s = 0;  // fault injection (tests): saves write no faster than this (0: off)
};

struct TraceOptions {            // [trace]
  std::string steps;             // "A-B" or "N": write a timeline trace of these steps ("" = none)
  std::string dir;               // the rank files' folder ("" = RUN/trace)
  int64_t first = 0, last = -1;  // steps parsed (first = 0: no trace)
};

struct ParallelOptions {          // [parallel] (docs/parallel.md)
  int tp = 1;                      // tensor-parallel ranks: heads, SwiGLU units and vocabulary split
  int pp = 1;                      // pipeline stages: layers split, micro-batches (train.grad_accum) 1F1B
  std::vector<int> stage_layers;   // layers per stage (empty: even, the remainder to the first stages)
};

struct TrainConfig {
  ModelConfig model;
  LoaderConfig data;
  TrainOptions train;
  AdamWConfig optim;
  LrSchedule schedule;
  EvalOptions eval;
  CkptOptions ckpt;
  HealthConfig health;
  ParallelOptions parallel;
  DistConfig dist;
  TraceOptions trace;
  LoraConfig lora;               // [lora]: rank 0 = full fine-tuning (the seed is [train] seed)
  bool resume = false;           // --resume (not a TOML key)
  toml::table resolved;          // every key with its final value
};

// Reads every section of root (unknown keys and sections are errors) and validates: each key
// against its field table where it is read, then the rules between keys and sections.
Status train_config_read(const toml::table& root, TrainConfig& c);
// The linear layers' precision the run uses: [train] precision, auto = bf16 where the CPU has bf16
// units (oneDNN's avx512_core_bf16 or AMX) or the device is CUDA, else fp32.
Precision train_precision(const TrainConfig& c);
// The run's threads: [train] threads, else the machine's cores split among the ranks on it
// (OMPI_COMM_WORLD_LOCAL_SIZE).
int train_threads(const TrainConfig& c);
// The rules between keys and sections (stopping rules, eval every/points, data vs model, ...);
// each key's own range is checked by train_config_read.
Status train_config_validate(const TrainConfig& c);
// The field tables of the sections `smelt train` reads through a schema (for the docs check).
std::vector<SectionDoc> train_config_docs();
// The resolved config as TOML text.
std::string train_config_to_string(const TrainConfig& c);

}  // namespace smelt
