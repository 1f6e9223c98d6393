// The training loop (trainer.hpp): one model per rank, a prefetching loader; each step is fetch ->
// forward/backward (micro-batches) -> reduce (dist/grad_reducer) -> clip + AdamW (optimizer.hpp),
// then metrics, evaluation and checkpoints (train_state.hpp) as configured. Not the strategies of
// the reduction, the optimizer, the checkpoint tensors' layout or the metrics line's and the
// summary's formatting (step_report.hpp) themselves.
#include "smelt/train/trainer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "smelt/ckpt/async_writer.hpp"
#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/common/clock.hpp"
#include "smelt/common/config.hpp"
#include "smelt/common/files.hpp"
#include "smelt/common/hash.hpp"
#include "smelt/dataset/blend.hpp"
#include "smelt/dataset/indexed.hpp"
#include "smelt/dist/communicator.hpp"
#include "smelt/dist/grad_reducer.hpp"
#include "smelt/hw/cpu_info.hpp"
#include "smelt/kernels/kernels.hpp"
#include "smelt/machine/gemm_select.hpp"
#include "smelt/obs/vitals.hpp"
#include "smelt/obs/trace.hpp"
#include "smelt/tokenizer/tokenizer.hpp"
#include "smelt/train/device_run.hpp"
#include "smelt/train/parallel.hpp"
#include "smelt/train/pipeline.hpp"
#include "smelt/train/run_memory.hpp"
#include "smelt/train/step_report.hpp"
#include "smelt/train/task_eval.hpp"
#include "smelt/train/train_state.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace smelt {

namespace {

std::atomic<bool> g_stop{false};

// The batch source: token shards (Loader) or refined text tokenized on the fly (StreamLoader).
struct Feed {
  Loader shards;
  StreamLoader stream;
  bool streaming = false;
  std::vector<std::string> names;  // [source index in Batch::sources]

  Status open(const LoaderConfig& c, const LoaderPosition* pos) {
    streaming = !c.stream_tokenizer.empty();
    names.clear();
    if (streaming) {
      names = {"stream"};
      return stream.open(c, pos);
    }
    if (Status s = shards.open(c, pos); !s) return s;
    for (const auto& d : shards.sources()) names.push_back(d.name);
    return Status::ok();
  }
  const Batch& next() {
    TraceSpan span("fetch");
    return streaming ? stream.next() : shards.next();
  }
  LoaderPosition position() const { return streaming ? stream.position() : shards.position(); }
  double last_wait_ms() const { return streaming ? stream.last_wait_ms() : shards.last_wait_ms(); }
  const LatencyWindow& latency() const { return streaming ? stream.fetch_latency() : shards.fetch_latency(); }
};

// Keeps the metrics lines of steps <= step (a resume continues the file where the checkpoint was).
// Keeps the lines up to `step`; when the checkpoint's own line (`step_line`, its step's line as
// written) never reached the file (a kill between the commit and the write), appends it. The
// "restart" events `smelt launch` writes between attempts are the run's history, not a step's
// results: every one is kept, after the kept lines, in the order written.
Status truncate_metrics(const std::string& path, int64_t step, const std::string& step_line) {
  std::ifstream in(path);
  const bool existed = (bool)in;
  std::string line, kept, restarts;
  int64_t last = -1;
  bool cut = false;
  while (existed && std::getline(in, line)) {
    if (line.empty()) continue;
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("step")) {  // a torn line from a kill: what follows is kept only if a restart
      cut = true;
      continue;
    }
    if (j.value("event", std::string()) == "restart") {
      (cut ? restarts : kept) += line + "\n";
      continue;
    }
    if (cut || j["step"].get<int64_t>() > step) {
      cut = true;
      continue;
    }
    kept += line + "\n";
    if (!j.contains("event")) last = j["step"].get<int64_t>();
  }
  if (last < step && !step_line.empty()) {
    json j = json::parse(step_line, nullptr, false);
    if (!j.is_discarded() && j.value("step", (int64_t)-1) == step) kept += step_line + "\n";
  }
  kept += restarts;
  if (!existed && kept.empty()) return Status::ok();
  return files_write_atomic(path, kept);
}

}  // namespace

void train_request_stop() { g_stop = true; }

namespace {

class Trainer {
 public:
  explicit Trainer(const TrainConfig& c) : c_(c) {}
  ~Trainer() {
    if (tracing_ || trace_pending_) trace_write_file();  // a run that failed inside the range
  }
  Status run(TrainSummary& out);
  int rank() const { return comm_ ? comm_->rank() : 0; }
  int ranks() const { return comm_ ? comm_->size() : 1; }
  [[noreturn]] void abort(int code) {
    comm_->abort(code);
    std::exit(code);  // (not reached; virtual calls do not carry [[noreturn]] for the compiler)
  }

 private:
  Status setup();
  Status resume_from_checkpoint();
  Status save(int64_t step, const char* why, ojson* line);
  Status eval_now(int64_t step, ojson* line);
  Status rollback(int64_t step);
  void event(ojson e);
  void write_metrics(const std::string& line);
  // vital signs ([health.vitals]): the monitor over the lines written, the disk's write rate
  void watch_vitals(const std::string& line);
  void replay_vitals();
  void probe_disk();
  VitalsMonitor vitals_{VitalsConfig{}};
  double disk_mb_s_ = 0;
  // This rank's training state as checkpoints hold it (train_state.hpp)
  TrainTensors tensors() { return {model_, opt_, reducer_.get(), comm_->rank(), comm_->size(), grid_.dp_rank == 0}; }
  void status_line(int64_t step, double loss, double tok_s, double mfu, double wait_ms, bool final);
  json state_json() const;
  Status start();
  bool done() const;
  // one step: train_step = begin_step, micro_step x grad_accum, stage_checkpoint, reduce_step,
  // update, end_step
  Status train_step(StepStats& st);
  void begin_step(StepStats& st);
  Status micro_step(int micro, StepStats& st);
  // a micro-batch's parts: its batch (with fault injection), forward with its health signals,
  // backward and the accumulation; the pipeline's 1F1B order of them with the stages' messages
  const Batch& fetch(StepStats& st);
  Status forward_micro(const Batch& b, int micro, StepStats& st);
  void backward_micro(const Batch& b, int micro, StepStats& st);
  float micro_dloss(const Batch& b) const;
  Status pipeline_step(StepStats& st);
  Status pipeline_forward_loss(const Batch& b, float& loss);  // an evaluation batch through the stages
  void stage_checkpoint();
  Status update(StepStats& st);
  void end_step(StepStats& st, double t0);
  Status reduce_step(StepStats& st);
  ojson step_line(const StepStats& st);
  Status after_step(const StepStats& st);
  Status summarize(TrainSummary& out, double seconds);
  // The run's memory plan for this rank (run_memory_plan with its checkpoints, evaluation and the
  // process measured at the start) and [train] memory_ceiling_mb's check of it against reality.
  RunMemory run_memory() const;
  Status check_memory_ceiling(const char* when = "after");
  int64_t process_bytes_ = 0;  // resident memory just before the model's allocation
  void measure_gemm_again(double steps_gflops);
  StepStats last_;  // the last step's numbers (for the final status line)
  // [train] time_budget_minutes: the budget, the one-time plan of the step count, how the run ended
  void plan_budget();
  double budget_s_ = 0, first_step_end_s_ = 0, last_eval_s_ = 0, plan_step_s_ = 0;
  double warm_eval_s_ = 0;  // the evaluations after step 0's (which pays for first touches): their sum
  double eval_s_sum_ = 0, eval_s_at_first_step_ = 0;  // every evaluation's seconds; the sum at the first step's end
  int warm_evals_ = 0;
  bool planned_ = false, final_plan_ = false, out_of_time_ = false;
  int64_t planned_at_ = -1;
  int eval_every() const;
  // [trace]: the range's clock sync and start, its end, the file (once no span of it is open)
  Status trace_begin_step();
  void trace_end_step(const StepStats& st);
  void trace_write_file();
  bool tracing_ = false, trace_pending_ = false;
  int64_t trace_sync_ns_ = -1, trace_last_step_ = 0;

