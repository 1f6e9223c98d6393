// The training loop (trainer.hpp): the start, then per step fetch -> forward/backward (micro-batches)
// -> reduce (dist/grad_reducer) -> clip + AdamW (optimizer.hpp). Not setup, checkpoints, evaluation,
// reports, the budget, the trace nor the pipeline's step (trainer_<concern>.cpp, trainer_impl.hpp).
#include "smelt/train/trainer.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "smelt/common/clock.hpp"
#include "smelt/train/step_report.hpp"
#include "smelt/train/trainer_impl.hpp"

namespace fs = std::filesystem;

namespace smelt {

namespace {

std::atomic<bool> g_stop{false};

}  // namespace

void train_request_stop() { g_stop = true; }

namespace train_detail {

Status Trainer::start() {
  if (Status s = setup(); !s) return s;
  if (c_.resume) {
    if (Status s = resume_from_checkpoint(); !s) return s;
  } else if (lead_ && fs::exists(metrics_path_)) {
    // A fresh run in a used folder starts a fresh metrics file (checkpoints stay until retention).
    std::error_code ec;
    fs::remove(metrics_path_, ec);
  }
  // (with LoRA the checkpoints hold the adapters: the frozen base comes from init_from every time)
  if ((!have_resume_pos_ || model_.lora_on()) && !c_.train.init_from.empty()) {
    if (Status s = init_weights_from(); !s) return s;
  }
  if (!have_resume_pos_ && !c_.lora.init.empty())
    if (Status s = init_adapters_from(); !s) return s;
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
  st.flops_per_s = train_flops_per_token(c_.model, st.T, c_.lora) * st.tok_s;
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

}  // namespace train_detail

Status train_run(const TrainConfig& c, TrainSummary& out) {
  train_detail::Trainer t(c);
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
