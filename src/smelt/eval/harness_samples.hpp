// Tasks from lm-evaluation-harness's sample files (`lm_eval ... --log_samples` writes one JSONL
// line per document: "doc_id", "doc", "target", "arguments", "resps", ...; docs/eval.md). The
// requests the harness built are kept as they are: its prompts (few-shot examples included), its
// continuations and its stop strings, so Smelt scores the same texts. "arguments" is read in both
// shapes the harness has written: {"gen_args_0": {"arg_0": ..., "arg_1": ...}, ...} and
// [[arg_0, arg_1], ...]. Not a reader of the harness's data sets or YAML.
#pragma once
#include <string>

#include "smelt/common/status.hpp"
#include "smelt/eval/task.hpp"

namespace smelt {

// Reads a samples file into t (name, kind, items, target_delimiter; num_fewshot 0: the prompts
// already hold the examples). The kind comes from the first line: two or more (context,
// continuation) requests = multiple_choice (gold = "target": an index, or the text of a choice);
// one = loglikelihood; arg_1 an object ({"until": [...]}) = generate (answer = "target"); arg_0
// alone = perplexity. Every line must be of that kind; errors name the file, the line and the field.
Status harness_samples_read(const std::string& path, Task& t);
// Writes STEM.jsonl (the items in Smelt's task format) and STEM.toml ([task] name, kind, metric,
// delimiters, until), each atomically.
Status task_write(const std::string& stem, const Task& t);

}  // namespace smelt
