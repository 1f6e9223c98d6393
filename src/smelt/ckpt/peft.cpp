// PEFT adapter folders: written from a LoRA checkpoint, read back into a model's adapters.
#include "smelt/ckpt/peft.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/ckpt/safetensors.hpp"
#include "smelt/common/files.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace smelt {

namespace {

// "self_attn.q_proj" -> "q_proj": PEFT's target_modules name the module's last part.
std::string module_leaf(int t) {
  const std::string m = lora_module_name(t);
  return m.substr(m.rfind('.') + 1);
}

json adapter_config(const LoraConfig& l, const std::string& base) {
  json targets = json::array();
  for (int t = 0; t < kLoraTargets; t++)
    if (std::find(l.targets.begin(), l.targets.end(), lora_target_name(t)) != l.targets.end())
      targets.push_back(module_leaf(t));
  return {{"peft_type", "LORA"},          {"task_type", "CAUSAL_LM"},     {"base_model_name_or_path", base},
          {"r", l.rank},                  {"lora_alpha", l.alpha},        {"lora_dropout", l.dropout},
          {"target_modules", targets},    {"bias", "none"},               {"fan_in_fan_out", false},
          {"inference_mode", true},       {"init_lora_weights", true},    {"use_rslora", false},
          {"use_dora", false},            {"modules_to_save", nullptr},   {"layers_to_transform", nullptr},
          {"layers_pattern", nullptr},    {"rank_pattern", json::object()}, {"alpha_pattern", json::object()},
          {"revision", nullptr}};
}

}  // namespace

Status lora_checkpoint_load(const std::string& step_dir, const CkptManifest& m, const ModelConfig& c, LoraAdapters& a,
                            LoraState* state) {
  if (!m.state.contains("lora"))
    return Status::error(fmt::format("{}: not a LoRA run's checkpoint (its state has no \"lora\")", step_dir));
  LoraState ls;
  if (Status s = lora_state_parse(m.state["lora"], step_dir + "/manifest.json", ls); !s) return s;
  a.config = ls.config;
  a.layout = lora_layout(c, a.config);
  a.params.assign((size_t)a.layout.params.total, 0.0f);
  for (const auto& t : a.layout.params.tensors)
    if (Status s = ckpt_load_tensor(step_dir, m, t.name, a.params.data() + t.offset, t.size()); !s) return s;
  if (state) *state = ls;
  return Status::ok();
}

Status peft_load(const std::string& dir, const ModelConfig& c, LoraAdapters& a) {
  if (Status s = peft_read_config(dir, a.config); !s) return s;
  a.layout = lora_layout(c, a.config);
  a.params.assign((size_t)a.layout.params.total, 0.0f);
  return peft_read_adapters(dir, a.layout, a.params.data());
}

Status peft_export(const std::string& step_dir, const std::string& out_dir, const std::string& base) {
  CkptManifest m;
  if (Status s = ckpt_read_manifest(step_dir, m); !s) return s;
  if (!m.state.contains("lora"))
    return Status::error(fmt::format("{}: not a LoRA run's checkpoint (its state has no \"lora\"): --format peft "
                                     "writes adapters; export a whole model with --format hf or gguf", step_dir));
  ModelConfig cfg;
  if (Status s = ckpt_model_config(step_dir, m, cfg); !s) return s;
  LoraAdapters a;
  LoraState ls;
  if (Status s = lora_checkpoint_load(step_dir, m, cfg, a, &ls); !s) return s;
  const LoraConfig& l = a.config;
  const LoraLayout& lay = a.layout;
  const std::vector<float>& p = a.params;
  std::vector<SafetensorsTensor> ts;
  for (const auto& t : lay.params.tensors) {
    SafetensorsTensor x;
    x.name = t.name;
    x.shape = {t.rows, t.cols};
    ts.push_back(x);
  }
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return Status::error(fmt::format("{}: cannot create the folder: {}", out_dir, ec.message()));
  const std::string file = (fs::path(out_dir) / "adapter_model.safetensors").string(), tmp = file + ".tmp";
  SafetensorsWriter w;
  Status s = w.open(tmp, ts, {{"format", "pt"}});
  for (size_t i = 0; s && i < ts.size(); i++) s = w.write_next(p.data() + lay.params.tensors[i].offset);
  if (s) s = w.finish();
  if (s) {
    fs::rename(tmp, file, ec);
    if (ec) s = Status::error(fmt::format("{}: cannot rename into place: {}", file, ec.message()));
  }
  if (!s) {
    fs::remove(tmp, ec);
    return s;
  }
  const std::string named = base.empty() ? ls.base : base;
  return files_write_atomic((fs::path(out_dir) / "adapter_config.json").string(),
                            adapter_config(l, named).dump(2) + "\n");
}

