// The model and tokenizer of the commands that run a trained model (generate, eval --tasks): a
// checkpoint (a run folder: its newest valid step) with its tokenizer.json, or a GGUF file with
// its own tokenizer; --tokenizer replaces either's; and the --kv-cache option generate and serve
// share. Not checkpoint io (ckpt/checkpoint.hpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "smelt/common/status.hpp"
#include "smelt/model/config.hpp"
#include "smelt/tokenizer/tokenizer.hpp"

namespace CLI {
class App;
}

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

// --kv-cache as generate and serve offer it: the name of the cache's type (f32, f16 or bf16, for
// kv_format_parse), "" for the default that follows --dtype.
void cli_add_kv_cache_option(CLI::App& app, std::string& kv_cache);

}  // namespace smelt
