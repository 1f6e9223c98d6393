// The trainer's checkpoints (trainer_impl.hpp): the run's scalar state, a resume, a save (whole or
// this rank's part), the multi-rank commit, and metrics.jsonl cut back to a resumed step. Not the
// checkpoint files (ckpt/) nor the tensors' layout in them (train_state.hpp); a rollback is trainer_eval.cpp's.
#include <cmath>
#include <fstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/ckpt/peft.hpp"
#include "smelt/common/clock.hpp"
#include "smelt/common/config.hpp"
#include "smelt/common/files.hpp"
#include "smelt/train/init_from.hpp"
#include "smelt/train/step_report.hpp"
#include "smelt/train/trainer_impl.hpp"

namespace smelt::train_detail {

namespace {

// Keeps the metrics lines of steps <= step (a resume continues the file where the checkpoint was;
// -1: a resume from nothing keeps none). When the checkpoint's own line (`step_line`, its step's
// line as written) never reached the file (a kill between the commit and the write), appends it. The
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
  if (model_.lora_on()) {  // the checkpoint holds the adapters; the base is init_from's
    s["lora"] = lora_state_json(LoraState{model_.lora_config(), lora_base_, model_.lora_counter()});
  }
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
  if (!chat_.source.empty()) s["chat"] = chat_.to_json();  // what `smelt serve` renders conversations with
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
    // (an attempt killed before its first save left lines, the step-0 evaluation's too, that this
    // one writes again)
    return lead_ ? truncate_metrics(metrics_path_, -1, std::string()) : Status::ok();
  }
  CkptManifest m;
  if (Status s = ckpt_read_manifest(dir, m); !s) return s;
  if (model_.lora_on() != m.state.contains("lora"))
    return Status::error(fmt::format("{}: the checkpoint {} LoRA adapters and this run {} [lora]; resume with the "
                                     "run's own [lora] section (stored in {}/config.toml)", dir,
                                     m.state.contains("lora") ? "holds" : "holds no", model_.lora_on() ? "has" : "has no", dir));
  ModelConfig saved;
  if (Status s = ckpt_model_config(dir, m, saved); !s) return s;
  if (!model_config_same(saved, c_.model))
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
    if (model_.lora_on()) {
      LoraState ls;
      if (Status s = lora_state_parse(st["lora"], dir + "/manifest.json", ls); !s) return s;
      model_.set_lora_counter(ls.dropout_counter);
      resumed_lora_base_ = ls.base;
    }
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

// [lora] init: the adapters from a PEFT folder of the same rank and targets (fresh optimizer).
Status Trainer::init_adapters_from() {
  LoraConfig theirs;
  if (Status s = peft_read_config(c_.lora.init, theirs); !s) return Status::error("[lora] init: " + s.message());
  const LoraConfig& mine = model_.lora_config();
  if (theirs.rank != mine.rank || !lora_targets_same(theirs.targets, mine.targets) || theirs.alpha != mine.alpha)
    return Status::error(fmt::format("[lora] init {}: its adapters are rank {}, alpha {}, targets [{}]; this run's "
                                     "[lora] says rank {}, alpha {}, targets [{}]: give the same", c_.lora.init,
                                     theirs.rank, theirs.alpha, fmt::join(theirs.targets, ", "), mine.rank, mine.alpha,
                                     fmt::join(mine.targets, ", ")));
  if (Status s = peft_read_adapters(c_.lora.init, model_.lora_layout(), model_.params()); !s)
    return Status::error("[lora] init: " + s.message());
  spdlog::info("[lora] adapters from {} ({} parameters)", c_.lora.init, model_.layout().total);
  return Status::ok();
}

Status Trainer::init_weights_from() {
  InitSource src;
  if (Status s = init_from_resolve(c_.train.init_from, src); !s) return s;
  ModelConfig want = src.model;
  want.max_seq_len = c_.model.max_seq_len;
  if (!model_config_same(want, c_.model))
    return Status::error(fmt::format("[train] init_from {}: this run's [model] is not the source's (smelt train "
                                     "--init-from sets it; a config that names init_from itself must copy the "
                                     "source's [model])", c_.train.init_from));
  const std::string source = src.step_dir.empty() ? src.hf_dir : src.step_dir;
  if (model_.lora_on() && !resumed_lora_base_.empty() && source != resumed_lora_base_)
    return Status::error(fmt::format("[train] init_from {} is now {}, but the adapters being resumed trained on {}: "
                                     "name that base in init_from", c_.train.init_from, source, resumed_lora_base_));
  lora_base_ = source;
  // A compact base ([lora] base_dtype bf16, q8_0) takes its matrices tensor by tensor, converted.
  const bool compact = model_.lora_on() && model_.lora_config().base_dtype != "fp32";
  const Status loaded = compact ? init_from_load_each(src, c_.model, model_.base_layout(),
                                                      [this](const ParamTensor& t, const float* v) {
                                                        model_.set_base_tensor(t, v);
                                                      })
                                : init_from_load(src, c_.model, model_.base_layout(), model_.base_params());
  if (!loaded) return loaded;
  if (gpu_) gpu_->from_host(model_, opt_);
  std::vector<std::string> unchecked;
  if (tok_) {
    if (Status s = init_from_check_data(c_.data.sources, *tok_, &unchecked); !s) return s;
    for (const auto& p : unchecked)
      spdlog::warn("[train] init_from: {}.stats.json names no tokenizer; cannot check that {} was tokenized with the "
                   "model's tokenizer", p, p);
  } else {
    spdlog::warn("[train] init_from {}: no tokenizer ([train] tokenizer, or the source's tokenizer.json): the data's "
                 "tokenizer is not checked", c_.train.init_from);
  }
  if (model_.lora_on())
    spdlog::info("base weights from {} ({} parameters, frozen); the adapters train", source, param_count(c_.model));
  else
    spdlog::info("weights from {} ({} parameters); optimizer and schedule start fresh at step 0", source,
                 param_count(c_.model));
  return Status::ok();
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

// A deferred checkpoint copy ends before anything it copies changes: the top-k residual in the
// reduction, the weights and moments in the update.
void Trainer::stage_checkpoint() {
  if (writer_) {
    TraceSpan span("checkpoint.staged");
    writer_->staged();
    if (writer_->last_staged_wait_ms() > 0.01) line_extra_stall_ms_ = writer_->last_staged_wait_ms();
  }
}

}  // namespace smelt::train_detail
