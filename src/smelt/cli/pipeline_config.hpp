// `smelt pipeline`'s own sections of the pipeline config ([pipeline], [tokenizer], [tokenize],
// [generate]) and the token count it takes from [eval]: read and checked before any stage runs.
// Not the stages' sections (each stage reads those itself) nor the run (pipeline_cmd.cpp).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <toml++/toml.h>

#include "smelt/common/status.hpp"

namespace smelt {

// The stages in run order, as `[pipeline] stages` and `--from` name them.
extern const std::vector<std::string> kPipelineStages;

struct PipelineConfig {
  std::vector<std::string> inputs;  // [pipeline] raw input for prep
  std::string workdir = "data/pipeline";
  std::vector<std::string> stages = kPipelineStages;
  // [tokenizer]
  int64_t vocab_size = 16384;
  std::string pretokenizer = "llama3";
  std::string special_tokens = "<|endoftext|>";
  int64_t tokenizer_memory_mb = 0;
  // [tokenize]
  double holdout = 0.01;
  // language -> blend weight: one training shard per language, read in these proportions (rows);
  // empty: one shard of every document, read as it comes
  std::vector<std::pair<std::string, double>> language_weights;
  // [eval] (the trainer's section; the eval stage reads its token count)
  int64_t eval_tokens = 65536;
  // [generate]: each prompt continued greedily and sampled; after reading, prompt (when given) is
  // the first of prompts, and "The" the only one when neither key is given
  std::string prompt;
  std::vector<std::string> prompts;
  int64_t max_new_tokens = 64;
  double temperature = 0.8;
  int64_t top_k = 40;
  double repeat_penalty = 1.0, frequency_penalty = 0.0, presence_penalty = 0.0;
  uint64_t seed = 1;
};

// Reads and checks the pipeline's sections of root (the config with its --set overrides) through
// their field tables; every error, one per line.
Status pipeline_config_read(const toml::table& root, PipelineConfig& c);

// The field tables' docs: [pipeline], [tokenizer], [tokenize], [generate] (config_docs_test).
struct SectionDoc;
std::vector<SectionDoc> pipeline_config_docs();

}  // namespace smelt
