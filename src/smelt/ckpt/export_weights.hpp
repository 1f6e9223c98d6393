// The weights an export writes (export_hf.hpp, export_gguf.hpp): a whole model's checkpoint as it
// is, or a LoRA run's checkpoint merged (--merge-lora): the base it trained on, as its state
// records it (a checkpoint step folder or a Hugging Face folder), with each target's adapter
// merged in as PEFT's merge_and_unload does (W += alpha/rank * B A). Streamed one tensor at a time
// from a checkpoint base. Not the file formats, not the adapters' maths (model/lora.hpp).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/common/status.hpp"
#include "smelt/model/config.hpp"
#include "smelt/model/lora.hpp"
#include "smelt/model/params.hpp"

namespace smelt {

// A checkpoint to export: its step folder, and for a LoRA run's checkpoint whether its adapters
// are merged into their base (a LoRA checkpoint without it is refused: it holds no whole model).
struct ExportSource {
  std::string step_dir;
  bool merge_lora = false;
  ExportSource(std::string dir, bool merge = false) : step_dir(std::move(dir)), merge_lora(merge) {}
};

class ExportWeights {
 public:
  // Reads the manifest and config; for a merge, the adapters and the base's config, which must be
  // the checkpoint's model (errors name both folders).
  Status open(const ExportSource& src);
  const std::string& step_dir() const { return step_dir_; }
  const CkptManifest& manifest() const { return m_; }  // the checkpoint's (its state: the chat template)
  const ModelConfig& config() const { return c_; }
  bool merged() const { return lora_.on(); }
  const std::string& base() const { return base_; }  // merged: where the base weights come from
  const LoraAdapters& lora() const { return lora_; }
  // Tensor t of param_layout(config()), whole, into out (t.size() floats); merged when a target.
  Status read(const ParamTensor& t, float* out) const;
  // Every tensor of the base (unmerged; a whole model's checkpoint: its weights), param_layout order.
  Status read_base(std::vector<float>& params) const;

 private:
  Status read_base_tensor(const ParamTensor& t, float* out) const;
  std::string step_dir_, base_;
  CkptManifest m_, base_m_;
  ModelConfig c_;
  LoraAdapters lora_;
  std::vector<float> hf_base_;  // a Hugging Face base, read whole (param_layout order)
};

}  // namespace smelt
