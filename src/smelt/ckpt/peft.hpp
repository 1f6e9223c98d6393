// LoRA adapters in Hugging Face PEFT's layout: a folder with adapter_config.json (peft_type LORA,
// r, lora_alpha, lora_dropout, target_modules, base_model_name_or_path, ...) and
// adapter_model.safetensors (F32; PEFT's tensor names,
// base_model.model.model.layers.L.self_attn.q_proj.lora_A.weight), which PEFT's
// PeftModel.from_pretrained and the tools built on it load. Writing from a LoRA run's checkpoint
// (smelt export --format peft) and reading back into a model's adapters ([lora] init). Not the
// adapters' maths (model/lora.hpp).
#pragma once
#include <string>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/common/status.hpp"
#include "smelt/model/config.hpp"
#include "smelt/model/lora.hpp"

namespace smelt {

// Writes OUT_DIR/adapter_config.json and OUT_DIR/adapter_model.safetensors from a LoRA run's
// checkpoint step folder (each file written beside and renamed into place). base: what
// base_model_name_or_path names (the checkpoint's recorded base when empty).
Status peft_export(const std::string& step_dir, const std::string& out_dir, const std::string& base = "");

// Reads DIR's adapter_config.json into `l` (rank, alpha, dropout, targets); unknown target modules,
// DoRA, rsLoRA, bias training and per-layer selections are refused, naming the key.
Status peft_read_config(const std::string& dir, LoraConfig& l);
// Reads DIR's adapter tensors into `params` laid out as `lay` (lora_layout of the model and
// `l`): every adapter of the layout must be there with its shape; an extra tensor is refused.
Status peft_read_adapters(const std::string& dir, const LoraLayout& lay, float* params);

// DIR's adapters for model c (peft_read_config, then peft_read_adapters into a's layout).
Status peft_load(const std::string& dir, const ModelConfig& c, LoraAdapters& a);
// A LoRA run's checkpoint (manifest m of step_dir, model c): its adapters, and what its state
// records (the base, the dropout counter) when `state` is given. Not a LoRA checkpoint: refused.
Status lora_checkpoint_load(const std::string& step_dir, const CkptManifest& m, const ModelConfig& c, LoraAdapters& a,
                            LoraState* state = nullptr);

}  // namespace smelt
