// Scoring a task on a model (docs/eval.md): each item's prompt (few-shot examples chosen by a
// seeded draw, then the context), its requests tokenized as lm-evaluation-harness splits them,
// the scorer's log-likelihoods or generations, and the task's metrics with their standard errors.
// Used by `smelt eval --tasks` and by the trainer's [eval] tasks. Not the task files
// (eval/task.hpp) nor the model (eval/scorer.hpp).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "smelt/common/status.hpp"
#include "smelt/eval/scorer.hpp"
#include "smelt/eval/task.hpp"

namespace smelt {

class Tokenizer;

struct EvalRunOptions {
  int64_t limit = 0;        // the first N items of each task (0: all)
  int fewshot = -1;         // examples per item (-1: the task's num_fewshot)
  uint64_t seed = 1234;     // the few-shot draw and the bootstrap
  int bootstrap = 1000;     // resamples for the standard errors of the perplexities
  bool samples = false;     // keep every item's record (TaskResult::samples)
};

struct MetricValue {
  std::string name;
  double value = 0;
  double stderr_ = 0;   // standard error (see docs/eval.md for how each is computed)
};

struct TaskResult {
  std::string name, kind, metric;  // metric: the headline one
  double chance = -1;              // multiple choice: mean of 1/choices; else -1
  int64_t items = 0, skipped = 0;  // scored, and left out (a continuation longer than the context)
  int fewshot = 0;
  std::vector<MetricValue> metrics;  // the headline metric first
  double seconds = 0;
  uint64_t rows = 0;                 // decoder rows run
  std::vector<nlohmann::json> samples;  // with EvalRunOptions::samples: one record per item
  const MetricValue* find(const std::string& name) const;
};

// The few-shot examples of item `index`: k distinct indices into the few-shot split (or, without
// one, into the items, never `index` itself), drawn by a generator seeded from seed, the task's
// name and index, so the prompt of an item does not depend on --limit or on the other items.
std::vector<size_t> eval_fewshot_draw(const Task& t, size_t index, int k, uint64_t seed);
// The item's prompt: description, the examples (each context + target_delimiter + its answer)
// joined by fewshot_delimiter, fewshot_delimiter, then the item's context.
std::string eval_prompt(const Task& t, size_t index, int k, uint64_t seed);
// As lm-evaluation-harness encodes a (context, continuation) pair: whitespace at the end of the
// context moves to the continuation, the pair is encoded whole and the context alone, and the
// continuation's ids are the whole's after the context's. The context's ids start with the
// end-of-document token (every training document follows one).
void eval_encode_pair(const Tokenizer& tok, const std::string& context, const std::string& continuation,
                      std::vector<int32_t>& ctx_ids, std::vector<int32_t>& cont_ids);

// Scores task t. progress (may be empty) is called after each item with (done, total).
Status eval_task(Scorer& sc, const Tokenizer& tok, const Task& t, const EvalRunOptions& o, TaskResult& r,
                 const std::function<void(int64_t, int64_t)>& progress = {});

// The exact-match normalisation of a generate task (task.hpp, TaskNormalise).
std::string eval_normalise(const std::string& s, const TaskNormalise& n);

nlohmann::json task_result_json(const TaskResult& r);

}  // namespace smelt
