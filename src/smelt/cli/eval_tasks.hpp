// `smelt eval --tasks`: the flags cli_eval (eval_cmd.cpp) parses and hands to cli_eval_tasks
// (eval_tasks_cmd.cpp). Not the task maths (eval/run.hpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace smelt {

struct EvalTasksFlags {
  std::vector<std::string> tasks;  // task files or folders
  std::string checkpoint, gguf, tokenizer, output, samples;
  std::string dtype = "f32";
  int64_t limit = 0;
  int fewshot = -1;
  uint64_t seed = 1234;
  int threads = 0;
  bool no_prefix_reuse = false;
};

int cli_eval_tasks(EvalTasksFlags& f);

// `smelt eval --make-cloze SRC... --task-out STEM`: a cloze task (eval/cloze.hpp) from text files
// (one document each), JSONL files (each line's "text") or token shards (PREFIX with PREFIX.idx,
// decoded with --tokenizer).
struct EvalClozeFlags {
  std::vector<std::string> from;
  std::string out, tokenizer;
  int64_t items = 500;
  uint64_t seed = 1234;
};
int cli_eval_make_cloze(const EvalClozeFlags& f);

// `smelt eval --from-harness SAMPLES.jsonl --task-out STEM`: a task from lm-evaluation-harness's
// --log_samples file (eval/harness_samples.hpp).
int cli_eval_from_harness(const std::string& samples, const std::string& out);

}  // namespace smelt
