// `smelt launch [--np N] [...] -- smelt train ... --run-dir DIR`: the training command supervised,
// restarted with --resume after a failure (docs/dist.md "Faults and restarts"). Not the loop
// itself (launch/supervisor.cpp).
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "smelt/cli/cli_parse.hpp"
#include "smelt/cli/commands.hpp"
#include "smelt/common/stop_signals.hpp"
#include "smelt/launch/hosts.hpp"
#include "smelt/launch/supervisor.hpp"

namespace smelt {

namespace {

// The command's --run-dir (as "--run-dir DIR" or "--run-dir=DIR"), or "".
std::string run_dir_of(const std::vector<std::string>& cmd) {
  for (size_t i = 0; i < cmd.size(); i++) {
    if (cmd[i] == "--run-dir" && i + 1 < cmd.size()) return cmd[i + 1];
    if (cmd[i].rfind("--run-dir=", 0) == 0) return cmd[i].substr(10);
  }
  return "";
}

// --hosts: --np defaults to the slots; --min-ranks needs --hosts and is at most --np.
Status hosts_options(LaunchOptions& o, bool np_given) {
  if (o.hosts.empty())
    return o.min_ranks > 0 ? Status::error("--min-ranks needs --hosts (the supervisor places the ranks)") : Status::ok();
  std::vector<LaunchHost> hosts;
  if (Status s = launch_hosts_parse(o.hosts, hosts); !s) return s;
  int slots = 0;
  for (const auto& h : hosts) slots += h.slots;
  if (!np_given) o.np = slots;
  if (o.np > slots) return Status::error(fmt::format("--np {}: the hosts have {} slots", o.np, slots));
  if (o.min_ranks > o.np) return Status::error(fmt::format("--min-ranks {} is more than --np {}", o.min_ranks, o.np));
  return Status::ok();
}

}  // namespace

int cli_launch(int argc, char** argv) {
  CLI::App app{"smelt launch: run a training command, restart it from its newest valid checkpoint when it fails "
               "(docs/dist.md \"Faults and restarts\")"};
  app.name("smelt launch");
  LaunchOptions o;
  std::string launcher_args;
  bool json_out = false;
  auto* np = app.add_option("--np", o.np, "ranks (mpirun -np, srun --ntasks; with --hosts, their slots by default)")
      ->check(CLI::PositiveNumber);
  app.add_option("--hosts", o.hosts, "HOST:SLOTS,...: the supervisor places the ranks, probes the hosts before each "
                 "attempt and leaves out one not reached or failed twice in a row");
  app.add_option("--min-ranks", o.min_ranks, "with --hosts: run on as few as this many ranks while hosts are down "
                 "(fewer data-parallel ranks, the same global batch); default --np")->check(CLI::PositiveNumber);
  app.add_option("--rejoin-after", o.rejoin_s, "with --hosts: seconds before a dropped host is probed again")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--probe-timeout", o.probe_s, "with --hosts: seconds a host has to run one `true` through the launcher")
      ->check(CLI::PositiveNumber);
  app.add_option("--launcher", o.launcher, "auto (srun inside a Slurm allocation, mpirun for --np > 1), mpirun, srun, direct")
      ->check(CLI::IsMember({"auto", "mpirun", "srun", "direct"}));
  app.add_option("--launcher-args", launcher_args, "words passed to mpirun/srun before the command (split at spaces)");
  app.add_option("--max-restarts", o.max_restarts, "restarts before giving up")->check(CLI::NonNegativeNumber);
  app.add_option("--backoff", o.backoff_s, "seconds before the first restart; doubled each restart")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--backoff-max", o.backoff_max_s, "the longest wait before a restart")->check(CLI::NonNegativeNumber);
  app.add_option("--stall-timeout", o.stall_s,
                 "seconds without a new metrics.jsonl step line before the job is taken as hung (0: never)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--start-timeout", o.start_s, "seconds to the first step line of an attempt (0: no limit)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--grace", o.grace_s, "seconds from SIGTERM to SIGKILL when a job is ended")->check(CLI::NonNegativeNumber);
  app.add_flag("--dry-run", o.dry_run, "print the first attempt's command and exit");
  app.add_flag("--json", json_out, "print launch.json on stdout at the end");
  app.add_option("command", o.command, "the rank command after --: smelt train ... --run-dir DIR")->required();
  if (int rc = cli_parse(app, argc, argv, "launch"); rc >= 0) return rc;
  std::istringstream words(launcher_args);
  for (std::string w; words >> w;) o.launcher_args.push_back(w);
  o.run_dir = run_dir_of(o.command);
  if (o.run_dir.empty()) {
    spdlog::error("the command needs --run-dir DIR: smelt launch watches DIR/metrics.jsonl and resumes from "
                  "DIR/checkpoints");
    return kExitUsage;
  }
  o.smelt = cli_self_exe();
  if (Status s = hosts_options(o, np->count() > 0); !s) {
    spdlog::error("{}", s.message());
    return kExitUsage;
  }
  const std::string launcher = launch_pick_launcher(o);
  if (launcher == "direct" && (o.np > 1 || !o.hosts.empty())) {
    spdlog::error("{} needs a launcher (mpirun or srun); direct runs one process",
                  o.hosts.empty() ? fmt::format("--np {}", o.np) : std::string("--hosts"));
    return kExitUsage;
  }
  if (o.dry_run) {  // (with --hosts: every host up, nothing probed)
    LaunchShape all;
    std::vector<LaunchHost> hosts;
    const bool placed = !o.hosts.empty() && launch_hosts_parse(o.hosts, hosts) &&
                        launch_shape(LaunchLayout{}, o.np, o.np, hosts, all);
    std::string shown;
    for (const auto& s : launch_command(o, launcher, false, placed ? &all : nullptr)) shown += (shown.empty() ? "" : " ") + s;
    std::printf("%s\n", shown.c_str());
    return kExitOk;
  }
  LaunchResult r;
  Status s;
  {
    StopSignals stop(launch_request_stop);
    s = launch_run(o, r);
  }
  if (!s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  std::fputs(r.text.c_str(), stderr);
  if (json_out) std::printf("%s\n", r.json.dump(2).c_str());
  return r.exit_code == 0 ? kExitOk : kExitFailure;
}

}  // namespace smelt
