// The Trainer class behind train_run (trainer.hpp) and its batch source, Feed: a private header of
// the trainer_*.cpp files, not part of the API (trainer.hpp stays the public one). The methods are
// defined by concern: the step loop (trainer.cpp), setup, checkpoint, eval, report, budget, trace, pipeline.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "smelt/ckpt/async_writer.hpp"
#include "smelt/dataset/chat.hpp"
#include "smelt/dist/communicator.hpp"
#include "smelt/dist/grad_reducer.hpp"
#include "smelt/hw/cpu_info.hpp"
#include "smelt/machine/gemm_select.hpp"
#include "smelt/obs/trace.hpp"
#include "smelt/obs/vitals.hpp"
#include "smelt/tokenizer/tokenizer.hpp"
#include "smelt/train/device_run.hpp"
#include "smelt/train/health.hpp"
#include "smelt/train/optimizer.hpp"
#include "smelt/train/parallel.hpp"
#include "smelt/train/run_memory.hpp"
#include "smelt/train/schedule.hpp"
#include "smelt/train/task_eval.hpp"
#include "smelt/train/train_state.hpp"
#include "smelt/train/trainer.hpp"

namespace smelt::train_detail {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

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
  Status setup_tokenizer();
  Status setup_chat_data();  // [data] format = "chat": the template and the conversations' shards (trainer_chat.cpp)
  Status chat_shards(std::string& spec, const char* kind, const ChatRenderer& render, uint64_t max_tokens);
  Status setup_model();
  void set_tp_collectives();
  Status setup_schedule();
  Status resume_from_checkpoint();
  // --init-from: the source's weights into this shard, the shards' tokenizer checked (a fresh run).
  Status init_weights_from();
  Status init_adapters_from();
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
  ChatTemplateSource chat_;  // the template a chat run trains with (empty source: not a chat run)
  json chat_stats_;          // per data source: ChatShardStats::to_json() (rank 0's)
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
  // LoRA: the base's checkpoint (or Hugging Face folder) as init_from resolved it, and the one the
  // resumed checkpoint was trained on (a resume must find the same).
  std::string lora_base_, resumed_lora_base_;
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

}  // namespace smelt::train_detail
