// `smelt health RUN...`: each run's vital signs (obs/vitals.hpp) as a table or JSON; exit 1 when a
// sign is bad, so cron or CI can act on it. Not the bands themselves (vitals.cpp).
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "smelt/cli/cli_parse.hpp"
#include "smelt/cli/commands.hpp"
#include "smelt/obs/vitals.hpp"

namespace smelt {

int cli_health(int argc, char** argv) {
  CLI::App app{"The vital signs of training runs: data fetch, data wait, all-reduce wait and spread, checkpoint "
               "write rate, gradient-norm ratio, token entropy, attention sparsity, loss spikes. Each is judged "
               "against [health.vitals] in RUN/config.toml. Exit 0: none bad; 1: a sign is bad or a run cannot be "
               "read; 2: usage.",
               "smelt health"};
  std::vector<std::string> runs;
  bool as_json = false;
  int64_t last = 0, from_step = -1;
  app.add_option("runs", runs, "run folders (each with metrics.jsonl)")->required();
  app.add_flag("--json", as_json, "one JSON object per run, one per line");
  app.add_option("--last", last, "judge only the last N steps of each run")->check(CLI::PositiveNumber);
  app.add_option("--from-step", from_step, "judge only steps after this one")->check(CLI::NonNegativeNumber);
  if (int rc = cli_parse(app, argc, argv, "health", "warn"); rc >= 0) return rc;
  if (last > 0 && from_step >= 0) {
    std::fprintf(stderr, "smelt health: give --last or --from-step, not both\n");
    return kExitUsage;
  }
  int rc = kExitOk;
  for (const std::string& run : runs) {
    VitalsReport r;
    Status s = vitals_check_run(run, r, from_step);
    if (s && last > 0) s = vitals_check_run(run, r, r.last_step - last);  // (the run's end is known now)
    if (!s) {
      std::fprintf(stderr, "smelt health: %s\n", s.message().c_str());
      rc = kExitFailure;
      continue;
    }
    if (as_json) std::printf("%s\n", r.to_json().dump().c_str());
    else std::printf("%s", r.text().c_str());
    if (r.state == "bad") rc = kExitFailure;
  }
  return rc;
}

}  // namespace smelt
