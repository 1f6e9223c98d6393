// A supervised run's restarts, read from the "restart" and "launch_end" events `smelt launch`
// writes into metrics.jsonl: how many and why, the steps and time they lost, and the run's goodput.
// What `smelt health` prints under the vital signs and the dashboard marks on the loss chart. Not
// the supervisor (launch/supervisor.cpp).
#pragma once
#include <cmath>
#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace smelt {

struct RunRestarts {
  int64_t restarts = 0, steps_lost = 0;
  double lost_s = 0;
  std::map<std::string, int64_t> by_cause;  // [cause]
  bool ended = false;                       // a launch_end event came (the latest one counts)
  std::string outcome;
  double goodput = NAN, wall_s = NAN;

  // Takes a metrics line; lines that are not these events are ignored.
  void observe(const nlohmann::json& line);
  bool any() const { return restarts > 0 || ended; }
  // "restarts       3 (hang 1, killed 2): 25 steps and 41.2 s lost; goodput 0.871 of 312.0 s (completed)"
  std::string summary() const;
  // {"restarts", "by_cause", "steps_lost", "lost_s", "goodput", "wall_s", "outcome"}; NaN as null
  nlohmann::json to_json() const;
};

}  // namespace smelt
