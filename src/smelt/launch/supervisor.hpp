// `smelt launch`: runs a training command under mpirun (or srun inside a Slurm allocation, or
// alone), watches it, and when it fails ends what is left of it and starts it again with --resume
// from the newest valid checkpoint, up to a number of restarts with a back-off; each restart is an
// event in the run's metrics.jsonl and the run ends with its goodput. Not the trainer (which
// resumes bit-exactly on its own) nor the checkpoint checks (`smelt ckpt list`).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "smelt/common/status.hpp"

namespace smelt {

struct LaunchOptions {
  std::vector<std::string> command;   // the rank command: smelt train ... --run-dir DIR
  std::string run_dir;                // from the command's --run-dir
  std::string launcher = "auto";      // auto | mpirun | srun | direct
  int np = 1;                         // ranks (mpirun -np / srun --ntasks)
  std::vector<std::string> launcher_args;  // passed to mpirun/srun before the command
  int max_restarts = 10;
  double backoff_s = 5, backoff_max_s = 300;  // the wait before restart k: backoff_s * 2^(k-1), capped
  double stall_s = 600;     // no new metrics line for this long (after the first): the job is hung
  double start_s = 1800;    // ... nor a first one this long after a start (setup, data, resume)
  double grace_s = 30;      // SIGTERM to SIGKILL when the supervisor ends a job
  std::string smelt;        // this binary, for `smelt ckpt list`
  bool dry_run = false;     // print the first attempt's command and exit
  // --hosts "a:2,b:2": the supervisor places the ranks (mpirun --host / srun --nodelist), probes the
  // hosts before each attempt, drops one that is not reached or failed twice in a row, and with
  // min_ranks < np runs on fewer data-parallel ranks (the global batch kept) until it is back.
  std::string hosts;
  int min_ranks = 0;        // 0: np (no shrinking)
  double rejoin_s = 300;    // a dropped host is probed again this long after it was dropped
  double probe_s = 30;      // a probe (one `true` through the launcher) not done by then: host down
};

struct LaunchShape;

struct LaunchResult {
  int exit_code = 1;          // the last attempt's: 0 when the run completed
  nlohmann::ordered_json json;  // RUN/launch.json: attempts, restarts, goodput
  std::string text;           // the summary for people
};

// The command an attempt runs (the launcher's words, then the rank command, + --resume on a restart).
// With a shape (--hosts): its rank count, hosts and batch split.
std::vector<std::string> launch_command(const LaunchOptions& o, const std::string& launcher, bool resume,
                                        const LaunchShape* shape = nullptr);
// auto -> srun inside a Slurm allocation (SLURM_JOB_ID), mpirun for more than one rank, else direct.
std::string launch_pick_launcher(const LaunchOptions& o);
// Supervises until the run completes, the restarts run out, or a failure no restart mends.
Status launch_run(const LaunchOptions& o, LaunchResult& out);
// SIGINT/SIGTERM to the supervisor: the job gets SIGTERM (it saves and exits) and no restart follows.
void launch_request_stop();

}  // namespace smelt