Status peft_read_config(const std::string& dir, LoraConfig& l) {
  const std::string path = (fs::path(dir) / "adapter_config.json").string();
  std::string text;
  if (Status s = files_read_small(path, text); !s) return s;
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::error(fmt::format("{}: not a JSON object", path));
  auto refuse = [&](const std::string& why) { return Status::error(fmt::format("{}: {}", path, why)); };
  if (j.value("peft_type", std::string()) != "LORA")
    return refuse(fmt::format("peft_type {}: only LORA adapters are read", j.value("peft_type", json()).dump()));
  for (const char* flag : {"use_dora", "use_rslora", "fan_in_fan_out"})
    if (j.value(flag, false)) return refuse(fmt::format("{} = true is not supported (plain LoRA only)", flag));
  if (j.value("bias", std::string("none")) != "none") return refuse("bias: only \"none\" (no bias training) is supported");
  for (const char* key : {"layers_to_transform", "modules_to_save"})
    if (j.contains(key) && !j[key].is_null()) return refuse(fmt::format("{}: per-layer or extra modules are not supported", key));
  for (const char* key : {"rank_pattern", "alpha_pattern"})
    if (j.contains(key) && !j[key].is_null() && !j[key].empty()) return refuse(fmt::format("{}: per-module ranks are not supported", key));
  if (!j.contains("r") || !j["r"].is_number_integer()) return refuse("r: expected an integer rank");
  if (!j.contains("target_modules") || !j["target_modules"].is_array())
    return refuse("target_modules: expected a list of module names (q_proj, k_proj, ...)");
  l = LoraConfig{};
  l.rank = j["r"].get<int>();
  l.alpha = j.value("lora_alpha", 8.0);
  l.dropout = j.value("lora_dropout", 0.0);
  l.targets.clear();
  for (const auto& m : j["target_modules"]) {
    const std::string name = m.is_string() ? m.get<std::string>() : m.dump();
    int found = -1;
    for (int t = 0; t < kLoraTargets; t++)
      if (name == module_leaf(t)) found = t;
    if (found < 0)
      return refuse(fmt::format("target_modules: {} is not one of q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, "
                                "down_proj", name));
    l.targets.push_back(lora_target_name(found));
  }
  if (Status s = lora_config_validate(l); !s) return refuse(s.message());
  return Status::ok();
}

Status peft_read_adapters(const std::string& dir, const LoraLayout& lay, float* params) {
  const std::string path = (fs::path(dir) / "adapter_model.safetensors").string();
  SafetensorsReader r;
  if (Status s = r.open(path); !s) return s;
  std::set<std::string> wanted;
  for (const auto& t : lay.params.tensors) wanted.insert(t.name);
  for (const auto& t : r.tensors())
    if (!wanted.count(t.name))
      return Status::error(fmt::format("{}: tensor {} is not an adapter of this model and [lora] targets", path, t.name));
  for (const auto& t : lay.params.tensors) {
    const SafetensorsTensor* x = r.find(t.name);
    if (!x) return Status::error(fmt::format("{}: adapter {} is missing", path, t.name));
    if (x->dtype != "F32") return Status::error(fmt::format("{}: {} is {}; F32 expected", path, t.name, x->dtype));
    if (x->shape != std::vector<int64_t>{t.rows, t.cols})
      return Status::error(fmt::format("{}: {} has shape [{}], this model's is [{}, {}]", path, t.name,
                                       fmt::join(x->shape, ", "), t.rows, t.cols));
    if (Status s = r.read_at(x->begin, params + t.offset, x->bytes()); !s) return s;
  }
  return Status::ok();
}

}  // namespace smelt
