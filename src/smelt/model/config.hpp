// ModelConfig: the sizes of the Llama-style decoder, read from the [model] TOML section and
// validated (every message names the key, the value and what is allowed). Not the trainer's
// config (batch, schedule, optimizer live in train/).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "smelt/common/enum_names.hpp"
#include "smelt/common/status.hpp"
#include "smelt/hw/precision.hpp"  // Precision, which the model's users name beside its config

namespace smelt {

// How RoPE's frequencies are stretched for contexts longer than the model was first trained on
// (docs/import.md): none; linear (every frequency / factor, positions interpolated); llama3 (Llama
// 3.1/3.2: low frequencies / factor, high ones kept, a smooth blend between).
enum class RopeScaling { kNone, kLinear, kLlama3 };
inline constexpr EnumName<RopeScaling> kRopeScalingNames[] = {
    {RopeScaling::kNone, "none"}, {RopeScaling::kLinear, "linear"}, {RopeScaling::kLlama3, "llama3"}};
inline std::span<const EnumName<RopeScaling>> enum_names(RopeScaling) { return kRopeScalingNames; }

struct ModelConfig {
  int vocab_size = 512;      // V
  int d_model = 64;          // C
  int n_layers = 2;          // L
  int n_heads = 4;           // NH
  int n_kv_heads = 4;        // NKV, divides NH (grouped-query attention when < NH)
  int ffn_hidden = 176;      // H, SwiGLU hidden size
  int max_seq_len = 256;     // longest T (sizes the RoPE table)
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;
  bool tie_embeddings = true;  // lm_head shares model.embed_tokens.weight
  bool recompute = false;      // recompute each layer's activations in backward (keeps only its input)
  double init_std = 0.02;      // normal init of every matrix; norms start at 1
  // The families open checkpoints come in (docs/import.md); every default is the plain decoder.
  int head_dim = 0;            // HS when set (Qwen3: 128 with d_model 1024 and 16 heads); 0: d_model / n_heads
  bool qkv_bias = false;       // q/k/v projections carry a bias (Qwen2)
  bool qk_norm = false;        // RMSNorm over each query and key head before RoPE (Qwen3)
  RopeScaling rope_scaling = RopeScaling::kNone;
  double rope_factor = 1.0;                // linear and llama3: how much longer the context is
  double rope_low_freq_factor = 1.0;       // llama3
  double rope_high_freq_factor = 4.0;      // llama3
  int rope_original_max_seq_len = 8192;    // llama3: the context the frequencies were trained for

  int head_size() const { return head_dim > 0 ? head_dim : d_model / n_heads; }  // HS
  int qkv_size() const { return (n_heads + 2 * n_kv_heads) * head_size(); }
};

// RoPE's HS/2 inverse frequencies (angle of pair i at position p = p * inv_freq[i]): theta^(-2i/HS),
// stretched by rope_scaling as Hugging Face's rotary embedding does. In double; every RoPE table
// and reference is built from them.
std::vector<double> rope_inv_freq(const ModelConfig& c);

// c with what does not change the model's function put to one spelling: head_dim explicit, the RoPE
// scaling keys its type does not read at their defaults, recompute off, init_std 0. Two configs
// describe the same model when their canonical forms are equal (exports' and imports' checks).
ModelConfig model_config_canonical(ModelConfig c);
// The same model: equal canonical forms (every key that changes what the model computes).
bool model_config_same(const ModelConfig& a, const ModelConfig& b);

// Reads [model] (missing keys keep their defaults) and validates. Errors name key, value, allowed.
Status model_config_read(const toml::table& root, ModelConfig& c);
Status model_config_validate(const ModelConfig& c);
// The [model] section with every key (for resolved configs).
toml::table model_config_to_toml(const ModelConfig& c);
// The [model] field table's rows (names, defaults, limits, docs) for the docs check.
struct SectionDoc;
SectionDoc model_config_doc();

}  // namespace smelt
