// The trainer's evaluation (trainer_impl.hpp): when it is due, its numbers in the metrics line and
// the entropy floor's LR restart; the rollback after repeated loss spikes, with its quarantine. Not
// the evaluation itself (evaluate.hpp, task_eval.hpp) nor the health rules (health.hpp).
#include <algorithm>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/common/clock.hpp"
#include "smelt/train/trainer_impl.hpp"

namespace fs = std::filesystem;

namespace smelt::train_detail {

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

// The evaluation interval in steps: [eval] every, or the planned steps / [eval] points.
int Trainer::eval_every() const {
  if (c_.eval.every > 0) return c_.eval.every;
  // ceil: the last point is the final step's evaluation (with the floor a point came a few steps
  // before it, an evaluation more than asked for: 7 s of a 7.5-minute demo run).
  if (c_.eval.points > 0) return (int)std::max<int64_t>(1, (total_steps_ + c_.eval.points - 1) / c_.eval.points);
  return 0;
}

}  // namespace smelt::train_detail
