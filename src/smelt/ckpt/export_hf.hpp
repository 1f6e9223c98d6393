// Export of a checkpoint to the Hugging Face Llama layout (docs/generate.md): model.safetensors
// (LlamaForCausalLM names and (out, in) shapes, F32), config.json and tokenizer.json, streamed one
// tensor at a time so peak memory stays near the largest tensor; the read-back for --check.
// Not the checkpoint format (checkpoint.hpp), not GGUF.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "smelt/ckpt/export_weights.hpp"
#include "smelt/common/status.hpp"
#include "smelt/model/config.hpp"

namespace smelt {

struct HfExportStats {
  int tensors = 0;
  int64_t bytes = 0;           // model.safetensors size
  int64_t largest_tensor = 0;  // bytes: the one buffer export holds
  bool tokenizer = false;      // tokenizer.json written
};

// The Hugging Face class that computes what c does: Qwen3ForCausalLM (qk_norm), Qwen2ForCausalLM
// (qkv_bias), else LlamaForCausalLM (head_dim and rope_scaling are Llama keys); "" for qk_norm with
// qkv_bias, which no class has.
const char* export_hf_architecture(const ModelConfig& c);
// config.json of that class for c; eos/bos ids when the tokenizer has an end-of-document
// token (eod_id < 0: none).
nlohmann::ordered_json export_hf_config(const ModelConfig& c, int64_t eod_id);

// src (a checkpoint, or a LoRA run's merged: export_weights.hpp) -> out_dir/{model.safetensors, config.json, tokenizer.json, tokenizer_config.json
// (PreTrainedTokenizerFast, the end-of-document token as eos/bos)}. tokenizer_path: the
// tokenizer to copy ("" = the checkpoint's tokenizer.json; none there: no tokenizer.json, a
// warning in the log). Each file is written beside its name and renamed into place, so a failure
// leaves no half-written file where a good one was. A tied head writes no lm_head.weight
// (tie_word_embeddings = true), as Hugging Face does.
Status export_hf(const ExportSource& src, const std::string& out_dir, const std::string& tokenizer_path,
                 HfExportStats* stats = nullptr);

// Reads an exported folder back through the import (import_hf_config with the context uncapped,
// import_hf_weights): config.json into c, the weights into a flat buffer in param_layout(c) order.
// Errors name the file, the field or tensor and what was expected.
Status export_hf_load(const std::string& out_dir, ModelConfig& c, std::vector<float>& params);

// The logits of one fixed batch (2 rows of up to 32 pseudo-random ids) under two parameter buffers
// of model c (the training forward): the largest |difference|, max(1, largest |logit| under pa),
// and whether either side gave a NaN. What every export's --check compares. a_lora: side a runs
// pa as the base of these adapters (unmerged), side b is a whole model (the merged export).
struct LogitsDiff {
  double max_abs = 0, scale = 1;
  bool nan = false;
};
Status export_logits_diff(const ModelConfig& c, const std::vector<float>& pa, const std::vector<float>& pb,
                          LogitsDiff& out, const LoraAdapters* a_lora = nullptr);
// How far a merged export's logits may be from the unmerged model's: max|diff| <= this * max(1,
// max|logit|) (W + s B A rounded to fp32 once against the two products summed in the forward).
constexpr double kLoraMergeTolerance = 1e-4;

// --check: the checkpoint's weights and the exported ones, read back, run one fixed batch (2 rows
// of up to 32 tokens) through Model; fails when config or logits differ. The export is a copy of
// the same fp32 values, so the logits must be bit-identical (max_abs_diff = 0); a merged export
// against the base with its adapters unmerged: within kLoraMergeTolerance.
Status export_hf_check(const ExportSource& src, const std::string& out_dir, double* max_abs_diff = nullptr);

}  // namespace smelt
