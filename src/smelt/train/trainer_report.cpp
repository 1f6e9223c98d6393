// The trainer's reports (trainer_impl.hpp): metrics.jsonl lines and events, the vital signs, the
// console status, the summary, MFU, the run's memory plan and its ceiling. Not the lines' and the
// summary's formatting (step_report.hpp) nor the signs' rules (obs/vitals.hpp).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "smelt/common/clock.hpp"
#include "smelt/common/files.hpp"
#include "smelt/train/step_report.hpp"
#include "smelt/train/trainer_impl.hpp"

namespace fs = std::filesystem;

namespace smelt::train_detail {

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
  f.flops_per_token = train_flops_per_token(c_.model, T_, c_.lora);
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
  if (!chat_stats_.is_null()) out.json["chat_data"] = chat_stats_;
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
  mi.lora = c_.lora;
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

}  // namespace smelt::train_detail
