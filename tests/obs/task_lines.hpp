// A run folder's metrics.jsonl with downstream tasks on its evaluation lines, made by hand so the
// right answer is plain: 30 step lines, evaluations at steps 10, 20 and 30 carrying two tasks.
// arc_easy (acc_norm, chance 0.25) goes 0.25 -> 0.4125 -> 0.30 (the last more than 2 stderr behind
// its best: a regression); wikitext (bits_per_byte, no chance) falls 2.5 -> 2.1 -> 1.9. Shared by
// the `smelt health` and browser tests.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace smelt::test {

inline nlohmann::json task_value(const char* metric, double value, double stderr_, nlohmann::json chance, int64_t items) {
  return {{"metric", metric}, {"value", value}, {"stderr", stderr_}, {"chance", chance}, {"items", items}};
}

// The tasks of the k-th evaluation (k = 0, 1, 2, then 3: one more, arc_easy back up to 0.45).
inline nlohmann::json task_field(int k) {
  const double arc[] = {0.25, 0.4125, 0.30, 0.45}, arc_se[] = {0.0306, 0.0348, 0.0324, 0.0352};
  const double wiki[] = {2.5, 2.1, 1.9, 1.85};
  return {{"arc_easy", task_value("acc_norm", arc[k], arc_se[k], 0.25, 200)},
          {"wikitext", task_value("bits_per_byte", wiki[k], 0.05, nullptr, 50)}};
}

// Step `s` of the run: a step line, with the evaluation and its tasks every 10 steps.
inline nlohmann::json task_run_line(int64_t s) {
  nlohmann::json j = {{"step", s}, {"loss", 5.0 - 0.05 * (double)s}, {"lr", 1e-3}, {"tokens", 64 * s}, {"step_ms", 20.0}};
  if (s % 10 == 0) {
    j["eval_loss"] = 5.1 - 0.05 * (double)s;
    j["tasks"] = task_field((int)(s / 10) - 1);
  }
  return j;
}

inline std::string task_run_metrics() {
  std::string out;
  for (int64_t s = 1; s <= 30; s++) out += task_run_line(s).dump() + "\n";
  return out;
}

}  // namespace smelt::test