  TrainConfig c_;  // as resolved by setup(); the run's changing values live in sched_ and data_
  LrSchedule sched_;  // the schedule this run follows: the planned total_steps, an LR restart
  LoaderConfig data_;  // the data as this run reads it: with the quarantined documents (exclude)
  Model model_;
  AdamW opt_;  // its moments: this rank's ZeRO-1 range (bounds_) or the whole buffer
  // [train] device = "cuda": the steps run here; model_ and opt_ hold the state only at
  // checkpoints (DeviceRun::to_host) and hand it over after a resume or rollback (from_host).
  std::unique_ptr<DeviceRun> gpu_;
  Status setup_device(Precision precision);
  Feed feed_;
  std::unique_ptr<Tokenizer> tok_;
  TaskEvaluator tasks_;  // [eval] tasks (task_eval.hpp)
  EvalText eval_text_;  // token byte lengths for bits per byte (empty without a tokenizer)
  std::string run_dir_, metrics_path_, config_text_;
  std::ofstream metrics_;
  std::string metrics_pending_;  // lines a failed write (a full disk) could not keep yet
  int64_t metrics_dropped_ = 0;   // lines given up on (the pending text outgrew its cap)
  int threads_ = 1, B_ = 1, T_ = 1;
  int64_t step_ = 0, start_step_ = 0, total_steps_ = 0;
  uint64_t tokens_ = 0;
  double prev_grad_norm_ = 0;
  // MFU denominators: the GEMM rate at the model's shapes (back end and precision of the run; or
  // [train] peak_gflops) and the CPU's peak from its instruction set and clock, each per rank.
  GemmChoice gemm_;
  PeakRate peak_;
  double gemm_gflops_ = 0;
  double gemm_gflops_start_ = 0, gemm_gflops_end_ = -1;  // the start's measurement; the end's (-1: none)
  double mfu(double flops_per_s) const;
  double mfu_peak(double flops_per_s) const;
  double first_loss_ = NAN, last_loss_ = NAN, eval_first_ = -1, eval_last_ = -1;
  double eval_first_bpb_ = -1, eval_last_bpb_ = -1;
  LoaderPosition loader_pos_;
  bool have_resume_pos_ = false;
  std::string last_ckpt_;
  bool tty_ = false;
  double last_status_s_ = 0, run_start_s_ = 0;
  int64_t last_status_step_ = -1;
  double sum_step_ms_ = 0, sum_wait_ms_ = 0, sum_forward_ms_ = 0;
  uint64_t tokens_this_run_ = 0;
  // checkpoints
  std::unique_ptr<CkptWriter> writer_;
  int64_t saves_failed_ = 0;
  // health
  SpikeDetector spike_{HealthConfig{}};
  int64_t nonfinite_skipped_ = 0, rollbacks_ = 0, lr_restarts_ = 0;
  int low_entropy_evals_ = 0;
  Batch injected_;  // fault injection only
  double line_extra_stall_ms_ = 0;
  ojson last_metrics_ = ojson::object();  // the last step's line (converted only when saved)
  bool last_logged_ = false;              // ... and it goes into metrics.jsonl
  std::vector<std::pair<std::string, uint64_t>> quarantined_;  // (source, document), never read again
  // data parallel
  std::unique_ptr<Communicator> comm_;
  bool lead_ = true;            // rank 0: writes metrics, checkpoints, summaries
  std::vector<float> acc_;      // the step's gradient, micro-batches added in order (grad_accum > 1)
  std::vector<double> red_;     // per-step scalars reduced over ranks
  std::vector<int64_t> bounds_;  // ZeRO-1: rank r keeps the AdamW moments of [bounds_[r], bounds_[r+1])
  std::unique_ptr<GradReducer> reducer_;  // several ranks: the gradient's reduction (grad_reducer_create)
  int64_t pending_commit_ = -1;     // a multi-rank checkpoint written but not yet committed
  int64_t pending_completed_ = 0;   // the writer's completed() count that means this rank is done
  bool rank_files() const {
    return comm_->size() > 1 && (!bounds_.empty() || c_.dist.compression == GradCompression::kTopk || model_parallel());
  }
  // tensor and pipeline parallel (train/parallel.hpp): this rank's place in the grid, its shard,
  // the groups; contributes_: the rank whose loss and token counts enter the step's sums (the last
  // stage's TP rank 0 of each replica; every rank without model parallelism)
  RankGrid grid_;
  ModelShard shard_;
  ParallelGroups groups_;
  bool contributes_ = true;
  double tp_ms_ = 0;  // time in TP collectives since the step began
  uint64_t dp_bytes_mark_ = 0;  // the DP group's bytes sent at the last step's reduction
  std::vector<Batch> pipe_batches_;  // [slot] the micro-batches in flight on this stage
  std::vector<std::vector<float>> pipe_out_;  // the step's outgoing messages until their sends complete
  bool model_parallel() const { return shard_.tp * shard_.pp > 1; }
  Communicator& dp_comm() { return groups_.dp ? *groups_.dp : *comm_; }
  Status setup_parallel();
  Status global_grad_norm(double& out);
  Status commit_pending(const char* why);
  bool stop_now_ = false;       // every rank's agreed stop
};

// The global gradient norm: of the whole gradient, or (ZeRO-1) from every rank's block partials;
// the same bits either way.
Status Trainer::global_grad_norm(double& out) {
  if (model_parallel()) {
    const bool sharded = !bounds_.empty();
    const int64_t lo = sharded ? bounds_[grid_.dp_rank] : 0, hi = sharded ? bounds_[grid_.dp_rank + 1] : model_.layout().total;
    return parallel_grad_norm(*comm_, model_.layout(), model_.grads(), lo, hi, sharded || grid_.dp_rank == 0, threads_,
                              out);
  }
  if (reducer_) return reducer_->grad_norm(model_.grads(), out);
  out = opt_.grad_norm(model_.grads());
  return Status::ok();
}

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
  int local = 1;  // ranks sharing this machine split its cores
  if (const char* v = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE")) local = std::max(1, std::atoi(v));
  threads_ = c_.train.threads > 0 ? c_.train.threads
                                  : (int)std::max(1u, std::thread::hardware_concurrency() / (unsigned)local);
  run_dir_ = c_.train.run_dir;
  spike_ = SpikeDetector(c_.health);
  std::error_code ec;
  fs::create_directories(run_dir_, ec);
  if (ec) return Status::error(fmt::format("{}: cannot create the run folder: {}", run_dir_, ec.message()));
  metrics_path_ = (fs::path(run_dir_) / "metrics.jsonl").string();

  if (!c_.train.tokenizer.empty()) {
    tok_ = std::make_unique<Tokenizer>();
    if (Status s = Tokenizer::load(c_.train.tokenizer, *tok_); !s)
      return Status::error("[train] tokenizer: " + s.message());
    if ((int64_t)tok_->vocab_size() > c_.model.vocab_size)
      return Status::error(fmt::format("[train] tokenizer {} has {} tokens but [model] vocab_size = {}: raise "
                                       "vocab_size to at least {}", c_.train.tokenizer, tok_->vocab_size(),
                                       c_.model.vocab_size, tok_->vocab_size()));
    if (c_.data.eod_id < 0 && tok_->eod_id()) c_.data.eod_id = *tok_->eod_id();
    eval_text_ = EvalText::from(*tok_);
  }
  if (Status s = tasks_.init(c_.eval, tok_.get(), c_.model); !s) return s;
  if (Status s = loader_config_validate(c_.data); !s) return s;
  // (Token ids >= vocab_size are refused by Model::forward, naming the position.)
  train_batch_shape(c_.data, B_, T_);
  const int64_t budget = c_.train.memory_mb > 0 ? c_.train.memory_mb << 20 : memory_physical_bytes();
  const int dp = grid_.dp;
  if (c_.dist.zero == 1 && dp > 1) bounds_ = zero_shard_bounds(param_layout(c_.model, shard_).total, dp);
  // auto: bf16 where the CPU has bf16 units (its GEMMs then run 2-4x fp32's), fp32 elsewhere.
  const bool cuda = c_.train.device == DeviceKind::kCuda;
  const bool bf16 = c_.train.precision == PrecisionMode::kBf16 ||
                    (c_.train.precision == PrecisionMode::kAuto && (cuda || gemm_bf16_native()));
  const Precision precision = bf16 ? Precision::kBf16 : Precision::kFp32;
  model_.set_precision(precision);
  const int slots = pipeline_slots(shard_.pp, shard_.stage, c_.train.grad_accum);
  // The plan's process row: all this process holds before the plan's buffers (binary, libraries,
  // MPI and its groups, the tokenizer, the tasks' items).
  process_bytes_ = resident_memory().bytes;
  if (Status s = model_.init(c_.model, shard_, B_, T_, threads_, c_.train.seed, budget, bounds_.empty() ? 1 : dp,
                             shard_.pp > 1 ? slots : 1);
      !s)
    return s;
  if (shard_.tp > 1) {
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
  if (cuda) {
    if (Status s = setup_device(precision); !s) return s;
  } else {
    if (Status s = gemm_select(enum_name(c_.train.gemm), c_.model, B_, T_, precision, threads_, gemm_); !s) return s;
    peak_ = cpu_peak(cpu_info_measured(), precision, threads_);
    gemm_gflops_ = c_.train.peak_gflops > 0 ? c_.train.peak_gflops : gemm_.gflops;
  }
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
    const double step_flops = train_flops_per_token(c_.model, T_) * tokens_per_step;
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
  if (c_.train.grad_accum > 1 && !gpu_) acc_.assign(model_.layout().total, 0.0f);  // (the GPU adds micro-batches in place)
  data_ = c_.data;
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

json Trainer::state_json() const {
  json s;
  s["step"] = step_;
  s["tokens"] = tokens_;
  s["optimizer_step"] = opt_.step_count();
  s["prev_grad_norm"] = prev_grad_norm_;
  s["loader"] = loader_pos_.to_json();
  s["schedule"] = {{"kind", enum_name(c_.schedule.kind)},     {"lr", c_.schedule.lr},
                   {"min_lr", c_.schedule.min_lr}, {"warmup_steps", c_.schedule.warmup_steps},
                   {"total_steps", total_steps_},  {"restart_step", sched_.restart_step}};
  s["first_loss"] = std::isfinite(first_loss_) ? json(first_loss_) : json(nullptr);
  s["last_loss"] = std::isfinite(last_loss_) ? json(last_loss_) : json(nullptr);
  s["eval_first"] = eval_first_;
  s["eval_last"] = eval_last_;
  s["eval_first_bpb"] = eval_first_bpb_;
  if (budget_s_ > 0)
    s["time_budget"] = {{"planned", planned_}, {"final", final_plan_}, {"total_steps", total_steps_}};
  s["eval_last_bpb"] = eval_last_bpb_;
  s["metrics"] = json::parse(last_metrics_.dump());  // the last step's metrics line
  // Its text as metrics.jsonl gets it: an asynchronous save can commit before the line is written,
  // and a resume after a kill in between restores the line from here.
  s["metrics_line"] = last_logged_ ? last_metrics_.dump() : std::string();
  json q = json::array();
  for (const auto& [src, doc] : quarantined_) q.push_back({src, doc});
  s["quarantine"] = q;
  s["health"] = {{"spike", spike_.to_json()},
                 {"nonfinite_skipped", nonfinite_skipped_},
                 {"rollbacks", rollbacks_},
                 {"lr_restarts", lr_restarts_},
                 {"low_entropy_evals", low_entropy_evals_}};
  return s;
}

Status Trainer::resume_from_checkpoint() {
  std::string dir;
  std::vector<std::string> warnings;
  Status found = ckpt_find_latest(run_dir_, dir, &warnings);
  for (const auto& w : warnings) spdlog::warn("{}", w);
  if (!found) {
    spdlog::info("--resume: no valid checkpoint in {} ({}); starting from step 0", run_dir_, found.message());
    return Status::ok();
  }
  CkptManifest m;
  if (Status s = ckpt_read_manifest(dir, m); !s) return s;
  toml::table root;
  try {
    root = toml::parse(m.config_toml);
  } catch (const toml::parse_error& e) {
    return Status::error(fmt::format("{}: the stored config does not parse: {}", dir, e.description()));
  }
  ModelConfig saved;
  if (Status s = model_config_read(root, saved); !s) return Status::error(fmt::format("{}: {}", dir, s.message()));
  saved.recompute = c_.model.recompute;  // recomputation changes memory, not the model
  if (config_to_string(toml::table{{"model", model_config_to_toml(saved)}}) !=
      config_to_string(toml::table{{"model", model_config_to_toml(c_.model)}}))
    return Status::error(fmt::format("{}: the checkpoint's [model] differs from this run's; resume with the same "
                                     "[model] section (stored in {}/config.toml)", dir, dir));
  if (Status s = train_state_load_tensors(tensors(), dir, m); !s) return s;
  if (gpu_) gpu_->from_host(model_, opt_);
  const json& st = m.state;
  try {
    step_ = st.at("step").get<int64_t>();
    tokens_ = st.at("tokens").get<uint64_t>();
    prev_grad_norm_ = st.at("prev_grad_norm").get<double>();
    if (!st.at("first_loss").is_null()) first_loss_ = st["first_loss"].get<double>();
    if (!st.at("last_loss").is_null()) last_loss_ = st["last_loss"].get<double>();
    eval_first_ = st.value("eval_first", -1.0);
    eval_last_ = st.value("eval_last", -1.0);
    eval_first_bpb_ = st.value("eval_first_bpb", -1.0);
    eval_last_bpb_ = st.value("eval_last_bpb", -1.0);
    sched_.restart_step = st.at("schedule").value("restart_step", (int64_t)-1);
    // A budgeted run resumes its plan (the budget then counts from the resume).
    if (budget_s_ > 0 && st.contains("time_budget") && st["time_budget"].value("planned", false)) {
      planned_ = true;
      final_plan_ = st["time_budget"].value("final", true);
      total_steps_ = sched_.total_steps = st["time_budget"].at("total_steps").get<int64_t>();
    }
    if (st.contains("health")) {
      const json& h = st["health"];
      spike_.from_json(h.value("spike", json::object()));
      nonfinite_skipped_ = h.value("nonfinite_skipped", (int64_t)0);
      rollbacks_ = h.value("rollbacks", (int64_t)0);
      lr_restarts_ = h.value("lr_restarts", (int64_t)0);
      low_entropy_evals_ = h.value("low_entropy_evals", 0);
    }
    for (const auto& e : st.value("quarantine", json::array()))
      quarantined_.emplace_back(e.at(0).get<std::string>(), e.at(1).get<uint64_t>());
    data_.exclude = quarantined_;
    if (Status s = LoaderPosition::from_json(st.at("loader"), loader_pos_); !s)
      return Status::error(fmt::format("{}: loader position: {}", dir, s.message()));
  } catch (const std::exception& e) {
    return Status::error(fmt::format("{}/manifest.json: trainer state: {}", dir, e.what()));
  }
  have_resume_pos_ = true;
  start_step_ = step_;
  last_ckpt_ = dir;
  spdlog::info("resuming from {} (step {}, {} tokens)", dir, step_, human_count((double)tokens_));
  return lead_ ? truncate_metrics(metrics_path_, step_, st.value("metrics_line", std::string())) : Status::ok();
}

void Trainer::event(ojson e) {
  if (trace_on()) trace_instant(trace_intern(e.value("event", std::string("event"))), 'p', "step", e.value("step", 0.0));
  const std::string text = e.dump();
  write_metrics(text);
  watch_vitals(text);
}

// The vital signs judge every line written; the first time a sign leaves its band (ok -> warn,
// warn -> bad) the log warns and metrics.jsonl gets a "vital_sign" event.
void Trainer::watch_vitals(const std::string& text) {
  if (!lead_ || !c_.health.vitals.enabled) return;
  for (const VitalSign& s : vitals_.observe(json::parse(text, nullptr, false))) {
    spdlog::warn("vital sign {}: {} since step {}: {} (band: {})", s.label, s.state, s.since, s.detail, s.band);
    ojson e = {{"step", step_}, {"event", "vital_sign"}, {"sign", s.name}, {"state", s.state}, {"since", s.since},
               {"value", std::isfinite(s.value) ? ojson(s.value) : ojson(nullptr)}, {"detail", s.detail}};
    if (!s.ranks.empty()) e["ranks"] = s.ranks;
    write_metrics(e.dump());
  }
}

// A resumed run's monitor starts from the lines its metrics file kept (no warnings again).
void Trainer::replay_vitals() {
  vitals_ = VitalsMonitor(c_.health.vitals);
  if (!lead_ || !c_.health.vitals.enabled || step_ == 0) return;
  std::ifstream in(metrics_path_);
  std::string text;
  while (std::getline(in, text)) vitals_.observe(json::parse(text, nullptr, false));
}

// The disk's write rate at the start, for the checkpoint-bandwidth sign: one file of the
// checkpoint's size (at most [health.vitals] disk_probe_mb) written and fsynced in the run folder,
// then removed. A failure (a full disk) only leaves the sign without a reference.
void Trainer::probe_disk() {
  const VitalsConfig& v = c_.health.vitals;
  if (!lead_ || !v.enabled || v.disk_probe_mb <= 0 || (c_.ckpt.save_every <= 0 && !c_.ckpt.save_at_end)) return;
  const int64_t ckpt_bytes = 3 * model_.layout().total * (int64_t)sizeof(float);
  const size_t bytes = (size_t)std::clamp<int64_t>(ckpt_bytes, 1 << 16, (int64_t)v.disk_probe_mb << 20);
  const std::string path = (fs::path(run_dir_) / ".disk-probe").string();
  std::vector<char> buf(std::min<size_t>(bytes, 1 << 20), 'x');
  const double t0 = now_s();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  bool ok = fd >= 0;
  for (size_t done = 0; ok && done < bytes;) {
    const ssize_t w = ::write(fd, buf.data(), std::min(buf.size(), bytes - done));
    ok = w > 0;
    done += ok ? (size_t)w : 0;
  }
  ok = ok && ::fsync(fd) == 0;
  const double s = now_s() - t0;
  if (fd >= 0) ::close(fd);
  ::unlink(path.c_str());
  if (!ok || s <= 0) {
    spdlog::warn("{}: measuring the disk's write rate failed ({}); checkpoint bandwidth is not judged", path,
                 std::strerror(errno));
    return;
  }
  disk_mb_s_ = bytes / 1e6 / s;
  spdlog::info("disk: {:.1f} MB written and fsynced in {:.1f} ms ({:.0f} MB/s), the checkpoints' reference",
               bytes / 1e6, s * 1e3, disk_mb_s_);
}

// One metrics line, whole or not at all. A write that fails (a full disk: the stream may have put
// part of it out) is cut back to the last whole line, and the text waits to go out with the next
// line, so metrics.jsonl stays valid JSONL and loses nothing once space returns (retention frees
// it). "" only retries what is waiting. Beyond 4 MiB waiting the oldest text is given up, counted.
void Trainer::write_metrics(const std::string& line) {
  if (!lead_) return;
  if (!line.empty()) metrics_pending_ += line + "\n";
  if (metrics_pending_.empty()) return;
  std::error_code ec;
  const uintmax_t before = fs::file_size(metrics_path_, ec);
  metrics_ << metrics_pending_ << std::flush;
  if (metrics_) {
    metrics_pending_.clear();
    return;
  }
  metrics_.close();
  if (!ec) fs::resize_file(metrics_path_, before, ec);
  metrics_.clear();
  metrics_.open(metrics_path_, std::ios::app);
  constexpr size_t kMaxPending = 4u << 20;
  if (metrics_pending_.size() > kMaxPending) {
    const size_t cut = metrics_pending_.find('\n', metrics_pending_.size() - kMaxPending);
    metrics_dropped_ += std::count(metrics_pending_.begin(), metrics_pending_.begin() + (long)cut + 1, '\n');
    metrics_pending_.erase(0, cut + 1);
  }
  spdlog::warn("{}: writing a metrics line failed (disk full?); kept {} bytes to write with the next line{}",
               metrics_path_, metrics_pending_.size(),
               metrics_dropped_ ? fmt::format(", {} lines given up", metrics_dropped_) : std::string());
}

// Every rank writes its part, then (a barrier) rank 0 commits the step: used for a multi-rank save
// that was not committed during the steps since (see the step loop), before a rollback, a new save
// and the end of the run.
Status Trainer::commit_pending(const char* why) {
  if (pending_commit_ < 0) return Status::ok();
  const int64_t step = pending_commit_;
  pending_commit_ = -1;
  Status mine = writer_ ? writer_->wait() : Status::ok();
  if (!mine) spdlog::warn("checkpoint step {}: this rank's part: {}", step, mine.message());
  if (Status s = comm_->barrier(); !s) return s;
  Status c;
  if (lead_) {
    CkptSaveStats st;
    c = ckpt_commit(run_dir_, step, comm_->size(), &st);
    if (c) {
      last_ckpt_ = st.dir;
      trace_instant("checkpoint.commit", 'p', "step", (double)step);
      spdlog::info("checkpoint step {} committed ({}): every rank's part is durable", step, why);
      std::vector<std::string> removed;
      if (Status s = ckpt_retain(run_dir_, c_.ckpt.keep_last, c_.ckpt.keep_every, &removed); !s)
        spdlog::warn("checkpoint retention: {}", s.message());
    }
  }
  double ok = c ? 1.0 : 0.0;  // every rank learns the outcome (and last_ckpt_)
  if (Status s = comm_->allreduce_sum(&ok, 1); !s) return s;
  if (ok > 0) {
    last_ckpt_ = ckpt_step_dir(run_dir_, step);
    return Status::ok();
  }
  saves_failed_++;
  Status e = Status::error(fmt::format("checkpoint at step {}: {}", step, lead_ ? c.message() : "the commit failed on rank 0"));
  if (c_.ckpt.on_error == CkptOnError::kStop) return e;
  spdlog::warn("{}; training continues ([ckpt] on_error = \"continue\"), the previous checkpoint is kept", e.message());
  event({{"step", step}, {"event", "checkpoint_failed"}, {"error", c.message()}});
  return Status::ok();
}

Status Trainer::save(int64_t step, const char* why, ojson* line) {
  // Data parallel replicas hold the same weights, moments and position: rank 0 writes them. With
  // rank-local state (ZeRO-1 moment shards, top-k residuals) every rank writes its own file and
  // rank 0 commits once all are durable.
  const bool parts = rank_files();
  if (!lead_ && !parts) return Status::ok();
  TraceSpan span("checkpoint.save", "step", (double)step);
  if (Status s = commit_pending("before the next save"); !s) return s;
  CkptSaveRequest r;
  r.step = step;
  r.rank = parts ? comm_->rank() : 0;
  r.ranks = parts ? comm_->size() : 1;
  r.config_toml = config_text_;
  r.tokenizer_path = c_.train.tokenizer;
  r.state = state_json();
  r.throttle_mb_s = c_.ckpt.inject_write_mb_s;
  if (gpu_) {  // the device's state into the host buffers the save reads (after the last save's copy of them)
    if (writer_) writer_->staged();
    gpu_->to_host(model_, opt_);
  }
  train_state_add_tensors(tensors(), parts, r);
  Status saved;
  double stall_ms = 0;
  if (parts) {
    // This rank's part; the commit follows once every rank reports its part durable (the step
    // loop's reduction carries the flag), or at the latest before the next save.
    if (!writer_) writer_ = std::make_unique<CkptWriter>(run_dir_, threads_);
    const double t0 = now_s();
    pending_completed_ = writer_->completed() + 1;
    saved = writer_->submit(r, c_.ckpt.async ? CkptCopy::kDeferred : CkptCopy::kNow);
    if (saved && !c_.ckpt.async) saved = writer_->wait();
    stall_ms = (now_s() - t0) * 1e3;
    if (line) (*line)["ckpt_stall_ms"] = line->value("ckpt_stall_ms", 0.0) + stall_ms;
    if (!saved) spdlog::warn("checkpoint step {}: this rank's part: {}", step, saved.message());
    pending_commit_ = step;  // the commit reports a failed part
    if (!c_.ckpt.async) return commit_pending(why);
    return Status::ok();
  }
  if (c_.ckpt.async) {
    if (!writer_) writer_ = std::make_unique<CkptWriter>(run_dir_, threads_);
    const double t0 = now_s();
    // Deferred copy: the staging copy runs while the next step's forward/backward only read the
    // tensors; staged() after that backward waits for it.
    saved = writer_->submit(r, CkptCopy::kDeferred);  // also reports an earlier background failure
    stall_ms = (now_s() - t0) * 1e3;
    if (saved) {
      last_ckpt_ = ckpt_step_dir(run_dir_, step);
      const CkptSaveStats ls = writer_->last_stats();
      spdlog::info("checkpoint ({}) step {} handed to the writer in {:.1f} ms{}", why, step, stall_ms,
                   ls.bytes > 0 ? fmt::format("; the last one wrote {:.1f} MB at {:.0f} MB/s", ls.bytes / 1e6, ls.write_mb_s)
                                : std::string());
      if (line && ls.bytes > 0) {
        (*line)["ckpt_write_mb_s"] = ls.write_mb_s;
        (*line)["ckpt_write_mb"] = ls.bytes / 1e6;
        if (disk_mb_s_ > 0) (*line)["disk_mb_s"] = disk_mb_s_;
      }
    }
  } else {
    CkptSaveStats st;
    const double t0 = now_s();
    saved = ckpt_save(run_dir_, r, &st);
    stall_ms = (now_s() - t0) * 1e3;
    if (saved) {
      last_ckpt_ = st.dir;
      spdlog::info("checkpoint ({}) {}: {:.1f} MB in {:.0f} ms ({:.0f} MB/s)", why, st.dir, st.bytes / 1e6, stall_ms,
                   st.write_mb_s);
      if (line) {
        (*line)["ckpt_write_mb_s"] = st.write_mb_s;
        (*line)["ckpt_write_mb"] = st.bytes / 1e6;
        if (disk_mb_s_ > 0) (*line)["disk_mb_s"] = disk_mb_s_;
      }
    }
  }
  if (line) (*line)["ckpt_stall_ms"] = line->value("ckpt_stall_ms", 0.0) + stall_ms;
  if (!saved) {
    saves_failed_++;
    Status e = Status::error(fmt::format("checkpoint at step {}: {}", step, saved.message()));
    if (c_.ckpt.on_error == CkptOnError::kStop) return e;
    spdlog::warn("{}; training continues ([ckpt] on_error = \"continue\"), the previous checkpoint is kept", e.message());
    event({{"step", step}, {"event", "checkpoint_failed"}, {"error", saved.message()}});
    return Status::ok();
  }
  trace_instant("checkpoint", 'p', "step", (double)step);
  std::vector<std::string> removed;
  if (Status s = ckpt_retain(run_dir_, c_.ckpt.keep_last, c_.ckpt.keep_every, &removed); !s)
    spdlog::warn("checkpoint retention: {}", s.message());
  return Status::ok();
}

Status Trainer::eval_now(int64_t step, ojson* line) {
  TraceSpan span("eval", "step", (double)step);
  double task_s = 0;  // the tasks run on rank 0's whole copy of the weights (no TP/PP: config checks)
  if (tasks_.active() && lead_ && line)
    if (Status s = tasks_.run(model_.params(), threads_, step, *line, task_s); !s) return s;
  if (c_.eval.data.empty()) {
    last_eval_s_ = task_s;
    eval_s_sum_ += task_s;
    if (step_ > 0) warm_eval_s_ += task_s, warm_evals_++;
    return Status::ok();
  }
  EvalResult r;
  double t0 = now_s();
  const EvalText* text = eval_text_.bytes.empty() ? nullptr : &eval_text_;
  // Each batch through the stages, or the model; from step 1 on, the memory ceiling checked after
  // each (a long evaluation is where a leak would otherwise go unseen until the step's check).
  EvalForward pipe = [this](const Batch& b, float& loss) {
    Status s = shard_.pp > 1 ? pipeline_forward_loss(b, loss) : model_.forward_loss(b, loss);
    return !s || step_ == 0 ? s : check_memory_ceiling("during the evaluation at");
  };
  if (gpu_) {
    EvalModel em;
    em.max_seq_len = c_.model.max_seq_len;
    em.forward = [this](const Batch& b, float& loss) { return gpu_->forward(b, loss); };
    em.token_losses = [this] { return gpu_->token_losses(); };
    em.entropy = [this] { return gpu_->entropy(128); };
    if (Status s = evaluate(em, data_, c_.eval.data, c_.eval.tokens, r, text); !s) return s;
  } else if (Status s = evaluate(model_, data_, c_.eval.data, c_.eval.tokens, r, text, nullptr, pipe); !s) {
    return s;
  }
  if (model_parallel()) {  // the numbers of the one rank that has them (the last stage's TP rank 0 of replica 0)
    const bool speaks = contributes_ && grid_.dp_rank == 0;
    double v[5] = {r.loss, r.entropy, r.perplexity, r.bits_per_byte, (double)r.bytes};
    for (double& x : v) x = speaks ? x : 0.0;
    if (Status s = comm_->allreduce_sum(v, 5); !s) return s;
    r.loss = v[0], r.entropy = v[1], r.perplexity = v[2], r.bits_per_byte = v[3], r.bytes = (uint64_t)v[4];
  }
  last_eval_s_ = r.seconds + task_s;
  eval_s_sum_ += r.seconds + task_s;
  if (step_ > 0) warm_eval_s_ += r.seconds + task_s, warm_evals_++;
  span.arg("loss", r.loss);
  if (eval_first_ < 0) eval_first_ = r.loss, eval_first_bpb_ = r.bits_per_byte;
  eval_last_ = r.loss, eval_last_bpb_ = r.bits_per_byte;
  if (line) {
    (*line)["eval_loss"] = r.loss;
    (*line)["eval_ppl"] = r.perplexity;
    (*line)["eval_tokens"] = r.tokens;
    if (text) {
      (*line)["eval_bpb"] = r.bits_per_byte;
      (*line)["eval_bytes"] = r.bytes;
    }
    (*line)["eval_entropy"] = r.entropy;
    (*line)["eval_tokens_per_s"] = r.seconds > 0 ? r.tokens / r.seconds : 0.0;
  }
  spdlog::info("eval at step {}: loss {:.4f}, perplexity {:.2f}{}, token entropy {:.3f} over {} tokens ({:.1f} s)", step,
               r.loss, r.perplexity, text ? fmt::format(", {:.4f} bits per byte", r.bits_per_byte) : std::string(),
               r.entropy, r.tokens, now_s() - t0);
  const HealthConfig& h = c_.health;
  if (h.entropy_floor > 0 && step > 0) {
    low_entropy_evals_ = r.entropy < h.entropy_floor ? low_entropy_evals_ + 1 : 0;
    if (low_entropy_evals_ >= h.entropy_evals) {
      sched_.restart_step = step;
      sched_.restart_scale = h.lr_restart_scale;
      lr_restarts_++;
      low_entropy_evals_ = 0;
      spdlog::warn("token entropy {:.3f} < {} for {} evaluations: the LR schedule restarts at step {} from {:.3g}",
                   r.entropy, h.entropy_floor, h.entropy_evals, step, c_.schedule.lr * h.lr_restart_scale);
      event({{"step", step}, {"event", "lr_restart"}, {"eval_entropy", r.entropy}, {"peak_lr", c_.schedule.lr * h.lr_restart_scale}});
    }
  }
  return Status::ok();
}

Status Trainer::rollback(int64_t step) {
  if (Status s = commit_pending("before a rollback"); !s) return s;
  if (writer_) {
    if (Status s = writer_->wait(); !s) spdlog::warn("checkpoint writer: {}", s.message());
  }
  if (Status s = comm_->barrier(); !s) return s;  // rank 0's checkpoint is durable before anyone reads it
  std::string dir;
  std::vector<std::string> warnings;
  Status found = ckpt_find_latest(run_dir_, dir, &warnings);
  for (const auto& w : warnings) spdlog::warn("{}", w);
  if (!found) {
    spdlog::warn("step {}: {} loss spikes in a row but no checkpoint to roll back to; training continues", step,
                 c_.health.spike_repeats);
    event({{"step", step}, {"event", "spike_no_checkpoint"}});
    return Status::ok();
  }
  CkptManifest m;
  if (Status s = ckpt_read_manifest(dir, m); !s) return s;
  if (Status s = train_state_load_tensors(tensors(), dir, m); !s) return s;
  if (gpu_) gpu_->from_host(model_, opt_);
  // The data since that checkpoint is skipped: the loader keeps its position, and the window's
  // documents go to quarantine.jsonl.
  LoaderPosition from;
  if (Status s = LoaderPosition::from_json(m.state.at("loader"), from); !s) return s;
  std::vector<DataSource> sources;
  if (!feed_.streaming) sources = feed_.shards.sources();
  json q = quarantine_window(sources, c_.data.seed, c_.data.shuffle, from, loader_pos_, m.step, step);
  q["rolled_back_to"] = dir;
  if (lead_) {
    std::ofstream out((fs::path(run_dir_) / "quarantine.jsonl").string(), std::ios::app);
    out << q.dump() << "\n";
    if (!out) return Status::error(fmt::format("{}/quarantine.jsonl: cannot write", run_dir_));
  }
  for (const auto& d : q["documents"]) quarantined_.emplace_back(d["source"].get<std::string>(), d["doc"].get<uint64_t>());
  if (!feed_.streaming) {
    // Reopen the loader at the current position with the quarantine: later epochs never read those
    // documents again (a resume opens it the same way, so both runs see the same data).
    data_.exclude = quarantined_;
    feed_.shards.close();
    if (Status s = feed_.open(data_, &loader_pos_); !s) return s;
  }
  rollbacks_++;
  spike_.reset_run();
  spdlog::warn("step {}: {} loss spikes in a row; rolled back to {} and skipped the data of steps {}-{} ({} documents "
               "quarantined in {}/quarantine.jsonl)", step, c_.health.spike_repeats, dir, m.step + 1, step,
               q["documents"].size(), run_dir_);
  event({{"step", step}, {"event", "rollback"}, {"to", dir}, {"to_step", m.step}, {"documents", q["documents"].size()}});
  return Status::ok();
}

void Trainer::status_line(int64_t step, double loss, double tok_s, double mfu, double wait_ms, bool final) {
  if (!lead_) return;
  double now = now_s();
  if (!final && now - last_status_s_ < (tty_ ? 0.2 : c_.train.status_interval_s)) return;
  if (final && !tty_ && step == last_status_step_) return;  // already printed for this step
  last_status_step_ = step;
  last_status_s_ = now;
  const double elapsed = now - run_start_s_;
  const double done = (double)(step - start_step_), left = (double)(total_steps_ - step);
  std::string where = c_.train.steps > 0 || budget_s_ > 0
                          ? fmt::format("step {}/{}{}", step, total_steps_, planned_ || budget_s_ <= 0 ? "" : "?")
                                        : fmt::format("step {} | tokens {}/{}", step, human_count((double)tokens_),
                                                      human_count((double)c_.train.max_tokens));
  std::string line = fmt::format("{} | loss {:.4f} | {} tok/s | mfu {:.1f}% | data wait {:.1f} ms | eta {}", where,
                                 loss, human_count(tok_s), 100 * mfu, wait_ms,
                                 duration_str(eta_seconds(elapsed, done, left, budget_s_)));
  if (tty_) {
    std::fprintf(stderr, "\r\033[K%s%s", line.c_str(), final ? "\n" : "");
    std::fflush(stderr);
  } else {
    spdlog::info("{}", line);
  }
}

Status Trainer::start() {
  if (Status s = setup(); !s) return s;
  if (c_.resume) {
    if (Status s = resume_from_checkpoint(); !s) return s;
  } else if (lead_ && fs::exists(metrics_path_)) {
    // A fresh run in a used folder starts a fresh metrics file (checkpoints stay until retention).
    std::error_code ec;
    fs::remove(metrics_path_, ec);
  }
  if (Status s = feed_.open(data_, have_resume_pos_ ? &loader_pos_ : nullptr); !s) return s;
  if (lead_) {
    metrics_.open(metrics_path_, std::ios::app);
    if (!metrics_) return Status::error(fmt::format("{}: cannot open for writing", metrics_path_));
  }
  replay_vitals();
  probe_disk();
  spdlog::info("run {}: {} steps x {} micro-batch(es) of up to {}x{} tokens{}, {} threads, {} precision",
               run_dir_, total_steps_, c_.train.grad_accum, B_, T_,
               comm_->size() > 1 ? fmt::format(" on each of {} ranks", comm_->size()) : std::string(), threads_,
               precision_name(model_.precision()));
  if (gpu_) {
    spdlog::info("device: {} (CUDA), {:.1f} MiB planned on it:\n{}", gpu_->device_name(),
                 gpu_->device_bytes() / 1048576.0, gpu_->memory_report());
    spdlog::info("MFU against {:.1f} GFLOP/s{}", gemm_gflops_,
                 c_.train.peak_gflops > 0 ? " ([train] peak_gflops)" : " (a 4096^3 GEMM on the device, measured)");
  } else {
    spdlog::info("{}; {}", gemm_.report(), blas_core().note());
    spdlog::info("MFU against {:.1f} GFLOP/s{} and against the CPU's peak {:.1f} GFLOP/s ({:.0f} FLOP/cycle x {} "
                 "cores x {:.0f} MHz from {}, {})", gemm_gflops_,
                 c_.train.peak_gflops > 0 ? " ([train] peak_gflops)" : " (the model's GEMMs, measured)", peak_.gflops,
                 peak_.flop_per_cycle, threads_, cpu_info_measured().mhz, cpu_info_measured().mhz_source, peak_.unit);
  }
  if (!gpu_) {
    const RunMemory rm = run_memory();
    spdlog::info("memory plan of the run (rank {}): {}", comm_->rank(), rm.summary(6));
    const int64_t ceiling = c_.train.memory_ceiling_mb << 20;
    if (ceiling > 0 && rm.total() > ceiling)
      spdlog::warn("rank {}: the plan's {:.1f} MiB is above [train] memory_ceiling_mb = {}: the run stops at the "
                   "ceiling's first check, after step {}", comm_->rank(), rm.total() / 1048576.0,
                   c_.train.memory_ceiling_mb, step_ + 1);
  }
  tty_ = isatty(STDERR_FILENO);
  run_start_s_ = now_s();
  if (c_.eval.evaluates() && step_ == 0) {
    ojson line;
    line["step"] = 0;
    if (Status s = eval_now(0, &line); !s) return s;
    write_metrics(line.dump());
  }
  return Status::ok();
}

// Steps stop the run when given; otherwise tokens do (total_steps_ then only lays out the schedule).
bool Trainer::done() const {
  const int64_t stop_tokens = c_.train.max_tokens;
  return (c_.train.steps > 0 && step_ >= c_.train.steps) || (stop_tokens > 0 && tokens_ >= (uint64_t)stop_tokens) ||
         (planned_ && step_ >= total_steps_) || out_of_time_;
}

// The evaluation interval in steps: [eval] every, or the planned steps / [eval] points.
int Trainer::eval_every() const {
  if (c_.eval.every > 0) return c_.eval.every;
  // ceil: the last point is the final step's evaluation (with the floor a point came a few steps
  // before it, an evaluation more than asked for: 7 s of a 7.5-minute demo run).
  if (c_.eval.points > 0) return (int)std::max<int64_t>(1, (total_steps_ + c_.eval.points - 1) / c_.eval.points);
  return 0;
}

// The time budget's plan, made when 5% of the budget or 30 s is spent (and at least 3 steps): the
// steps left = 97% of the time left, less the evaluations still due and the final one, over the
// mean step time since the first step (which pays for first touches). The schedule is laid out
// over that count from then on. A plan made within warmup is made again, finally, at warmup's last
// step, from the longer mean and the evaluations after step 0's (the first plan, from a few steps
// and a cold evaluation, left a tenth of the budget unused on 2 cores); warmup does not depend on
// the count, so either way the run is the same as `train.steps = N` with the final N. A machine
// that slows down later meets the deadline first: the run then ends there, with its final
// evaluation and checkpoint, before the schedule's end.
void Trainer::plan_budget() {
  const double now = now_s();
  if (step_ == start_step_ + 1) first_step_end_s_ = now, eval_s_at_first_step_ = eval_s_sum_;
  if (budget_s_ <= 0) return;
  const double spent = now - run_start_s_;
  // The final evaluation (a busy machine makes it slower) and the checkpoint hand-off; the run
  // stops when one more step like the last would not end before them.
  const double reserve = 1.2 * last_eval_s_ + 1.0;
  if (spent + last_.step_ms / 1e3 + reserve >= budget_s_) out_of_time_ = true;
  const int64_t done_steps = step_ - start_step_;
  const int64_t warmup = sched_.warmup_steps;
  if (planned_) {
    if (final_plan_ || step_ != warmup || done_steps < planned_at_ - start_step_ + 5) {
      final_plan_ = final_plan_ || step_ >= warmup;
      return;
    }
  } else if (done_steps < 3 || spent < std::min(30.0, 0.05 * budget_s_)) {
    return;
  }
  // A step's time without the evaluations that came between (the plan adds those on their own).
  plan_step_s_ = (now - first_step_end_s_ - (eval_s_sum_ - eval_s_at_first_step_)) / (double)(done_steps - 1);
  const double eval_s = warm_evals_ > 0 ? warm_eval_s_ / warm_evals_ : last_eval_s_;
  const double left = 0.97 * (budget_s_ - spent) - reserve;
  // The evaluations still due: points spread over the planned steps, one every `every` steps.
  double n = 0;
  if (!c_.eval.evaluates()) n = left / plan_step_s_;
  else if (c_.eval.every > 0) n = left / (plan_step_s_ + eval_s / c_.eval.every);
  else {
    const double done_share = planned_ ? (double)step_ / (double)total_steps_ : 0.0;
    n = (left - c_.eval.points * (1 - done_share) * eval_s) / plan_step_s_;
  }
  int64_t total = step_ + std::max<int64_t>(1, (int64_t)n);
  if (c_.train.steps > 0) total = std::min(total, c_.train.steps);
  const bool again = planned_;
  total_steps_ = sched_.total_steps = total;
  planned_ = true;
  // no re-plan at warmup's end will come for a plan whose steps end before warmup's does, nor for
  // one made fewer than 5 steps before that end (too few new steps to measure)
  final_plan_ = again || step_ >= warmup || total <= warmup || step_ + 5 > warmup;
  planned_at_ = step_;
  if (total <= warmup && !again)
    spdlog::warn("time budget: the {} steps it allows end inside the {}-step warmup, so the learning rate never "
                 "decays; a smaller optim.warmup_steps (or a longer budget) fits the schedule in",
                 total, warmup);
  spdlog::info("time budget {:g} min: {} steps planned at step {}{} ({:.0f} ms a step, evaluations {:.1f} s each, "
               "{:.0f} s left)", c_.train.time_budget_minutes, total, step_, again ? " (warmup's end: final)" : "",
               plan_step_s_ * 1e3, eval_s, left);
  event({{"step", step_}, {"event", "time_budget_plan"}, {"total_steps", total}, {"step_ms", plan_step_s_ * 1e3},
         {"eval_s", eval_s}, {"final", final_plan_}});
}

// [trace] steps = "A-B": at the range's first step every rank passes one barrier and notes its
// clock right after it (`smelt trace merge` aligns the ranks' files there), then recording starts.
// Once per run (a rollback that steps back does not trace again).
Status Trainer::trace_begin_step() {
  const int64_t next = step_ + 1;
  if (c_.trace.first <= 0 || trace_sync_ns_ >= 0 || next < c_.trace.first || next > c_.trace.last)
    return Status::ok();
  if (Status s = comm_->barrier(); !s) return s;
  trace_sync_ns_ = trace_now_ns();
  trace_thread_name("main");
  trace_start();
  trace_instant("clock_sync", 'g', "rank", rank());
  tracing_ = true;
  return Status::ok();
}

// Per traced step the counters; after the range's last step recording stops, and the file is
// written as soon as the spans begun in the range have ended (a background checkpoint write may
// end a few steps later).
void Trainer::trace_end_step(const StepStats& st) {
  if (tracing_) {
    trace_counter("tokens_per_s", "tokens_per_s", st.tok_s);
    trace_counter("memory", "rss_mb", (double)trace_rss_bytes() / 1e6);
    trace_last_step_ = step_;
    if (step_ >= c_.trace.last) {
      trace_stop();
      tracing_ = false;
      trace_pending_ = true;
    }
  }
  if (trace_pending_ && trace_idle()) trace_write_file();
}

// RUN/trace/rank{R}.json (or [trace] dir). A trace that cannot be written does not stop training.
void Trainer::trace_write_file() {
  trace_stop();
  tracing_ = trace_pending_ = false;
  for (int i = 0; i < 200 && !trace_idle(); i++) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const fs::path dir = c_.trace.dir.empty() ? fs::path(run_dir_) / "trace" : fs::path(c_.trace.dir);
  const std::string path = (dir / fmt::format("rank{}.json", rank())).string();
  if (!trace_idle()) {
    spdlog::warn("trace: a span of the traced range is still open after 2 s; {} is not written", path);
    return;
  }
  TraceProcessInfo info;
  info.rank = rank();
  info.world_size = ranks();
  info.clock_sync_ns = trace_sync_ns_;
  info.extra = {{"steps", c_.trace.steps}, {"first_step", c_.trace.first}, {"last_step", trace_last_step_},
                {"run_dir", run_dir_}};
  int64_t events = 0;
  if (Status s = trace_write(path, info, &events); !s) {
    spdlog::warn("trace: {}", s.message());
    return;
  }
  spdlog::info("trace of steps {}-{}: {} ({} events; open it in ui.perfetto.dev{})", c_.trace.first, trace_last_step_,
               path, events, ranks() > 1 ? ", or merge the ranks' files with smelt trace merge" : "");
}

// The stop flag is not cleared here: a SIGTERM that came while the run was being set up (GEMM
// measurement, data, resume) still ends it after its first step.
Status Trainer::run(TrainSummary& out) {
  if (Status s = start(); !s) return s;
  while (!done() && !stop_now_) {
    StepStats st;
    if (Status s = trace_begin_step(); !s) return s;
    if (Status s = train_step(st); !s) return s;
    if (Status s = after_step(st); !s) return s;
    trace_end_step(st);
  }
  if (Status s = commit_pending("end of run"); !s) return s;
  if (writer_) {
    // Every submitted checkpoint is durable before the summary names it.
    if (Status s = writer_->wait(); !s) {
      if (c_.ckpt.on_error == CkptOnError::kStop) return Status::error("checkpoint: " + s.message());
      spdlog::warn("checkpoint: {}", s.message());
      last_ckpt_.clear();
    }
  }
  if (tracing_ || trace_pending_) trace_write_file();  // a run that ended inside the range
  write_metrics("");  // what a full disk held back, once more
  status_line(step_, last_loss_, last_.tok_s, last_.mfu, last_.wait_ms, true);
  return summarize(out, now_s() - run_start_s_);
}

// One optimizer step: fetch and forward/backward of each micro-batch, the reduction over ranks,
// the gradient norm and the update; then step_ and the token counts advance.
Status Trainer::train_step(StepStats& st) {
  TraceSpan step_span("step", "step", (double)(step_ + 1));
  const double t0 = now_s();
  begin_step(st);
  if (shard_.pp > 1) {
    if (Status s = pipeline_step(st); !s) return s;
  } else {
    for (int micro = 0; micro < c_.train.grad_accum; micro++)
      if (Status s = micro_step(micro, st); !s) return s;
  }
  if (!acc_.empty() && !st.overlap) std::copy(acc_.begin(), acc_.end(), model_.grads());
  stage_checkpoint();
  if (comm_->size() > 1 && comm_->rank() == c_.dist.inject_delay_rank && step_ + 1 >= c_.dist.inject_delay_step)
    std::this_thread::sleep_for(std::chrono::microseconds((int64_t)(c_.dist.inject_delay_ms * 1e3)));  // a straggler
  st.compute_ms = (now_s() - t0) * 1e3;
  st.tp_ms = tp_ms_, tp_ms_ = 0;
  if (groups_.pp) st.pp_wait_ms = groups_.pp->take_recv_wait_ms();
  if (Status s = reduce_step(st); !s) return s;
  if (Status s = update(st); !s) return s;
  end_step(st, t0);
  return Status::ok();
}

// The step's rate and counters; a hung rank's fault injection; the reducer told a step starts.
void Trainer::begin_step(StepStats& st) {
  st.lr = lr_at(sched_, step_);
  st.src_sum.assign(feed_.names.size(), 0.0);
  st.src_n.assign(feed_.names.size(), 0.0);
  st.T = T_;
  const bool multi = comm_->size() > 1;
  if (multi && comm_->rank() == c_.dist.inject_hang_rank && step_ + 1 == c_.dist.inject_hang_step)
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // fault injection: a hung rank
  if (multi) comm_->arrive(step_);
  // Overlap: the last micro-batch's backward hands each finished range of the gradient to the
  // reducer, which starts buckets on the communication thread (top-k needs the whole gradient).
  st.overlap = reducer_ && reducer_->overlaps();
  if (reducer_) reducer_->begin_step(model_.grads(), acc_.empty() ? nullptr : acc_.data(), step_);
  st.bytes_before = dp_comm().bytes_sent();
  if (groups_.tp) st.tp_bytes_before = groups_.tp->bytes_sent(), st.pp_bytes_before = groups_.pp->bytes_sent();
}

// One micro-batch: fetch, forward (and its health signals), backward; the last one of an
// overlapped step hands finished gradient ranges to the reducer as backward produces them.
Status Trainer::micro_step(int micro, StepStats& st) {
  const Batch& b = fetch(st);
  if (Status s = forward_micro(b, micro, st); !s) return s;
  backward_micro(b, micro, st);
  return Status::ok();
}

const Batch& Trainer::fetch(StepStats& st) {
  const Batch* bp = &feed_.next();
  st.wait_ms += feed_.last_wait_ms();
  if (std::find(c_.health.inject_bad_data_steps.begin(), c_.health.inject_bad_data_steps.end(), step_ + 1) !=
      c_.health.inject_bad_data_steps.end()) {
    // Fault injection: targets scrambled, as a corrupt shard would give.
    injected_ = *bp;
    for (auto& t : injected_.targets)
      if (t >= 0) t = (int32_t)(((int64_t)t * 7919 + 13) % c_.model.vocab_size);
    bp = &injected_;
  }
  return *bp;
}

// Every micro-batch of every data-parallel replica weighs the same.
float Trainer::micro_dloss(const Batch& b) const {
  const int parts = c_.train.grad_accum * grid_.dp;
  return b.target_tokens ? 1.0f / ((float)b.target_tokens * parts) : 0.0f;
}

// Forward and the step's sums from it (the loss, tokens and health signals count on the ranks that
// contribute_: the last stage's TP rank 0).
Status Trainer::forward_micro(const Batch& b, int micro, StepStats& st) {
  float loss = 0;
  const double tf = now_s();
  if (Status s = gpu_ ? gpu_->forward(b, loss) : model_.forward(b, loss, micro_dloss(b)); !s)
    return Status::error(fmt::format("step {}: {}", step_ + 1, s.message()));
  st.forward_ms += (now_s() - tf) * 1e3;
  st.T = b.T;
  if (gpu_) {
    st.entropy += gpu_->entropy(c_.train.entropy_rows);
  } else if (shard_.last() && c_.train.entropy_rows > 0) {
    const double h = model_.prediction_entropy(c_.train.entropy_rows);  // (a TP collective: every TP rank)
    if (contributes_) st.entropy += h;
  }
  if (const int K = c_.train.sparsity_every; K > 0 && micro == 0 && (step_ + 1) % K == 0 && !gpu_)
    st.sparsity = model_.attention_sparsity();
  if (!contributes_) return Status::ok();
  st.loss_sum += loss;
  st.tokens += b.target_tokens;
  const float* tl = gpu_ ? gpu_->token_losses() : model_.token_losses();
  for (int n = 0, N = b.B * b.T; n < N; n++)
    if (b.targets[n] >= 0 && b.sources[n] < st.src_sum.size()) {
      st.src_sum[b.sources[n]] += tl[n];
      st.src_n[b.sources[n]] += 1;
    }
  return Status::ok();
}

void Trainer::backward_micro(const Batch& b, int micro, StepStats& st) {
  if (gpu_) {
    gpu_->backward(micro_dloss(b), micro == 0);
    return;
  }
  model_.zero_grad();
  const bool hooked = st.overlap && micro + 1 == c_.train.grad_accum;
  if (hooked) model_.set_grad_ready([this](int64_t lo, int64_t hi) { reducer_->ready(lo, hi); });
  model_.backward(micro_dloss(b));
  if (hooked) {
    reducer_->backward_done();
    model_.set_grad_ready({});
    st.buckets = reducer_->buckets();
  }
  // The step's gradient is ((g_0 + g_1) + g_2) + ..., each micro-batch's from zero: the same sum
  // the ranks' reduction makes, so N ranks x 1 micro-batch == 1 rank x N micro-batches, bit for bit.
  if (!acc_.empty() && !hooked) {
    const float* g = model_.grads();
    const int64_t n = (int64_t)acc_.size();
    if (micro == 0) std::copy(g, g + n, acc_.begin());
    else for (int64_t i = 0; i < n; i++) acc_[i] += g[i];
  }
}

// The step's micro-batches through the pipeline in 1F1B order (train/pipeline.hpp). Each
// micro-batch keeps its activation set (slot) from its forward to its backward; a stage receives
// its input's activations before a forward and its output's gradient before a backward, and sends
// on without waiting (the sends complete by the step's end). Every stage reads the same batches
// (positions, masks, targets), so only activations and gradients travel.
Status Trainer::pipeline_step(StepStats& st) {
  Communicator& pp = *groups_.pp;
  const int stage = shard_.stage, P = shard_.pp, M = c_.train.grad_accum, S = model_.slots();
  const int64_t NC = (int64_t)B_ * T_ * c_.model.d_model;
  // An outgoing message is copied first: the buffer it came from (a slot's output, the shared
  // input gradient) is rewritten by the next op while the neighbour may not have taken it yet.
  size_t out_n = 0;
  auto send = [&](const float* data, int64_t n, int peer, int tag) {
    if (out_n == pipe_out_.size()) pipe_out_.emplace_back();
    std::vector<float>& buf = pipe_out_[out_n++];
    buf.assign(data, data + n);
    return pp.send_async(buf.data(), n, peer, tag);
  };
  // A message goes out only while its sender is inside MPI (Communicator::progress): between
  // blocks, so the neighbour does not wait for this stage's whole op (measured on bench-tiny's
  // pipeline of 2: the last stage waited 0.7-0.8 s of a 3.8 s step without it, docs/parallel.md).
  model_.set_between_blocks([&pp] { pp.progress(); });
  struct Unhook {
    Model& m;
    ~Unhook() { m.set_between_blocks({}); }
  } unhook{model_};
  for (const PipeOp& op : pipeline_1f1b(P, stage, M)) {
    const int slot = op.micro % S;
    model_.use_slot(slot);
    Batch& b = pipe_batches_[slot];
    const int tag = op.micro;
    if (op.forward) {
      b = fetch(st);
      const int64_t n = (int64_t)b.B * b.T * c_.model.d_model;
      if (n > NC) return Status::error(fmt::format("step {}: batch {}x{} larger than planned", step_ + 1, b.B, b.T));
      if (!shard_.first())
        if (Status s = pp.recv(model_.stage_input(), n, stage - 1, tag); !s) return s;
      if (Status s = forward_micro(b, op.micro, st); !s) return s;
      if (!shard_.last())
        if (Status s = send(model_.stage_output(), n, stage + 1, tag); !s) return s;
    } else {
      const int64_t n = (int64_t)b.B * b.T * c_.model.d_model;
      if (!shard_.last())
        if (Status s = pp.recv(model_.stage_output_grad(), n, stage + 1, tag); !s) return s;
      backward_micro(b, op.micro, st);
      if (!shard_.first())
        if (Status s = send(model_.stage_input_grad(), n, stage - 1, tag); !s) return s;
    }
  }
  if (Status s = pp.wait_sends(); !s) return s;
  model_.use_slot(0);
  return Status::ok();
}

// An evaluation batch: each stage receives its input, runs its layers and passes them on; the
// last stage's losses are the batch's (the evaluation's sums are taken from it, trainer.cpp).
Status Trainer::pipeline_forward_loss(const Batch& b, float& loss) {
  Communicator& pp = *groups_.pp;
  const int stage = shard_.stage;
  const int64_t n = (int64_t)b.B * b.T * c_.model.d_model;
  if (!shard_.first())
    if (Status s = pp.recv(model_.stage_input(), n, stage - 1, 0); !s) return s;
  if (Status s = model_.forward_loss(b, loss); !s) return s;
  if (!shard_.last()) {
    if (Status s = pp.send_async(model_.stage_output(), n, stage + 1, 0); !s) return s;
    return pp.wait_sends();
  }
  return Status::ok();
}

// A deferred checkpoint copy ends before anything it copies changes: the top-k residual in the
// reduction, the weights and moments in the update.
void Trainer::stage_checkpoint() {
  if (writer_) {
    TraceSpan span("checkpoint.staged");
    writer_->staged();
    if (writer_->last_staged_wait_ms() > 0.01) line_extra_stall_ms_ = writer_->last_staged_wait_ms();
  }
}

// The reduced step's loss; the gradient norm (one pass: the finiteness check and the clipping
// share it); AdamW, or the skip of a non-finite update.
Status Trainer::update(StepStats& st) {
  const int parts = c_.train.grad_accum * grid_.dp;
  st.loss = st.loss_sum / parts;
  st.entropy /= grid_.dp;
  const HealthConfig& hc = c_.health;
  if (std::find(hc.inject_nan_steps.begin(), hc.inject_nan_steps.end(), step_ + 1) != hc.inject_nan_steps.end())
    model_.grads()[model_.layout().total / 2] = NAN;  // fault injection
  double norm = 0;  // one pass: the finiteness check and the clipping share it
  {
    TraceSpan span("grad_norm");
    const double tn = now_s();
    if (gpu_) norm = gpu_->grad_norm();
    else if (Status s = global_grad_norm(norm); !s) return s;
    if ((reducer_ && reducer_->shards_optimizer()) || model_parallel()) {  // the norm's partials went over the network
      const double ms = (now_s() - tn) * 1e3;
      st.allreduce_wait_ms += ms, st.allreduce_ms += ms;
    }
  }
  st.finite = std::isfinite(st.loss) && (!hc.skip_nonfinite || std::isfinite(norm));
  if (st.finite || !hc.skip_nonfinite) {
    AdamWConfig h = c_.optim;
    h.lr = (float)st.lr;
    if (gpu_) {
      opt_.set_step_count(opt_.step_count() + 1);
      gpu_->step(h, norm, opt_.step_count());
      st.grad_norm = (float)norm;
    } else {
      st.grad_norm = opt_.step(model_.params(), model_.grads(), h, norm);
    }
    if (reducer_ && reducer_->shards_optimizer()) {  // ZeRO-1: each rank updated its range; every rank gets every range
      const double tg = now_s();
      if (Status s = reducer_->after_update(model_.params()); !s) return s;
      const double ms = (now_s() - tg) * 1e3;
      st.allreduce_wait_ms += ms, st.allreduce_ms += ms;
    }
  } else {
    nonfinite_skipped_++;
    spdlog::warn("step {}: non-finite loss or gradient; the update was skipped ({} so far)", step_ + 1,
                 nonfinite_skipped_);
  }
  return Status::ok();
}

// The step's counters and speed.
void Trainer::end_step(StepStats& st, double t0) {
  loader_pos_ = feed_.position();
  step_++;
  tokens_ += st.tokens;
  tokens_this_run_ += st.tokens;
  st.step_ms = (now_s() - t0) * 1e3;
  sum_step_ms_ += st.step_ms;
  sum_wait_ms_ += st.wait_ms;
  sum_forward_ms_ += st.forward_ms;
  st.tok_s = st.tokens / (st.step_ms / 1e3);
  st.flops_per_s = train_flops_per_token(c_.model, st.T) * st.tok_s;
  st.mfu = mfu(st.flops_per_s);
  if (!std::isfinite(first_loss_)) first_loss_ = st.loss;
  last_loss_ = st.loss;
}

// The gradient and the step's scalars summed over ranks (one rank: only the stop flag).
Status Trainer::reduce_step(StepStats& st) {
  if (comm_->size() == 1) {
    stop_now_ = g_stop;
    return Status::ok();
  }
  TraceSpan span("reduce");
  // allreduce_ms: all communication of the step; allreduce_wait_ms: the part the step waited for
  // (the overlapped buckets' remainder, and everything done synchronously).
  const double ta = now_s();
  double busy_ms = 0, blocked_ms = 0;
  if (model_parallel())  // the parts of shared tensors first (KV heads over TP ranks, a tied embedding's ends)
    if (Status s = parallel_sync_grads(model_.layout(), model_.grads(), groups_.kv.get(), groups_.pp.get(),
                                       shard_.stage, shard_.pp);
        !s)
      return s;
  if (reducer_)
    if (Status s = reducer_->finish(model_.grads(), &busy_ms); !s) return s;
  if (st.overlap) blocked_ms = (now_s() - ta) * 1e3;
  // The scalars: losses, tokens, entropy, the stop flag, "my checkpoint part is durable",
  // per-source sums.
  const bool part_done = pending_commit_ >= 0 && writer_ && writer_->completed() >= pending_completed_;
  red_.assign({st.loss_sum, (double)st.tokens, st.entropy, g_stop ? 1.0 : 0.0, part_done ? 1.0 : 0.0});
  red_.insert(red_.end(), st.src_sum.begin(), st.src_sum.end());
  red_.insert(red_.end(), st.src_n.begin(), st.src_n.end());
  const size_t at = red_.size();  // every rank's compute time, each in its own slot
  red_.resize(at + comm_->size(), 0.0);
  red_[at + comm_->rank()] = st.compute_ms;
  const size_t mp_at = red_.size();
  const int P = shard_.pp;
  if (model_parallel()) {
    // The attention sparsity (mean over stages of TP rank 0's heads), each stage's wait for its
    // neighbours (its replica 0, TP rank 0), every rank's bytes per group and its time in TP
    // collectives.
    const bool speaks = grid_.dp_rank == 0 && grid_.tp_rank == 0;
    red_.resize(mp_at + 5 + P, 0.0);
    if (speaks && st.sparsity >= 0) red_[mp_at] = st.sparsity / P;
    red_[mp_at + 1] = (double)(groups_.tp->bytes_sent() - st.tp_bytes_before);
    red_[mp_at + 2] = (double)(groups_.pp->bytes_sent() - st.pp_bytes_before);
    // (from the previous step's reduction on: ZeRO-1's all-gather of the weights comes after this
    // step's reduction, so a step counts the previous step's)
    red_[mp_at + 3] = (double)(dp_comm().bytes_sent() - dp_bytes_mark_);
    dp_bytes_mark_ = dp_comm().bytes_sent();
    red_[mp_at + 4] = st.tp_ms;
    if (speaks) red_[mp_at + 5 + shard_.stage] = st.pp_wait_ms;
  }
  if (Status s = comm_->allreduce_sum(red_.data(), (int64_t)red_.size()); !s) return s;
  st.rank_compute_ms.assign(red_.begin() + (long)at, red_.begin() + (long)mp_at);
  if (model_parallel()) {
    if (st.sparsity >= 0) st.sparsity = red_[mp_at];
    st.tp_bytes = red_[mp_at + 1], st.pp_bytes = red_[mp_at + 2], st.dp_bytes = red_[mp_at + 3];
    st.tp_ms = red_[mp_at + 4] / comm_->size();
    st.stage_wait_ms.assign(red_.begin() + (long)(mp_at + 5), red_.end());
  }
  st.loss_sum = red_[0], st.tokens = (uint64_t)red_[1], st.entropy = red_[2];
  stop_now_ = red_[3] > 0;
  const size_t S = st.src_sum.size();
  for (size_t i = 0; i < S; i++) st.src_sum[i] = red_[5 + i], st.src_n[i] = red_[5 + S + i];
  st.allreduce_wait_ms = (now_s() - ta) * 1e3;  // (the blocked part of the buckets + the rest)
  st.allreduce_ms = st.overlap ? busy_ms + (st.allreduce_wait_ms - blocked_ms) : st.allreduce_wait_ms;
  if (groups_.pp) groups_.pp->take_recv_wait_ms();  // (the tied embedding's exchange is not the pipeline's wait)
  if (pending_commit_ >= 0 && red_[4] >= comm_->size())  // every rank's part is durable
    if (Status s = commit_pending("every part durable"); !s) return s;
  return Status::ok();
}

// The step's metrics.jsonl line (before evaluation and checkpoint fields are added).
ojson Trainer::step_line(const StepStats& st) {
  StepLineFacts f;
  f.step = step_;
  f.tokens = tokens_;
  f.prev_grad_norm = prev_grad_norm_;
  f.grad_accum = c_.train.grad_accum;
  f.ranks = comm_->size();
  if (f.ranks > 1) f.allreduce_bytes = dp_comm().bytes_sent() - st.bytes_before;
  f.model_parallel = model_parallel();
  f.pp = shard_.pp;
  f.sources = &feed_.names;
  f.mfu_peak = mfu_peak(st.flops_per_s);
  f.fetch = feed_.latency().stats();
  f.ckpt_stall_ms = line_extra_stall_ms_;
  line_extra_stall_ms_ = 0;
  return step_metrics_line(st, f);
}

// After a step: its metrics line, an evaluation and a checkpoint when due, the console status, and
// a rollback after repeated loss spikes.
Status Trainer::after_step(const StepStats& st) {
  last_ = st;
  ojson line = step_line(st);
  if (std::isfinite(st.grad_norm)) prev_grad_norm_ = st.grad_norm;
  plan_budget();
  const bool last = done();
  // A signal adds nothing to the metrics (a resumed run's file equals an uninterrupted run's).
  const int every = eval_every();
  if (c_.eval.evaluates() && ((every > 0 && step_ % every == 0) || last)) {
    if (Status s = eval_now(step_, &line); !s) return s;
  }
  const HealthConfig& hc = c_.health;
  const bool spike = st.finite && spike_.observe(step_, st.loss);
  if (spike) line["loss_spike"] = spike_.consecutive();
  last_metrics_ = line;
  last_logged_ = lead_ && (step_ % c_.train.log_every == 0 || last);
  const bool roll = spike && spike_.consecutive() >= hc.spike_repeats;
  // No periodic checkpoint in the middle of a spike run: it could become the rollback target.
  const bool periodic = c_.ckpt.save_every > 0 && step_ % c_.ckpt.save_every == 0 && spike_.consecutive() == 0;
  if (periodic || stop_now_ || (last && c_.ckpt.save_at_end)) {
    if (Status s = save(step_, stop_now_ ? "signal" : periodic ? "periodic" : "end", &line); !s) return s;
  }
  if (last_logged_) {
    const std::string text = line.dump();
    write_metrics(text);
    watch_vitals(text);
  }
  status_line(step_, st.loss, st.tok_s, st.mfu, st.wait_ms, false);
  if (Status s = check_memory_ceiling(); !s) return s;  // after the step's evaluation and save
  if (roll)
    if (Status s = rollback(step_); !s) return s;
  return Status::ok();
}

// The end of the run: TrainSummary, its text and RUN/summary.json.
Status Trainer::summarize(TrainSummary& out, double seconds) {
  // Every rank's planned memory and its measured peak (the memory plan's check against reality).
  RunFacts f;
  f.memory_per_rank.assign(3 * (size_t)comm_->size(), 0.0);
  f.memory_per_rank[3 * comm_->rank()] = (double)run_memory().total();
  f.memory_per_rank[3 * comm_->rank() + 1] = (double)peak_rss_bytes();
  f.memory_per_rank[3 * comm_->rank() + 2] = (double)process_bytes_;
  if (comm_->size() > 1)
    if (Status s = comm_->allreduce_sum(f.memory_per_rank.data(), (int64_t)f.memory_per_rank.size()); !s) return s;
  f.run_dir = run_dir_;
  f.checkpoint = last_ckpt_;
  f.start_step = start_step_;
  f.steps = step_;
  f.total_steps = total_steps_;
  f.tokens = tokens_;
  f.tokens_this_run = tokens_this_run_;
  f.parameters = param_count(c_.model);
  f.parameters_this_rank = model_.layout().total;
  f.dp = grid_.dp;
  f.tp = grid_.tp;
  f.pp = grid_.pp;
  f.ranks = comm_->size();
  f.nodes = comm_->nodes();
  f.threads = threads_;
  f.zero = bounds_.empty() ? 0 : 1;
  f.first_loss = first_loss_;
  f.last_loss = last_loss_;
  f.eval_first = eval_first_;
  f.eval_last = eval_last_;
  f.eval_first_bpb = eval_first_bpb_;
  f.eval_last_bpb = eval_last_bpb_;
  f.stopped_by_signal = stop_now_;
  f.lead = lead_;
  f.budget_s = budget_s_;
  f.budget_minutes = c_.train.time_budget_minutes;
  f.plan_step_s = plan_step_s_;
  f.planned = planned_;
  f.out_of_time = out_of_time_;
  f.planned_at = planned_at_;
  f.seconds = seconds;
  f.sum_step_ms = sum_step_ms_;
  f.sum_wait_ms = sum_wait_ms_;
  f.sum_forward_ms = sum_forward_ms_;
  f.flops_per_token = train_flops_per_token(c_.model, T_);
  if (!gpu_) measure_gemm_again(steps_gflops_per_rank(f));  // (after the peak was read: it frees the step's buffers)
  f.gemm_gflops_start = gemm_gflops_start_;
  f.gemm_gflops_end = gemm_gflops_end_;
  f.gemm_gflops = gemm_gflops_;
  f.peak = peak_;
  f.gemm = &gemm_;
  f.plan = &model_.plan();
  f.precision = precision_name(model_.precision());
  f.allreduce = comm_->algorithm();
  f.fetch = feed_.latency().stats();
  run_summary(f, out);
  if (!lead_) return Status::ok();
  return files_write_atomic((fs::path(run_dir_) / "summary.json").string(), out.json.dump(2) + "\n");
}

RunMemory Trainer::run_memory() const {
  RunMemoryInput mi;
  mi.B = B_, mi.T = T_, mi.dp = grid_.dp, mi.grad_accum = c_.train.grad_accum, mi.zero = !bounds_.empty();
  const bool saves = lead_ || rank_files();  // (replicas of rank 0's state save nothing)
  mi.dist = c_.dist, mi.checkpoints = saves && c_.ckpt.save_every > 0, mi.save_at_end = saves && c_.ckpt.save_at_end;
  mi.staged = c_.ckpt.async || rank_files();
  mi.eval_bytes = lead_ ? tasks_.bytes(threads_) : 0;  // the tasks run on rank 0
  mi.precision = model_.precision(), mi.threads = threads_;
  mi.process_bytes = process_bytes_;
  return run_memory_plan(c_.model, shard_, mi);
}

// [train] memory_ceiling_mb: this rank's resident memory (file-backed pages aside: mapped token
// shards the kernel can drop) against the ceiling, once per step and after each evaluation batch. Past it the run stops with the
// plan beside the measurement, before the kernel's OOM killer ends the process without a word;
// `smelt launch` reads the message's first words ("memory ceiling: rank R (host H)").
Status Trainer::check_memory_ceiling(const char* when) {
  const int64_t ceiling = c_.train.memory_ceiling_mb << 20;
  if (ceiling <= 0) return Status::ok();
  const ResidentMemory now = resident_memory();
  if (now.own() <= ceiling) return Status::ok();
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "?");
  const RunMemory rm = run_memory();
  return Status::error(fmt::format(
      "memory ceiling: rank {} (host {}): {:.1f} MiB resident {} step {} (besides {:.1f} MiB of mapped files) "
      "is above [train] memory_ceiling_mb = {}; the plan: {}; peak RSS so far {:.1f} MiB. fix: raise "
      "memory_ceiling_mb to the plan, or shrink the plan (a smaller batch, model.recompute = true, dist.zero = 1)",
      comm_->rank(), host, now.own() / 1048576.0, when, step_, now.file_bytes / 1048576.0, c_.train.memory_ceiling_mb,
      rm.summary(5), peak_rss_bytes() / 1048576.0));
}

// The MFU denominator measured again when the steps ran faster than the start's measurement: a
// start on a busy or still-cold machine reads low, and MFU would show its 100% cap. The model's
// step buffers are freed first and must hold at least the probe's, so the process's peak memory
// stays within the plan (which counts the larger of the two). One process only: ranks measuring
// at the end would not measure together as they did at the start. Not where the rate was
// configured (train.peak_gflops), nor after a signal (the run is asked to end now).
void Trainer::measure_gemm_again(double steps_gflops) {
  gemm_gflops_start_ = gemm_gflops_;
  if (comm_->size() > 1 || c_.train.peak_gflops > 0 || stop_now_ || steps_gflops <= gemm_gflops_) return;
  const int64_t probe = gemm_select_bytes(c_.model, B_, T_, model_.precision());
  const int64_t freed = model_.release_step_buffers();
  if (freed < probe) {
    spdlog::info("gemm: the steps reached {:.1f} GFLOP/s, above the start's measurement {:.1f}; not measured again "
                 "(the step's {} MiB would not hold the probe's {} MiB)", steps_gflops, gemm_gflops_,
                 freed >> 20, probe >> 20);
    return;
  }
  gemm_gflops_end_ = gemm_measure_again(c_.model, B_, T_, gemm_);
  gemm_gflops_ = gemm_.gflops;
  spdlog::info("gemm: the steps reached {:.1f} GFLOP/s, above the start's measurement {:.1f}; measured again: {:.1f}",
               steps_gflops, gemm_gflops_start_, gemm_gflops_end_);
}

double Trainer::mfu(double flops_per_s) const {
  return mfu_of(flops_per_s / 1e9 / comm_->size(), gemm_gflops_);
}

double Trainer::mfu_peak(double flops_per_s) const {
  return mfu_peak_of(flops_per_s / 1e9 / comm_->size(), gemm_gflops_, peak_.gflops);
}

}  // namespace

Status train_run(const TrainConfig& c, TrainSummary& out) {
  Trainer t(c);
  Status s = t.run(out);
  if (!s && t.ranks() > 1) {
    // One rank failing would leave the others blocked in the next reduction: end the job. (The
    // memory ceiling's message names its rank and host first, for `smelt launch`.)
    if (s.message().rfind("memory ceiling: ", 0) == 0) spdlog::error("{}; ending the job", s.message());
    else spdlog::error("rank {}: {}; ending the job", t.rank(), s.message());
    t.abort(kExitFailure);
  }
  return s;
}

}  // namespace smelt
