// Restart and launch_end events of metrics.jsonl summed for `smelt health`.
#include "smelt/obs/run_restarts.hpp"

#include <fmt/format.h>

namespace smelt {

void RunRestarts::observe(const nlohmann::json& line) {
  if (!line.is_object()) return;
  const std::string ev = line.value("event", std::string());
  auto num = [&](const char* k) { return line.contains(k) && line[k].is_number() ? line[k].get<double>() : NAN; };
  if (ev == "restart") {
    restarts++;
    by_cause[line.value("cause", std::string("unknown"))]++;
    if (line.contains("steps_lost") && line["steps_lost"].is_number_integer()) steps_lost += line["steps_lost"].get<int64_t>();
    if (std::isfinite(num("lost_s"))) lost_s += num("lost_s");
  } else if (ev == "launch_end") {
    ended = true;
    outcome = line.value("outcome", std::string());
    goodput = num("goodput"), wall_s = num("wall_s");
  }
}

std::string RunRestarts::summary() const {
  std::string causes;
  for (const auto& [c, n] : by_cause) causes += fmt::format("{}{} {}", causes.empty() ? "" : ", ", c, n);
  std::string out = fmt::format("restarts       {}", restarts);
  if (restarts > 0) out += fmt::format(" ({}): {} steps and {:.1f} s lost", causes, steps_lost, lost_s);
  if (ended && std::isfinite(goodput))
    out += fmt::format("; goodput {:.3f} of {:.1f} s{}", goodput, wall_s, outcome.empty() ? "" : " (" + outcome + ")");
  else if (!ended)
    out += "; the supervisor has not ended (goodput comes at its end)";
  return out;
}

nlohmann::json RunRestarts::to_json() const {
  auto or_null = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  return {{"restarts", restarts}, {"by_cause", by_cause}, {"steps_lost", steps_lost}, {"lost_s", lost_s},
          {"goodput", or_null(goodput)}, {"wall_s", or_null(wall_s)},
          {"outcome", ended ? nlohmann::json(outcome) : nlohmann::json(nullptr)}};
}

}  // namespace smelt
