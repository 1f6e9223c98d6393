// Downstream task files (docs/eval.md): a task is NAME.toml (its name, kind, metric, prompt
// delimiters, few-shot settings) beside NAME.jsonl (one item per line), with an optional few-shot
// split. Four kinds: multiple choice scored by log-likelihood, the log-likelihood of one
// continuation, generation scored by exact match, and plain documents (rolling perplexity).
// Loading checks every line and names the file, line and field of the first problem. Not the
// scoring (eval/scorer.hpp) nor the metrics (eval/metrics.hpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "smelt/common/status.hpp"

namespace smelt {

enum class TaskKind { kMultipleChoice, kLoglikelihood, kGenerate, kPerplexity };
const char* task_kind_name(TaskKind k);  // "multiple_choice", "loglikelihood", "generate", "perplexity"

// One line of a task's JSONL. Which fields are set depends on the kind:
//   multiple_choice: context, choices (>= 2), gold (index into choices)
//   loglikelihood:   context, continuation
//   generate:        context, answer, until (stop strings; the task's default when absent)
//   perplexity:      text
struct TaskItem {
  int64_t line = 0;  // 1-based line in its file
  std::string context, continuation, answer, text;
  std::vector<std::string> choices, until;
  int gold = -1;
};

// Exact-match normalisation of generate tasks, applied to both the answer and the generation (in
// this order): "strip" (outer whitespace), "lower" (ASCII letters), "collapse_spaces" (runs of
// whitespace to one space), "strip_punct" (ASCII punctuation removed), "first_line" (the text up
// to the first newline; applied first when listed).
struct TaskNormalise {
  bool strip = true, lower = false, collapse_spaces = false, strip_punct = false, first_line = false;
};

struct Task {
  std::string name;        // [task] name (default: the file's stem)
  std::string path;        // the items file
  std::string toml_path;   // "" when the kind was inferred from the items
  TaskKind kind = TaskKind::kMultipleChoice;
  std::string metric;      // the headline metric (default per kind: acc_norm, acc, exact_match, bits_per_byte)
  std::string description;           // text before the few-shot examples ("" none)
  std::string target_delimiter = " ";  // between a context and its choice / continuation / answer
  std::string fewshot_delimiter = "\n\n";  // between examples, and before the item itself
  int num_fewshot = 0;                // examples before each item (--fewshot overrides)
  std::string fewshot_path;           // the few-shot split ("" none: examples come from the items)
  std::vector<std::string> until = {"\n\n"};  // generate: default stop strings
  int max_gen_tokens = 64;            // generate: tokens at most
  TaskNormalise normalise;
  std::vector<TaskItem> items, fewshot;
};

// Loads one task from a .toml (its [task] table; the items from `data`, default the stem's .jsonl)
// or a .jsonl (the stem's .toml beside it when present, else the kind inferred from the first
// line's fields and every default). Every item is checked: errors name the file, the line and the
// field ("tasks/arc.jsonl line 12: field \"gold\": 4 is outside the 4 choices (0..3)").
Status task_load(const std::string& path, Task& out);
// Loads every task named: files as task_load, folders as each *.toml inside (sorted by name) and
// each .jsonl without a .toml beside it. Two tasks of one name are refused.
Status tasks_load(const std::vector<std::string>& paths, std::vector<Task>& out);

// The probability of guessing right: the mean of 1/choices over the items for multiple choice,
// -1 for the other kinds (no chance level).
double task_chance(const Task& t);

}  // namespace smelt
