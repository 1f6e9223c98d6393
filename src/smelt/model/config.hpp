// ModelConfig: the sizes of the Llama-style decoder, read from the [model] TOML section and
// validated (every message names the key, the value and what is allowed). Not the trainer's
// config (batch, schedule, optimizer live in train/).
#pragma once
#include <cstdint>
#include <string>

#include <toml++/toml.h>

#include "smelt/common/status.hpp"
#include "smelt/hw/precision.hpp"  // Precision, which the model's users name beside its config

namespace smelt {

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

  int head_size() const { return d_model / n_heads; }  // HS
  int qkv_size() const { return (n_heads + 2 * n_kv_heads) * head_size(); }
};

// Reads [model] (missing keys keep their defaults) and validates. Errors name key, value, allowed.
Status model_config_read(const toml::table& root, ModelConfig& c);
Status model_config_validate(const ModelConfig& c);
// The [model] section with every key (for resolved configs).
toml::table model_config_to_toml(const ModelConfig& c);
// The [model] field table's rows (names, defaults, limits, docs) for the docs check.
struct SectionDoc;
SectionDoc model_config_doc();

}  // namespace smelt
