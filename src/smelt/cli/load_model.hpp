// The model and tokenizer of the commands that run a trained model (generate, serve, eval --tasks):
// a checkpoint (a run folder: its newest valid step) with its tokenizer.json, or a GGUF file with
// its own tokenizer; --tokenizer replaces either's. A LoRA run's checkpoint (its adapters alone)
// runs as its base with the adapters unmerged beside it, as `serve --lora` runs a PEFT folder's.
// And the --kv-cache option generate and serve share. Not checkpoint io (ckpt/checkpoint.hpp).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "smelt/common/status.hpp"
#include "smelt/model/config.hpp"
#include "smelt/model/lora.hpp"
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
  std::vector<float> params;                 // a LoRA run's: its base's
  std::shared_ptr<const LoraAdapters> lora;  // adapters to run unmerged beside params (nullptr: none)
  std::string lora_source;                   // where they came from: the run's step folder or --lora DIR
};

// A checkpoint step folder's model: a whole model's weights; for a LoRA run's checkpoint, the
// weights of the base its state names (a step folder or a Hugging Face folder, which must be the
// model the adapters were trained on) and the adapters. step: the checkpoint's step.
Status cli_load_checkpoint(const std::string& step_dir, ModelConfig& cfg, std::vector<float>& params,
                           std::shared_ptr<const LoraAdapters>& lora, int64_t* step = nullptr);

// --lora DIR: a PEFT adapter folder for model c (named `model` in messages) into lora, which must
// be empty (a LoRA run's checkpoint brings its own adapters: refused).
Status cli_add_lora(const std::string& dir, const std::string& model, const ModelConfig& c,
                    std::shared_ptr<const LoraAdapters>& lora);

// gguf non-empty: that file; else ckpt. tok_path: --tokenizer ("" = the model's own; set to the
// checkpoint's tokenizer.json when that is used). lora_dir: a PEFT adapter folder to run beside the
// model (--lora; refused for a LoRA run's checkpoint, which brings its own).
Status cli_load_model(const std::string& ckpt, const std::string& gguf, std::string& tok_path, LoadedModel& m,
                      const std::string& lora_dir = "");

// --kv-cache as generate and serve offer it: the name of the cache's type (f32, f16 or bf16, for
// kv_format_parse), "" for the default that follows --dtype.
void cli_add_kv_cache_option(CLI::App& app, std::string& kv_cache);

}  // namespace smelt
