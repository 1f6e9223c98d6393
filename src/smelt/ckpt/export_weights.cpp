// Export weights: a checkpoint's tensors, or a LoRA run's base with its adapters merged.
#include "smelt/ckpt/export_weights.hpp"

#include <filesystem>
#include <limits>

#include <fmt/format.h>

#include "smelt/ckpt/import_hf.hpp"
#include "smelt/ckpt/peft.hpp"

namespace fs = std::filesystem;

namespace smelt {

namespace {
// The base's model config: a checkpoint's [model] or a Hugging Face folder's config.json.
Status base_config(const std::string& base, CkptManifest& bm, ModelConfig& bc, bool& hf) {
  std::error_code ec;
  hf = fs::exists(fs::path(base) / "config.json", ec);
  if (hf) {
    HfModelInfo info;
    if (Status s = import_hf_config(base, std::numeric_limits<int>::max(), info); !s) return s;
    bc = info.config;
    return Status::ok();
  }
  if (Status s = ckpt_read_manifest(base, bm); !s) return s;
  return ckpt_model_config(base, bm, bc);
}
}  // namespace

Status ExportWeights::open(const ExportSource& src) {
  step_dir_ = src.step_dir;
  if (Status s = ckpt_read_manifest(step_dir_, m_); !s) return s;
  if (Status s = ckpt_model_config(step_dir_, m_, c_); !s) return s;
  const bool is_lora = m_.state.contains("lora");
  if (!is_lora) {
    if (src.merge_lora)
      return Status::error(fmt::format("--merge-lora: {} is not a LoRA run's checkpoint (its state has no \"lora\"); "
                                       "it holds the whole model: export it without --merge-lora", step_dir_));
    base_ = step_dir_, base_m_ = m_;
    return Status::ok();
  }
  LoraState ls;
  if (Status s = lora_checkpoint_load(step_dir_, m_, c_, lora_, &ls); !s) return s;
  if (!src.merge_lora)
    return Status::error(fmt::format("{}: a LoRA run's checkpoint holds adapters, not a model (its base is {}): "
                                     "export them with --format peft, or the merged model with --merge-lora",
                                     step_dir_, ls.base));
  base_ = ls.base;
  ModelConfig bc;
  bool hf = false;
  if (Status s = base_config(base_, base_m_, bc, hf); !s)
    return Status::error(fmt::format("the base {} that {} trained on: {}", base_, step_dir_, s.message()));
  bc.max_seq_len = c_.max_seq_len;  // the context is the run's (a table's size, not the weights)
  if (!model_config_same(bc, c_))
    return Status::error(fmt::format("the base {} is not the model {} trained its adapters on (their [model] "
                                     "sections differ)", base_, step_dir_));
  if (hf) {
    ModelConfig hc = c_;
    if (Status s = import_hf_weights(base_, hc, hf_base_); !s) return s;
  }
  return Status::ok();
}

Status ExportWeights::read_base_tensor(const ParamTensor& t, float* out) const {
  if (!hf_base_.empty()) {
    std::copy(hf_base_.begin() + t.offset, hf_base_.begin() + t.offset + t.size(), out);
    return Status::ok();
  }
  // whole or assembled from boxes; a missing or misshapen tensor fails here, naming it
  return ckpt_read_box(base_, base_m_, t.name, t.rows, t.cols, CkptBox{0, 0, t.rows, t.cols}, out);
}

Status ExportWeights::read(const ParamTensor& t, float* out) const {
  if (Status s = read_base_tensor(t, out); !s) return s;
  int layer = 0, target = 0;
  if (lora_target_of(lora_, t.name, layer, target)) lora_merge_into(lora_, layer, target, out);
  return Status::ok();
}

Status ExportWeights::read_base(std::vector<float>& params) const {
  const ParamLayout layout = param_layout(c_);
  params.assign((size_t)layout.total, 0.0f);
  for (const auto& t : layout.tensors)
    if (Status s = read_base_tensor(t, params.data() + t.offset); !s) return s;
  return Status::ok();
}

}  // namespace smelt
