// The trainer's downstream tasks (task_eval.hpp).
#include "smelt/train/task_eval.hpp"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "smelt/eval/run.hpp"
#include "smelt/eval/scorer.hpp"
#include "smelt/tokenizer/tokenizer.hpp"
#include "smelt/train/train_config.hpp"

namespace smelt {

Status TaskEvaluator::init(const EvalOptions& e, const Tokenizer* tok, const ModelConfig& c) {
  tasks_.clear();
  if (e.tasks.empty()) return Status::ok();
  if (!tok || !tok->eod_id())
    return Status::error("[eval] tasks: the run's tokenizer has no end-of-document token, which starts every prompt");
  if (Status s = tasks_load(e.tasks, tasks_); !s) return s;
  tok_ = tok;
  cfg_ = c;
  limit_ = e.task_limit;
  fewshot_ = e.task_fewshot;
  for (const auto& t : tasks_)
    for (const auto& it : t.items) max_choices_ = std::max<int>(max_choices_, (int)it.choices.size());
  max_choices_ = std::min(max_choices_, 32);
  std::vector<std::string> names;
  for (const auto& t : tasks_) names.push_back(fmt::format("{} ({}, {} items)", t.name, t.metric, t.items.size()));
  spdlog::info("[eval] tasks at each evaluation: {}", fmt::join(names, ", "));
  return Status::ok();
}

ScorerOptions TaskEvaluator::options(int threads) const {
  ScorerOptions o;
  o.threads = threads;
  o.max_choices = max_choices_;
  return o;
}

int64_t TaskEvaluator::bytes(int threads) const { return active() ? scorer_bytes(cfg_, options(threads)) : 0; }

Status TaskEvaluator::run(const float* params, int threads, int64_t step, nlohmann::ordered_json& line, double& seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  Scorer sc;
  if (Status s = sc.init(cfg_, params, (int)tok_->vocab_size(), options(threads)); !s) return s;
  EvalRunOptions ro;
  ro.limit = limit_;
  ro.fewshot = fewshot_;
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  std::vector<std::string> said;
  for (const auto& t : tasks_) {
    TaskResult r;
    if (Status s = eval_task(sc, *tok_, t, ro, r); !s) return s;
    const MetricValue& m = r.metrics.front();
    out[r.name] = {{"metric", m.name}, {"value", m.value}, {"stderr", m.stderr_},
                   {"chance", r.chance >= 0 ? nlohmann::ordered_json(r.chance) : nlohmann::ordered_json(nullptr)},
                   {"items", r.items}};
    said.push_back(fmt::format("{} {} {:.4f} (+-{:.4f}{})", r.name, m.name, m.value, m.stderr_,
                               r.chance >= 0 ? fmt::format(", chance {:.2f}", r.chance) : std::string()));
  }
  line["tasks"] = out;
  seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  spdlog::info("tasks at step {}: {} ({:.1f} s)", step, fmt::join(said, "; "), seconds);
  return Status::ok();
}

}  // namespace smelt
