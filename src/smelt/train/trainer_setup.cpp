// The trainer's setup (trainer_impl.hpp): ranks and their grid, the tokenizer and tasks, the memory
// plan and the model, the optimizer and the reducer, the GEMM rate, the step count, RUN/config.toml;
// or the GPU's run. Not the start of the loop that follows it (trainer.cpp) nor a resume (trainer_checkpoint.cpp).
#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "smelt/common/clock.hpp"
#include "smelt/common/files.hpp"
#include "smelt/kernels/kernels.hpp"
#include "smelt/train/pipeline.hpp"
#include "smelt/train/step_report.hpp"
#include "smelt/train/trainer_impl.hpp"

namespace fs = std::filesystem;

namespace smelt::train_detail {

// The rank grid, this rank's shard and the groups; the data each replica reads.
Status Trainer::setup_parallel() {
  const ParallelOptions& p = c_.parallel;
  if (Status s = rank_grid(comm_->size(), comm_->rank(), p.tp, p.pp, grid_); !s) return s;
  std::vector<int> bounds;
  if (Status s = stage_bounds(c_.model.n_layers, p.pp, p.stage_layers, bounds); !s) return s;
  shard_ = model_shard(p.tp, grid_.tp_rank, p.pp, grid_.stage, bounds);
  if (Status s = shard_validate(c_.model, shard_); !s) return s;
  contributes_ = shard_.last() && shard_.tp_rank == 0;
  if (model_parallel()) {
    const int kv_share = c_.model.n_kv_heads < p.tp ? p.tp / c_.model.n_kv_heads : 1;
    if (Status s = parallel_groups(*comm_, grid_, kv_share, groups_); !s) return s;
    spdlog::info("parallel: {} ranks = dp {} x pp {} x tp {}; rank {} holds {}", comm_->size(), grid_.dp, grid_.pp,
                 grid_.tp, comm_->rank(), shard_describe(shard_));
  }
  c_.data.rank = grid_.dp_rank;
  c_.data.ranks = grid_.dp;
  if (c_.data.mode == BatchMode::kPacked && c_.data.batch_size % grid_.dp != 0)
    return Status::error(fmt::format("[data] batch_size = {}: must be a multiple of the {} data-parallel ranks (every "
                                     "rank takes the same number of rows)", c_.data.batch_size, grid_.dp));
  return Status::ok();
}

Status Trainer::setup() {
  if (Status s = dist_create(c_.dist, comm_); !s) return s;
  lead_ = comm_->rank() == 0;
  if (Status s = setup_parallel(); !s) return s;
  if (!lead_) spdlog::set_level(spdlog::level::warn);
  threads_ = train_threads(c_);
  run_dir_ = c_.train.run_dir;
  spike_ = SpikeDetector(c_.health);
  std::error_code ec;
  fs::create_directories(run_dir_, ec);
  if (ec) return Status::error(fmt::format("{}: cannot create the run folder: {}", run_dir_, ec.message()));
  metrics_path_ = (fs::path(run_dir_) / "metrics.jsonl").string();
  if (Status s = setup_tokenizer(); !s) return s;
  if (Status s = setup_chat_data(); !s) return s;
  if (Status s = tasks_.init(c_.eval, tok_.get(), c_.model); !s) return s;
  if (Status s = loader_config_validate(c_.data); !s) return s;
  // (Token ids >= vocab_size are refused by Model::forward, naming the position.)
  train_batch_shape(c_.data, B_, T_);
  if (Status s = setup_model(); !s) return s;
  if (Status s = setup_schedule(); !s) return s;
  if (c_.train.grad_accum > 1 && !gpu_) acc_.assign(model_.layout().total, 0.0f);  // (the GPU adds micro-batches in place)
  data_ = c_.data;
  return Status::ok();
}

// [train] tokenizer: loaded, checked against the vocabulary, the end-of-document id taken from it.
Status Trainer::setup_tokenizer() {
  if (c_.train.tokenizer.empty()) return Status::ok();
  tok_ = std::make_unique<Tokenizer>();
  if (Status s = Tokenizer::load(c_.train.tokenizer, *tok_); !s) return Status::error("[train] tokenizer: " + s.message());
  if ((int64_t)tok_->vocab_size() > c_.model.vocab_size)
    return Status::error(fmt::format("[train] tokenizer {} has {} tokens but [model] vocab_size = {}: raise "
                                     "vocab_size to at least {}", c_.train.tokenizer, tok_->vocab_size(),
                                     c_.model.vocab_size, tok_->vocab_size()));
  if (c_.data.eod_id < 0 && tok_->eod_id()) c_.data.eod_id = *tok_->eod_id();
  eval_text_ = EvalText::from(*tok_);
  return Status::ok();
}

// The model's shard (planned within the memory budget), its tensor-parallel collectives, the
// optimizer (this rank's ZeRO-1 range), the gradient reducer and the GEMM choice or the device.
Status Trainer::setup_model() {
  const int64_t budget = c_.train.memory_mb > 0 ? c_.train.memory_mb << 20 : memory_physical_bytes();
  const int dp = grid_.dp;
  // (what trains: the adapters alone under LoRA)
  const int64_t trained = c_.lora.enabled() ? lora_layout(c_.model, c_.lora).params.total
                                            : param_layout(c_.model, shard_).total;
  if (c_.dist.zero == 1 && dp > 1) bounds_ = zero_shard_bounds(trained, dp);
  const bool cuda = c_.train.device == DeviceKind::kCuda;
  const Precision precision = train_precision(c_);
  model_.set_precision(precision);
  model_.set_lora(c_.lora);  // (rank 0: off)
  const int slots = pipeline_slots(shard_.pp, shard_.stage, c_.train.grad_accum);
  // The plan's process row: all this process holds before the plan's buffers (binary, libraries,
  // MPI and its groups, the tokenizer, the tasks' items).
  process_bytes_ = resident_memory().bytes;
  if (Status s = model_.init(c_.model, shard_, B_, T_, threads_, c_.train.seed, budget, bounds_.empty() ? 1 : dp,
                             shard_.pp > 1 ? slots : 1);
      !s)
    return s;
  if (shard_.tp > 1) set_tp_collectives();
  if (shard_.pp > 1) pipe_batches_.resize(slots);
  if (bounds_.empty()) opt_.init(model_.layout(), threads_);
  else opt_.init(model_.layout(), threads_, bounds_[grid_.dp_rank], bounds_[grid_.dp_rank + 1]);
  DistConfig reduce = c_.dist;
  if (model_parallel() && reduce.overlap) {
    // MPI runs SERIALIZED: the TP collectives and pipeline messages of backward and an overlapped
    // bucket on the communication thread would both be inside MPI.
    reduce.overlap = false;
    spdlog::info("parallel: the data-parallel reduction runs after backward (no overlap with tp or pp > 1)");
  }
  reducer_ = grad_reducer_create(reduce, dp_comm(), model_.layout().total, bounds_, threads_);
  model_.set_entropy_rows(c_.train.entropy_rows);
  if (cuda) return setup_device(precision);
  if (Status s = gemm_select(enum_name(c_.train.gemm), c_.model, B_, T_, precision, threads_, gemm_); !s) return s;
  peak_ = cpu_peak(cpu_info_measured(), precision, threads_);
  gemm_gflops_ = c_.train.peak_gflops > 0 ? c_.train.peak_gflops : gemm_.gflops;
  return Status::ok();
}

// The model's all-reduces over the tensor-parallel group, timed; a failed one ends the job.
void Trainer::set_tp_collectives() {
  Communicator* tp = groups_.tp.get();
  auto run = [this](Status s) {
    if (!s) {
      spdlog::error("rank {}: tensor-parallel collective: {}; ending the job", comm_->rank(), s.message());
      abort(kExitFailure);
    }
  };
  model_.set_tp({[this, tp, run](float* x, int64_t n) {
                   const double t0 = now_s();
                   run(tp->allreduce_sum(x, n));
                   tp_ms_ += (now_s() - t0) * 1e3;
                 },
                 [this, tp, run](float* x, int64_t n) {
                   const double t0 = now_s();
                   run(tp->allreduce_max(x, n));
                   tp_ms_ += (now_s() - t0) * 1e3;
                 }});
}

// The step count (steps, max_tokens, or the time budget's first guess), the schedule laid out over
// it, and the resolved config every checkpoint stores (RUN/config.toml).
Status Trainer::setup_schedule() {
  // Steps: the configured count, or what max_tokens needs at full batches.
  const int64_t tokens_per_step = (int64_t)B_ * T_ * c_.train.grad_accum;
  total_steps_ = c_.train.steps > 0 ? c_.train.steps
                                    : (c_.train.max_tokens + tokens_per_step - 1) / tokens_per_step;
  if (c_.train.time_budget_minutes > 0 && comm_->size() > 1)  // (any grid)
    // Each rank would plan from its own clock; ranks must agree on the step count and the stop.
    return Status::error(fmt::format("[train] time_budget_minutes = {} with {} ranks: a time budget plans the steps "
                                     "on one process only for now; give train.steps or train.max_tokens",
                                     c_.train.time_budget_minutes, comm_->size()));
  if (c_.train.time_budget_minutes > 0) {
    // Until the plan (plan_budget): the steps the budget buys at half the GEMM rate, within the caps.
    budget_s_ = c_.train.time_budget_minutes * 60;
    const double step_flops = train_flops_per_token(c_.model, T_, c_.lora) * tokens_per_step;
    const int64_t guess = std::max<int64_t>(c_.schedule.warmup_steps + 1,
                                            (int64_t)(budget_s_ * gemm_gflops_ * 0.5e9 / step_flops));
    total_steps_ = total_steps_ > 0 ? std::min(total_steps_, guess) : guess;
  }
  sched_ = c_.schedule;
  sched_.total_steps = total_steps_;
  TrainConfig resolved = c_;  // as RUN/config.toml and every checkpoint store it
  resolved.schedule.total_steps = total_steps_;
  config_text_ = train_config_to_string(resolved);
  if (lead_)
    if (Status s = files_write_atomic((fs::path(run_dir_) / "config.toml").string(), config_text_); !s) return s;
  return Status::ok();
}

// [train] device = "cuda": one process on one GPU. What the GPU path does not do yet is refused
// here by name; the MFU is against the device's GEMM rate measured now (or [train] peak_gflops).
Status Trainer::setup_device(Precision precision) {
  const HealthConfig& h = c_.health;
  std::string no;
  if (comm_->size() > 1) no = fmt::format("{} ranks (data, tensor and pipeline parallel run on the CPU only for now)",
                                          comm_->size());
  else if (!h.inject_nan_steps.empty()) no = "[health] inject_nan_steps (fault injection writes host gradients)";
  if (!no.empty()) return Status::error("[train] device = \"cuda\" does not take " + no);
  if (Status s = DeviceRun::open(c_.model, model_, B_, T_, precision, gpu_); !s) return s;
  if (c_.train.sparsity_every > 0)
    spdlog::info("[train] sparsity_every: attention sparsity is not measured on the GPU; the lines carry none");
  gemm_gflops_ = c_.train.peak_gflops > 0 ? c_.train.peak_gflops : gpu_->gemm_gflops();
  peak_ = PeakRate{};
  peak_.gflops = gemm_gflops_;
  peak_.unit = "the device's measured GEMM rate";
  return Status::ok();
}

}  // namespace smelt::train_detail
