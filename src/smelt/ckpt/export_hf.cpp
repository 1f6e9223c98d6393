// Hugging Face Llama export: our parameter names already are LlamaForCausalLM's and our weights
// are nn.Linear (out, in); RoPE uses the same rotate_half pairing (i <-> i + HS/2) as HF's
// apply_rotary_pos_emb, so q_proj/k_proj are copied without the row permutation that converting
// Meta's interleaved-pair checkpoints needs. Not the safetensors format itself (safetensors.cpp).
#include "smelt/ckpt/export_hf.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/ckpt/import_hf.hpp"
#include "smelt/ckpt/safetensors.hpp"
#include "smelt/common/files.hpp"
#include "smelt/model/model.hpp"
#include "smelt/model/params.hpp"
#include "smelt/tokenizer/chat_state.hpp"
#include "smelt/tokenizer/tokenizer.hpp"

namespace fs = std::filesystem;

namespace smelt {

namespace {
std::vector<int64_t> shape_of(const ParamTensor& t) {
  return t.cols == 1 ? std::vector<int64_t>{t.rows} : std::vector<int64_t>{t.rows, t.cols};
}
}  // namespace

const char* export_hf_architecture(const ModelConfig& c) {
  if (c.qk_norm) return c.qkv_bias ? "" : "Qwen3ForCausalLM";
  if (c.qkv_bias) return "Qwen2ForCausalLM";
  return "LlamaForCausalLM";
}

namespace {
nlohmann::ordered_json rope_scaling_json(const ModelConfig& c) {
  switch (c.rope_scaling) {
    case RopeScaling::kNone: return nullptr;
    case RopeScaling::kLinear: return {{"rope_type", "linear"}, {"factor", c.rope_factor}};
    case RopeScaling::kLlama3:
      return {{"rope_type", "llama3"},
              {"factor", c.rope_factor},
              {"low_freq_factor", c.rope_low_freq_factor},
              {"high_freq_factor", c.rope_high_freq_factor},
              {"original_max_position_embeddings", c.rope_original_max_seq_len}};
  }
  return nullptr;
}
}  // namespace

nlohmann::ordered_json export_hf_config(const ModelConfig& c, int64_t eod_id) {
  const std::string arch = export_hf_architecture(c);
  nlohmann::ordered_json j = {
      {"architectures", {arch}},
      {"model_type", arch == "Qwen3ForCausalLM" ? "qwen3" : arch == "Qwen2ForCausalLM" ? "qwen2" : "llama"},
      {"hidden_size", c.d_model},
      {"intermediate_size", c.ffn_hidden},
      {"num_attention_heads", c.n_heads},
      {"num_key_value_heads", c.n_kv_heads},
      {"num_hidden_layers", c.n_layers},
      {"head_dim", c.head_size()},
      {"vocab_size", c.vocab_size},
      {"rms_norm_eps", c.norm_eps},
      {"rope_theta", c.rope_theta},
      {"rope_scaling", rope_scaling_json(c)},
      {"max_position_embeddings", c.max_seq_len},
      {"tie_word_embeddings", c.tie_embeddings},
      {"hidden_act", "silu"},
      {"attention_bias", false},  // (Qwen2 has q/k/v biases by its class, without this key)
      {"mlp_bias", false},
      {"initializer_range", c.init_std},
      {"torch_dtype", "float32"},
      {"use_cache", true},
  };
  if (arch == "Qwen2ForCausalLM") {
    j.erase("attention_bias");
    j.erase("mlp_bias");
    j.erase("head_dim");  // Qwen2 derives it from hidden_size / num_attention_heads
    j["use_sliding_window"] = false;
  }
  if (eod_id >= 0) {
    j["bos_token_id"] = eod_id;
    j["eos_token_id"] = eod_id;
  }
  return j;
}

Status export_hf(const ExportSource& src, const std::string& out_dir, const std::string& tokenizer_path,
                 HfExportStats* stats) {
  ExportWeights weights;
  if (Status s = weights.open(src); !s) return s;
  const std::string& step_dir = src.step_dir;
  const CkptManifest& m = weights.manifest();
  const ModelConfig& c = weights.config();
  if (!*export_hf_architecture(c))
    return Status::error(fmt::format("{}: qkv_bias together with qk_norm is no Hugging Face architecture "
                                     "(Qwen2 has the biases, Qwen3 the norms)", step_dir));
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return Status::error(fmt::format("--output {}: cannot create: {}", out_dir, ec.message()));

  // Tokenizer first (it gives config.json its eos id).
  std::string tok_src = tokenizer_path.empty() ? (fs::path(step_dir) / "tokenizer.json").string() : tokenizer_path;
  int64_t eod = -1;
  bool have_tok = fs::exists(tok_src, ec);
  if (!have_tok && !tokenizer_path.empty())
    return Status::error(fmt::format("--tokenizer {}: no such file", tokenizer_path));
  std::string tok_text, eod_text;
  if (have_tok) {
    Tokenizer tok;
    if (Status s = Tokenizer::load(tok_src, tok); !s) return Status::error(fmt::format("{}: {}", tok_src, s.message()));
    if ((int64_t)tok.vocab_size() > c.vocab_size)
      return Status::error(fmt::format("{}: tokenizer vocabulary {} exceeds the model's vocab_size {}", tok_src,
                                       tok.vocab_size(), c.vocab_size));
    if (auto e = tok.eod_id()) {
      eod = *e;
      for (const auto& sp : tok.model().specials)
        if (sp.id == *e) eod_text = sp.text;
    }
    tok_text = tok.to_hf_json();
  } else {
    spdlog::warn("{}: no tokenizer.json in the checkpoint and no --tokenizer; exporting the model only", step_dir);
  }

  // model.safetensors, one tensor at a time through one buffer the size of the largest tensor.
  ParamLayout layout = param_layout(c);
  std::vector<SafetensorsTensor> header;
  int64_t largest = 0;
  for (const auto& t : layout.tensors) {
    header.push_back({t.name, "F32", shape_of(t)});
    largest = std::max(largest, t.size());
  }
  const std::string st_path = (fs::path(out_dir) / "model.safetensors").string();
  const std::string st_tmp = st_path + ".tmp";
  std::vector<float> buf((size_t)largest);
  {
    SafetensorsWriter w;
    Status s = w.open(st_tmp, header, {{"format", "pt"}, {"producer", "smelt export"}});
    for (size_t i = 0; s && i < layout.tensors.size(); i++) {
      const ParamTensor& t = layout.tensors[i];
      s = weights.read(t, buf.data());
      if (s) s = w.write_next(buf.data());
    }
    if (s) s = w.finish();
    if (!s) {
      fs::remove(st_tmp, ec);
      return s;
    }
    if (stats) stats->bytes = w.file_bytes();
  }
  if (std::rename(st_tmp.c_str(), st_path.c_str()) != 0) {
    fs::remove(st_tmp, ec);
    return Status::error(fmt::format("{}: cannot rename into place: {}", st_path, std::strerror(errno)));
  }
  if (Status s = files_write_atomic((fs::path(out_dir) / "config.json").string(),
                                    export_hf_config(c, eod).dump(2) + "\n");
      !s)
    return s;
  if (have_tok) {
    if (Status s = files_write_atomic((fs::path(out_dir) / "tokenizer.json").string(), tok_text); !s) return s;
    // Without it AutoTokenizer would pick LlamaTokenizerFast from model_type (and prepend a BOS).
    nlohmann::ordered_json tc = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                                 {"model_max_length", c.max_seq_len},
                                 {"clean_up_tokenization_spaces", false}};
    if (!eod_text.empty()) tc["eos_token"] = tc["bos_token"] = eod_text;
    StateChatTemplate chat;  // a fine-tuned or imported model's template, as transformers reads it
    if (chat_template_in_state(m.state, chat)) {
      tc["chat_template"] = chat.source;
      if (!chat.eos_token.empty()) tc["eos_token"] = chat.eos_token;
      if (!chat.bos_token.empty()) tc["bos_token"] = chat.bos_token;
    }
    if (Status s = files_write_atomic((fs::path(out_dir) / "tokenizer_config.json").string(), tc.dump(2) + "\n"); !s)
      return s;
  }
  if (Status s = files_fsync_dir(out_dir); !s) return s;
  if (stats) {
    stats->tensors = (int)layout.tensors.size();
    stats->largest_tensor = 4 * largest;
    stats->tokenizer = have_tok;
  }
  return Status::ok();
}

