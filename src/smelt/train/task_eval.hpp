// The trainer's downstream tasks ([eval] tasks, docs/eval.md): loaded once at set-up, scored at
// every evaluation point on the current weights through a decoder made for the occasion (its
// caches freed after), into the metrics line's "tasks" object. Not the held-out loss
// (evaluate.hpp), not the task maths (eval/run.hpp).
#pragma once
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "smelt/common/status.hpp"
#include "smelt/eval/scorer.hpp"
#include "smelt/eval/task.hpp"
#include "smelt/model/config.hpp"

namespace smelt {

class Tokenizer;
struct EvalOptions;

class TaskEvaluator {
 public:
  // Loads e.tasks (nothing to do when empty); tok must outlive the evaluator.
  Status init(const EvalOptions& e, const Tokenizer* tok, const ModelConfig& c);
  bool active() const { return !tasks_.empty(); }
  // Scores every task on params (layout param_layout(c), fp32, the whole model) and writes
  // line["tasks"][name] = {metric, value, stderr, chance, items}; seconds: the time it took.
  Status run(const float* params, int threads, int64_t step, nlohmann::ordered_json& line, double& seconds);
  // The bytes run holds while it scores (its scorer's decoder and logits; 0 when inactive), for
  // the run's memory plan.
  int64_t bytes(int threads) const;

 private:
  ScorerOptions options(int threads) const;
  std::vector<Task> tasks_;
  const Tokenizer* tok_ = nullptr;
  ModelConfig cfg_;
  int64_t limit_ = 0;
  int fewshot_ = -1;
  int max_choices_ = 2;
};

}  // namespace smelt
