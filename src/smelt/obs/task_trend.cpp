// Downstream tasks over a run (task_trend.hpp): first, last and best of each task's headline
// metric across the evaluation lines, and the regression check against the last's standard error.
#include "smelt/obs/task_trend.hpp"

#include <cmath>

#include <fmt/format.h>

namespace smelt {

using json = nlohmann::json;

namespace {

double num_or_nan(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : NAN;
}

json num_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

}  // namespace

bool task_metric_lower_is_better(const std::string& metric) {
  return metric == "bits_per_byte" || metric.find("perplexity") != std::string::npos;
}

bool TaskTrend::regressed() const {
  if (evaluations < 2 || !std::isfinite(last_stderr) || !std::isfinite(best)) return false;
  const double behind = lower_is_better ? last - best : best - last;
  return behind > 2 * last_stderr;
}

std::string TaskTrend::summary() const {
  std::string s = fmt::format("task {}: {} {:.4f} -> {:.4f}", name, metric, first, last);
  if (std::isfinite(last_stderr)) s += fmt::format(" (+-{:.3f})", last_stderr);
  s += fmt::format(" over {} evaluation{}", evaluations, evaluations == 1 ? "" : "s");
  if (std::isfinite(chance)) s += fmt::format(", chance {:g}", chance);
  return s;
}

std::string TaskTrend::warning() const {
  return fmt::format("task {}: {} {:.4f} at step {} is {} its best {:.4f} at step {} by more than 2 stderr (2 x {:.3f})",
                     name, metric, last, last_step, lower_is_better ? "above" : "below", best, best_step, last_stderr);
}

json TaskTrend::to_json() const {
  return {{"metric", metric},         {"first", num_or_null(first)},   {"last", num_or_null(last)},
          {"last_stderr", num_or_null(last_stderr)}, {"chance", num_or_null(chance)},
          {"evaluations", evaluations}, {"first_step", first_step},    {"last_step", last_step},
          {"best", num_or_null(best)}, {"best_step", best_step},        {"items", items},
          {"lower_is_better", lower_is_better}, {"regressed", regressed()}};
}

void TaskTrends::observe(const json& line) {
  auto tasks = line.find("tasks");
  auto step = line.find("step");
  if (tasks == line.end() || !tasks->is_object() || step == line.end() || !step->is_number_integer()) return;
  for (const auto& [name, t] : tasks->items())
    if (t.is_object()) observe_task(step->get<int64_t>(), name, t);
}

void TaskTrends::observe_task(int64_t step, const std::string& name, const json& t) {
  const double v = num_or_nan(t, "value");
  if (!std::isfinite(v)) return;
  TaskTrend* tr = nullptr;
  for (auto& x : trends_)
    if (x.name == name) tr = &x;
  if (!tr) {
    tr = &trends_.emplace_back();
    tr->name = name;
  }
  if (auto m = t.find("metric"); m != t.end() && m->is_string()) tr->metric = m->get<std::string>();
  tr->lower_is_better = task_metric_lower_is_better(tr->metric);
  tr->chance = num_or_nan(t, "chance");
  if (tr->evaluations == 0) tr->first = v, tr->first_step = step;
  tr->last = v;
  tr->last_step = step;
  tr->last_stderr = num_or_nan(t, "stderr");
  const double items = num_or_nan(t, "items");
  tr->items = std::isfinite(items) ? (int64_t)items : 0;
  const bool better = tr->lower_is_better ? v < tr->best : v > tr->best;
  if (tr->evaluations == 0 || better) tr->best = v, tr->best_step = step;
  tr->evaluations++;
}

json TaskTrends::to_json() const {
  json j = json::object();
  for (const auto& t : trends_) j[t.name] = t.to_json();
  return j;
}

}  // namespace smelt