Status export_hf_load(const std::string& out_dir, ModelConfig& c, std::vector<float>& params) {
  // Read back as any Hugging Face folder is imported (import_hf.hpp), with the context uncapped:
  // the round trip a --check proves is export then import.
  HfModelInfo info;
  if (Status s = import_hf_config(out_dir, std::numeric_limits<int>::max(), info); !s) return s;
  c = info.config;
  return import_hf_weights(out_dir, c, params);
}

namespace {
// The logits of batch b under `base` (and lora's adapters unmerged, when given) in an initialized model.
Status batch_logits(Model& model, const Batch& b, const std::vector<float>& base, const LoraAdapters* lora,
                    std::vector<float>& out) {
  std::copy(base.begin(), base.end(), model.base_params());
  if (lora) std::copy(lora->params.begin(), lora->params.end(), model.params());
  float loss;
  if (Status s = model.forward(b, loss); !s) return s;
  out.assign(model.acts().logits, model.acts().logits + (size_t)b.B * b.T * model.config().vocab_size);
  return Status::ok();
}
}  // namespace

Status export_logits_diff(const ModelConfig& c, const std::vector<float>& pa, const std::vector<float>& pb,
                          LogitsDiff& out, const LoraAdapters* a_lora) {
  Batch b;
  b.B = 2;
  b.T = std::min(32, c.max_seq_len);
  uint64_t x = 12345;
  for (int n = 0; n < b.B * b.T; n++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    b.inputs.push_back((int32_t)((x >> 33) % (uint64_t)c.vocab_size));
    b.targets.push_back(-1);
  }
  ModelConfig run = c;
  run.recompute = true;  // keep one layer's activations: the check runs forward only
  std::vector<float> la, lb;
  {  // one model for both sides, unless side a has adapters (then a second, after the first is gone)
    Model model;
    if (a_lora) model.set_lora(a_lora->config);
    if (Status s = model.init(run, b.B, b.T, 1, 0); !s) return s;
    if (Status s = batch_logits(model, b, pa, a_lora, la); !s) return s;
    if (!a_lora)
      if (Status s = batch_logits(model, b, pb, nullptr, lb); !s) return s;
  }
  if (a_lora) {
    Model model;
    if (Status s = model.init(run, b.B, b.T, 1, 0); !s) return s;
    if (Status s = batch_logits(model, b, pb, nullptr, lb); !s) return s;
  }
  out = LogitsDiff{};
  for (size_t i = 0; i < la.size(); i++) {
    out.max_abs = std::max(out.max_abs, (double)std::fabs(la[i] - lb[i]));
    out.scale = std::max(out.scale, (double)std::fabs(la[i]));
    out.nan |= std::isnan(la[i]) || std::isnan(lb[i]);
  }
  return Status::ok();
}

