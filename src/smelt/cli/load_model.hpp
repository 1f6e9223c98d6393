// The model and tokenizer of the commands that run a trained model (generate, eval --tasks): a
// checkpoint (a run folder: its newest valid step) with its tokenizer.json, or a GGUF file with
// its own tokenizer; --tokenizer replaces either's. Not checkpoint io (ckpt/checkpoint.hpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "smelt/common/status.hpp"
#include "smelt/model/config.hpp"
#include "smelt/tokenizer/tokenizer.hpp"

namespace smelt {

struct LoadedModel {
  std::string source;  // the step directory, or the GGUF file
  int64_t step = -1;   // the checkpoint's step (-1 for a GGUF file)
  Tokenizer tok;
  ModelConfig cfg;
  std::vector<float> params;
};

// gguf non-empty: that file; else ckpt. tok_path: --tokenizer ("" = the model's own; set to the
// checkpoint's tokenizer.json when that is used).
Status cli_load_model(const std::string& ckpt, const std::string& gguf, std::string& tok_path, LoadedModel& m);

}  // namespace smelt
