// Downstream tasks over a run (docs/eval.md): each task's headline metric across the evaluation
// lines of metrics.jsonl (their "tasks" field), first to last, its best, and whether the last fell
// behind the best by more than the noise. What `smelt health` prints under the vital signs. Not
// the scoring (eval/run.hpp) nor the charts (web/dashboard.js draws the same field).
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace smelt {

// An evaluation line carries "tasks": {"NAME": {"metric", "value", "stderr", "chance", "items"}}
// (chance null: no chance level). A task whose value is not a number is not counted that time.
struct TaskTrend {
  std::string name, metric;
  bool lower_is_better = false;   // bits_per_byte and the perplexities (task_metric_lower_is_better)
  double chance = NAN;            // NaN: none
  double first = NAN, last = NAN, last_stderr = NAN;  // last_stderr NaN: not given
  double best = NAN;              // the best value seen (by the metric's direction)
  int64_t first_step = -1, last_step = -1, best_step = -1;
  int64_t evaluations = 0, items = 0;  // items: of the last evaluation

  // The last value is worse than the best by more than 2 standard errors of the last (the loss
  // can fall while a task gets worse). False without a stderr.
  bool regressed() const;
  // "task NAME: acc_norm 0.2500 -> 0.4125 (+-0.035) over 3 evaluations, chance 0.25"
  std::string summary() const;
  // "task NAME: acc_norm 0.3000 at step 300 is below its best 0.4125 at step 200 by more than 2 stderr (2 x 0.030)"
  std::string warning() const;
  // {"metric", "first", "last", "last_stderr", "chance", "evaluations", "first_step", "last_step",
  //  "best", "best_step", "items", "lower_is_better", "regressed"}; NaN as null
  nlohmann::json to_json() const;
};

// Lower is better for bits_per_byte and any metric named *perplexity*; higher for the others
// (acc, acc_norm, exact_match, loglikelihood).
bool task_metric_lower_is_better(const std::string& metric);

// Follows the tasks over the lines fed, in file order.
class TaskTrends {
 public:
  void observe(const nlohmann::json& line);  // any line: those without "tasks" change nothing
  const std::vector<TaskTrend>& trends() const { return trends_; }  // in order of first appearance
  nlohmann::json to_json() const;  // {"NAME": TaskTrend::to_json(), ...}

 private:
  void observe_task(int64_t step, const std::string& name, const nlohmann::json& t);
  std::vector<TaskTrend> trends_;
};

}  // namespace smelt