Status export_hf_check(const ExportSource& src, const std::string& out_dir, double* max_abs_diff) {
  ExportWeights weights;
  if (Status s = weights.open(src); !s) return s;
  const ModelConfig& ca = weights.config();
  ModelConfig cb;
  std::vector<float> pa, pb;
  if (Status s = weights.read_base(pa); !s) return s;
  if (Status s = export_hf_load(out_dir, cb, pb); !s) return s;
  if (!model_config_same(ca, cb))
    return Status::error(fmt::format("{}/config.json describes a different model than {}", out_dir, src.step_dir));
  LogitsDiff d;
  if (Status s = export_logits_diff(ca, pa, pb, d, weights.merged() ? &weights.lora() : nullptr); !s) return s;
  if (max_abs_diff) *max_abs_diff = d.max_abs;
  if (weights.merged()) {
    if (d.nan || d.max_abs > kLoraMergeTolerance * d.scale)
      return Status::error(fmt::format("{}: logits of a fixed batch differ from the base with its adapters unmerged "
                                       "by up to {} ({} of max(1, max|logit|); a merge allows {}){}", out_dir,
                                       d.max_abs, d.max_abs / d.scale, kLoraMergeTolerance, d.nan ? "; NaN logits" : ""));
    return Status::ok();
  }
  if (d.max_abs != 0.0 || d.nan)
    return Status::error(fmt::format("{}: logits of a fixed batch differ from the checkpoint's by up to {} "
                                     "(must be identical: the export copies the same fp32 values){}",
                                     out_dir, d.max_abs, d.nan ? "; NaN logits" : ""));
  return Status::ok();
}

}  // namespace smelt
