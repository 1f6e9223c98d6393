// The restart loop of `smelt launch`: attempt, watch (exit, metrics stall), classify, verify the
// checkpoints, record the restart, back off, resume. Not process handling (launch/job.cpp) nor
// reading causes (launch/failure.cpp).
#include "smelt/launch/supervisor.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "smelt/common/clock.hpp"
#include "smelt/common/files.hpp"
#include "smelt/launch/failure.hpp"
#include "smelt/launch/hosts.hpp"
#include "smelt/launch/job.hpp"
#include "smelt/launch/progress.hpp"

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace smelt {

namespace {

std::atomic<bool> g_stop{false};

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The newest valid checkpoint of the run, by `smelt ckpt list RUN --json` (every file's CRC32C
// checked); newer ones that are not valid are named in `skipped`.
struct Newest {
  bool found = false;
  int64_t step = 0;
  std::string dir;
  std::vector<std::string> skipped;
};

Status newest_valid(const LaunchOptions& o, Newest& out) {
  out = Newest{};
  std::error_code ec;
  if (!fs::is_directory(fs::path(o.run_dir) / "checkpoints", ec)) return Status::ok();
  const std::string err = (fs::path(o.run_dir) / ".launch-ckpt-list.err").string();
  const std::string cmd = shell_quote(o.smelt) + " ckpt list " + shell_quote(o.run_dir) + " --json 2>" + shell_quote(err);
  std::string text;
  const int rc = run_capture(cmd, text);
  if (rc == -1) return Status::error("cannot run " + cmd);
  nlohmann::json list = nlohmann::json::parse(text, nullptr, false);
  if (list.is_discarded() || !list.is_array()) {
    std::string why;
    if (!files_read_small(err, why)) why.clear();
    return Status::error(fmt::format("`{}` (exit status {}) printed no checkpoint list: {}{}", cmd, rc,
                                     text.substr(0, 300), why.substr(0, 300)));
  }
  fs::remove(err, ec);
  std::vector<std::pair<int64_t, std::string>> bad;
  for (const auto& e : list) {
    const int64_t step = e.value("step", (int64_t)-1);
    if (!e.value("valid", false)) {
      bad.emplace_back(step, fmt::format("{} ({})", e.value("dir", std::string()), e.value("problem", std::string())));
    } else if (!out.found || step > out.step) {
      out.found = true, out.step = step, out.dir = e.value("dir", std::string());
    }
  }
  for (const auto& [step, what] : bad)  // only those newer than the one resumed from were passed over
    if (!out.found || step > out.step) out.skipped.push_back(what);
  return Status::ok();
}

Status append_line(const std::string& path, const ojson& line) {
  std::ofstream f(path, std::ios::app | std::ios::binary);
  f << line.dump() << "\n";
  f.flush();
  return f ? Status::ok() : Status::error(fmt::format("{}: cannot append the restart event", path));
}

bool has_arg(const std::vector<std::string>& v, const std::string& a) { return std::find(v.begin(), v.end(), a) != v.end(); }

// Sleeps up to s seconds; returns early on a stop request.
void nap(double s) {
  const double until = now_s() + s;
  while (!g_stop && now_s() < until) std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

// One attempt: started, watched until it ends or stalls, then its whole group stopped.
struct Attempt {
  int n = 1;
  bool resume = false;
  int64_t resume_step = 0;
  double started = 0, ended = 0;
  bool stalled = false, stopped = false;
  std::string stall_detail;
  Failure failure;
  double back_at = -1;  // when its first new step line came
  double last_progress = 0;  // when its newest step line had come, at the failure
  bool shaped = false;        // --hosts: the supervisor placed the ranks
  LaunchShape shape;
};

Status run_attempt(const LaunchOptions& o, const std::string& launcher, std::FILE* log, RunProgress& prog,
                   Attempt& a) {
  const std::vector<std::string> argv = launch_command(o, launcher, a.resume, a.shaped ? &a.shape : nullptr);
  std::string shown;
  for (const auto& s : argv) shown += (shown.empty() ? "" : " ") + s;
  spdlog::info("launch: attempt {}: {}", a.n, shown);
  if (log) std::fprintf(log, "[launch] attempt %d: %s\n", a.n, shown.c_str()), std::fflush(log);
  a.started = now_s();
  prog.begin_attempt(a.n, a.resume_step, a.started);
  Job job;
  if (Status s = job.start(argv, log); !s) return s;
  size_t tail_seen = 0;
  double announced = -1;  // when the job said it is ending (smelt's hang, memory or disk message)
  while (job.poll(200)) {
    const double now = now_s();
    if (prog.read(now) && a.back_at < 0) a.back_at = now;
    if (g_stop) {
      a.stopped = true;
      break;
    }
    if (announced < 0 && job.tail().size() != tail_seen) {
      tail_seen = job.tail().size();
      const std::string c = failure_classify(1, 0, false, "", job.tail()).cause;
      if (c == "hang" || c == "memory" || c == "disk") announced = now;
    }
    // mpirun can wait minutes on a daemon it cannot reach (a host cut off) after a rank aborted
    if (announced >= 0 && now - announced > o.grace_s) {
      spdlog::warn("launch: the job named its failure {:.0f} s ago and has not exited: ending it", now - announced);
      break;
    }
    const bool first = prog.last_step() < 0;
    const double limit = first ? o.start_s : o.stall_s;
    if (limit > 0 && now - prog.last_step_time() > limit) {
      a.stalled = true;
      a.stall_detail = first ? fmt::format("no step line in metrics.jsonl {:.0f} s after the start", limit)
                             : fmt::format("no new step line in metrics.jsonl for {:.0f} s after step {}", limit,
                                           prog.last_step());
      spdlog::warn("launch: {}: ending the job", a.stall_detail);
      break;
    }
  }
  a.ended = now_s();
  a.last_progress = prog.last_step_time();
  job.stop(a.stopped ? std::max(o.grace_s, 60.0) : o.grace_s);  // a stop request: time to save
  if (prog.read(now_s()) && a.back_at < 0) a.back_at = now_s();
  a.failure = failure_classify(job.exit_code(), job.term_signal(), a.stalled, a.stall_detail, job.tail());
  return Status::ok();
}

ojson shape_hosts(const LaunchShape& s) {
  ojson h = ojson::object();
  for (const auto& [name, n] : s.hosts) h[name] = n;
  return h;
}

ojson attempt_json(const Attempt& a, const RunProgress& prog, double t0) {
  ojson j = {{"attempt", a.n},
             {"resumed_from_step", a.resume ? ojson(a.resume_step) : ojson(nullptr)},
             {"start_s", a.started - t0},
             {"end_s", a.ended - t0},
             {"last_step", prog.last_step() >= 0 ? ojson(prog.last_step()) : ojson(nullptr)},
             {"exit_code", a.failure.exit_code},
             {"cause", a.failure.cause.empty() ? ojson(nullptr) : ojson(a.failure.cause)}};
  if (!a.failure.detail.empty()) j["detail"] = a.failure.detail;
  if (a.shaped) j["ranks"] = a.shape.ranks, j["hosts"] = shape_hosts(a.shape);
  return j;
}

// The restart event (metrics.jsonl) for a failed attempt resumed from `to`.
ojson restart_event(const Attempt& a, const RunProgress& prog, const Newest& to, int restart, double backoff) {
  const Failure& f = a.failure;
  const int64_t failed_at = prog.last_step() >= 0 ? prog.last_step() : a.resume_step;
  // Lost: from reaching the step resumed from (or, when the job saved past what it had done before
  // it stopped, from its last progress) to the failure being seen.
  const double resumed_seen = prog.seen_at(to.step);
  const double from = std::min(resumed_seen >= 0 && resumed_seen >= a.started ? resumed_seen : a.started, a.last_progress);
  ojson e = {{"step", to.found ? to.step : 0},
             {"event", "restart"},
             {"restart", restart},
             {"cause", f.cause},
             {"rank", f.rank >= 0 ? ojson(f.rank) : ojson(nullptr)},
             {"host", f.host.empty() ? ojson(nullptr) : ojson(f.host)},
             {"exit_code", f.exit_code},
             {"signal", f.signal},
             {"failed_at_step", failed_at},
             {"steps_lost", std::max<int64_t>(0, failed_at - (to.found ? to.step : 0))},
             // the work after the checkpoint that is done again, and the wait for the failure to show
             {"lost_s", a.ended - from},
             {"backoff_s", backoff},
             {"checkpoint", to.found ? ojson(to.dir) : ojson(nullptr)},
             {"detail", f.detail},
             {"time", unix_now()}};
  if (!to.skipped.empty()) e["skipped_checkpoints"] = to.skipped;
  return e;
}

// After a stop request (SIGTERM from the scheduler): the ranks got SIGTERM, each saves at the end of
// its step and exits. Saved when the newest valid checkpoint is at or past the last step seen.
void stopped_outcome(const LaunchOptions& o, const RunProgress& prog, std::string& outcome, int& exit_code) {
  Newest n;
  if (Status s = newest_valid(o, n); !s) spdlog::warn("launch: {}", s.message());
  const bool saved = n.found && n.step >= prog.last_step();
  outcome = saved ? fmt::format("stopped (saved at step {})", n.step)
                  : fmt::format("stopped (not saved: the newest valid checkpoint is {} and step {} was reached)",
                                n.found ? fmt::format("step {}", n.step) : std::string("none"), prog.last_step());
  exit_code = saved ? 0 : 1;
  spdlog::info("launch: {}", outcome);
}

}  // namespace

void launch_request_stop() { g_stop = true; }

std::string launch_pick_launcher(const LaunchOptions& o) {
  if (o.launcher != "auto") return o.launcher;
  if (const char* j = std::getenv("SLURM_JOB_ID"); j && *j) return "srun";
  return o.np > 1 ? "mpirun" : "direct";
}

std::vector<std::string> launch_command(const LaunchOptions& o, const std::string& launcher, bool resume,
                                        const LaunchShape* shape) {
  const int np = shape ? shape->ranks : o.np;
  std::string placed;  // a:2,b:2 (mpirun) or a,b (srun)
  if (shape)
    for (const auto& [host, n] : shape->hosts)
      placed += (placed.empty() ? "" : ",") + (launcher == "srun" ? host : fmt::format("{}:{}", host, n));
  std::vector<std::string> argv;
  if (launcher == "mpirun") {
    argv = {"mpirun", "-np", std::to_string(np)};
    if (shape) argv.insert(argv.end(), {"--host", placed});
  } else if (launcher == "srun") {
    // --kill-on-bad-exit: a rank that fails ends the step at once (as mpirun does)
    argv = {"srun", "--ntasks", std::to_string(np), "--kill-on-bad-exit=1"};
    if (shape) argv.push_back("--nodelist=" + placed);
  }
  argv.insert(argv.end(), o.launcher_args.begin(), o.launcher_args.end());
  argv.insert(argv.end(), o.command.begin(), o.command.end());
  if (shape && shape->changed)  // fewer data-parallel ranks: the same global batch, more micro-batches
    argv.insert(argv.end(), {"--set", fmt::format("data.batch_size={}", shape->batch_size), "--set",
                             fmt::format("train.grad_accum={}", shape->grad_accum)});
  if (resume && !has_arg(o.command, "--resume")) argv.push_back("--resume");
  return argv;
}

namespace {

// One supervised run: the attempts, the restarts between them, and the summary at the end.
class Supervisor {
 public:
  explicit Supervisor(const LaunchOptions& o)
      : o_(o), launcher_(launch_pick_launcher(o)),
        metrics_((fs::path(o.run_dir) / "metrics.jsonl").string()), prog_(metrics_) {}
  ~Supervisor() {
    if (log_) std::fclose(log_);
  }
  Status run(LaunchResult& out);

 private:
  // After attempt a ended: true when the run is over (outcome and exit code set).
  bool over(const Attempt& a, int restart, std::string& outcome, int& exit_code);
  // The wait, the next attempt's hosts, the checkpoint to resume from, the restart event. An error:
  // too few ranks are left to go on.
  Status restart_after(const Attempt& a, int restart, Attempt& next);
  // --hosts: the hosts probed and the shape of the next attempt.
  Status place(Attempt& a);
  void finish(const Attempt& last, const std::string& outcome, LaunchResult& out);

  const LaunchOptions& o_;
  const std::string launcher_, metrics_;
  RunProgress prog_;
  LaunchFleet fleet_;
  std::FILE* log_ = nullptr;
  double t0_ = now_s();
  ojson attempts_ = ojson::array(), restarts_ = ojson::array();
};

Status Supervisor::run(LaunchResult& out) {
  std::error_code ec;
  fs::create_directories(o_.run_dir, ec);
  log_ = std::fopen((fs::path(o_.run_dir) / "launch.log").c_str(), "a");
  Attempt a;
  a.resume = has_arg(o_.command, "--resume");
  if (a.resume) {
    Newest n;
    if (Status s = newest_valid(o_, n); !s) return s;
    a.resume_step = n.found ? n.step : 0;
  }
  if (!o_.hosts.empty()) {
    if (Status s = fleet_.open(o_, launcher_); !s) return s;
    if (Status s = place(a); !s) return s;
  }
  std::string outcome;
  for (int restart = 0;; restart++) {
    if (Status s = run_attempt(o_, launcher_, log_, prog_, a); !s) return s;
    if (a.shaped && !a.failure.cause.empty() && !a.stopped && !g_stop)
      if (const std::string h = fleet_.failed(a.failure, a.shape); !h.empty())
        spdlog::warn("launch: host {} dropped ({})", h, fleet_.down_json().back().value("why", ""));
    attempts_.push_back(attempt_json(a, prog_, t0_));
    if (restart > 0 && a.back_at >= 0) {  // the restart before this attempt: when training was back
      ojson& r = restarts_.back();
      r["back_training_s"] = a.back_at - (t0_ + r["detected_s"].get<double>());
      r["back_time"] = unix_now() - (now_s() - a.back_at);
    }
    if (over(a, restart, outcome, out.exit_code)) break;
    Attempt next;
    if (Status s = restart_after(a, restart, next); !s) {
      outcome = "gave up: " + s.message();
      spdlog::error("launch: {}", outcome);
      break;
    }
    a = next;
  }
  finish(a, outcome, out);
  return Status::ok();
}

bool Supervisor::over(const Attempt& a, int restart, std::string& outcome, int& exit_code) {
  const Failure& f = a.failure;
  exit_code = f.cause.empty() ? 0 : (f.exit_code > 0 ? f.exit_code : 1);
  if (a.stopped || g_stop) {  // mpirun exits non-zero on SIGTERM: what counts is the save
    stopped_outcome(o_, prog_, outcome, exit_code);
    return true;
  }
  if (f.cause.empty()) {
    outcome = "completed";
    return true;
  }
  spdlog::warn("launch: attempt {} failed: {}{}{}: {}", a.n, f.cause, f.rank >= 0 ? fmt::format(", rank {}", f.rank) : "",
               f.host.empty() ? "" : ", host " + f.host, f.detail);
  if (f.cause == "usage") outcome = "gave up: the command is wrong (exit code 2)";
  else if (restart >= o_.max_restarts) outcome = fmt::format("gave up after {} restarts", restart);
  return !outcome.empty();
}

Status Supervisor::place(Attempt& a) {
  std::vector<std::string> notes;
  Status s = fleet_.plan(a.shape, notes);
  for (const auto& n : notes) spdlog::warn("launch: {}", n);
  if (!s) return s;
  a.shaped = true;
  if (a.shape.changed)
    spdlog::warn("launch: attempt {} runs {} of {} ranks: data.batch_size {} x train.grad_accum {} (the same global batch)",
                 a.n, a.shape.ranks, o_.np, a.shape.batch_size, a.shape.grad_accum);
  return Status::ok();
}

Status Supervisor::restart_after(const Attempt& a, int restart, Attempt& next) {
  const double backoff = std::min(o_.backoff_max_s, o_.backoff_s * std::pow(2.0, restart));
  spdlog::info("launch: restart {} of at most {} in {:.1f} s", restart + 1, o_.max_restarts, backoff);
  nap(backoff);
  next = Attempt{};
  next.n = a.n + 1, next.resume = true;
  if (a.shaped)
    if (Status s = place(next); !s) return s;
  Newest to;
  for (int tries = 1;; tries++) {  // (a listing can meet a folder that goes away under it)
    Status s = newest_valid(o_, to);
    if (s) break;
    spdlog::warn("launch: {}", s.message());
    if (tries == 3) break;
    nap(1.0);
  }
  for (const auto& k : to.skipped) spdlog::warn("launch: not valid, passed over: {}", k);
  ojson ev = restart_event(a, prog_, to, restart + 1, backoff);
  if (next.shaped) {
    ev["ranks"] = next.shape.ranks, ev["hosts"] = shape_hosts(next.shape), ev["hosts_down"] = fleet_.down_json();
    if (next.shape.changed) ev["batch_size"] = next.shape.batch_size, ev["grad_accum"] = next.shape.grad_accum;
  }
  if (Status s = append_line(metrics_, ev); !s) spdlog::warn("launch: {}", s.message());
  ev["detected_s"] = a.ended - t0_;  // (launch.json only: seconds from the launch, and the Unix time)
  ev["detected_time"] = unix_now() - (now_s() - a.ended);
  restarts_.push_back(ev);
  next.resume_step = to.found ? to.step : 0;
  return Status::ok();
}

void Supervisor::finish(const Attempt& last, const std::string& outcome, LaunchResult& out) {
  const double wall = now_s() - t0_, kept = prog_.kept_seconds();
  const double goodput = wall > 0 ? kept / wall : 0.0;
  const ojson end = {{"step", prog_.last_step() >= 0 ? prog_.last_step() : last.resume_step},
                     {"event", "launch_end"},
                     {"outcome", outcome},
                     {"restarts", (int)restarts_.size()},
                     {"wall_s", wall},
                     {"kept_s", kept},
                     {"goodput", goodput},
                     {"time", unix_now()}};
  if (Status s = append_line(metrics_, end); !s) spdlog::warn("launch: {}", s.message());
  out.json = {{"run_dir", o_.run_dir}, {"launcher", launcher_}, {"ranks", o_.np}, {"outcome", outcome},
              {"exit_code", out.exit_code}, {"restarts", restarts_}, {"attempts", attempts_},
              {"wall_s", wall}, {"kept_s", kept}, {"goodput", goodput}};
  if (Status s = files_write_atomic((fs::path(o_.run_dir) / "launch.json").string(), out.json.dump(2) + "\n"); !s)
    spdlog::warn("launch: {}", s.message());
  out.text = fmt::format("launch: {} after {} attempt(s), {} restart(s); {:.1f} s wall, {:.1f} s on steps kept: "
                         "goodput {:.3f} ({}/launch.json)\n",
                         outcome, attempts_.size(), restarts_.size(), wall, kept, goodput, o_.run_dir);
}

}  // namespace

Status launch_run(const LaunchOptions& o, LaunchResult& out) {
  job_adopt_orphans();  // a rank whose mpirun died is still ours to end
  Supervisor sup(o);
  return sup.run(out);
}

}  // namespace smelt
