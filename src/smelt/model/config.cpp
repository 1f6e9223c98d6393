// [model] section: TOML -> ModelConfig, validation with messages that name key, value and limits.
#include "smelt/model/config.hpp"

#include <cmath>

#include <fmt/format.h>

#include "smelt/common/config_schema.hpp"
#include "smelt/kernels/kernels.hpp"

namespace smelt {

namespace {

const Schema<ModelConfig>& model_schema() {
  using M = ModelConfig;
  static const Schema<ModelConfig> s{
      "model",
      {field("vocab_size", &M::vocab_size, "V: token ids are in [0, V)", at_least(1)),
       field("d_model", &M::d_model, "C: the residual stream's width", at_least(1)),
       field("n_layers", &M::n_layers, "L: transformer blocks", at_least(1)),
       field("n_heads", &M::n_heads, "NH: attention heads (divides d_model)", at_least(1)),
       field("n_kv_heads", &M::n_kv_heads, "NKV: key/value heads (divides n_heads; < NH is GQA)", at_least(1)),
       field("ffn_hidden", &M::ffn_hidden, "H: SwiGLU hidden size", at_least(1)),
       field("max_seq_len", &M::max_seq_len, "longest T (sizes the RoPE table)", at_least(1)),
       field("rope_theta", &M::rope_theta, "RoPE base", above(0)),
       field("norm_eps", &M::norm_eps, "RMSNorm epsilon", Limits{0, 1, true, true, ""}),
       field("tie_embeddings", &M::tie_embeddings, "lm_head shares the token embedding"),
       field("recompute", &M::recompute, "recompute each layer's activations in backward"),
       field("init_std", &M::init_std, "normal init of every matrix", above(0)),
       field("head_dim", &M::head_dim, "HS: each head's size (0: d_model / n_heads)", in_range(0, 512)),
       field("qkv_bias", &M::qkv_bias, "the q/k/v projections carry a bias (Qwen2)"),
       field("qk_norm", &M::qk_norm, "RMSNorm over each query and key head before RoPE (Qwen3)"),
       field("rope_scaling", &M::rope_scaling, "RoPE frequency scaling for longer contexts"),
       field("rope_factor", &M::rope_factor, "rope_scaling linear/llama3: the context's stretch", at_least(1)),
       field("rope_low_freq_factor", &M::rope_low_freq_factor, "rope_scaling llama3: low frequency factor", above(0)),
       field("rope_high_freq_factor", &M::rope_high_freq_factor, "rope_scaling llama3: high frequency factor", above(0)),
       field("rope_original_max_seq_len", &M::rope_original_max_seq_len,
             "rope_scaling llama3: the context the frequencies were trained for", at_least(1))}};
  return s;
}

}  // namespace

Status model_config_read(const toml::table& root, ModelConfig& c) {
  std::vector<std::string> errors;
  schema_read_keys(model_schema(), root, c, errors);
  if (!errors.empty()) return config_errors_status(errors);
  return model_config_validate(c);
}

// Each key's limits (the table), then the rules between keys.
Status model_config_validate(const ModelConfig& c) {
  std::vector<std::string> errors;
  schema_check(model_schema(), c, errors);
  if (!errors.empty()) return Status::error(errors[0]);
  if (c.head_dim == 0 && c.d_model % c.n_heads != 0)
    return Status::error(fmt::format("[model] n_heads = {}: must divide d_model = {} (or set head_dim)",
                                     c.n_heads, c.d_model));
  if (c.n_heads % c.n_kv_heads != 0)
    return Status::error(fmt::format(
        "[model] n_kv_heads = {}: must divide n_heads = {} (grouped-query attention)",
        c.n_kv_heads, c.n_heads));
  const int hs = c.head_size();
  if (hs % 2 != 0 || hs > 512 || hs < 2)
    return Status::error(fmt::format(
        "[model] {} = {}: the head size must be even (RoPE pairs) and at most 512",
        c.head_dim > 0 ? "head_dim" : "d_model / n_heads", hs));
  if (c.rope_scaling == RopeScaling::kLlama3 && c.rope_high_freq_factor <= c.rope_low_freq_factor)
    return Status::error(fmt::format("[model] rope_high_freq_factor = {}: must be above rope_low_freq_factor = {}",
                                     c.rope_high_freq_factor, c.rope_low_freq_factor));
  return Status::ok();
}

ModelConfig model_config_canonical(ModelConfig c) {
  const ModelConfig d;
  c.head_dim = c.head_size();
  if (c.rope_scaling != RopeScaling::kLlama3) {
    c.rope_low_freq_factor = d.rope_low_freq_factor;
    c.rope_high_freq_factor = d.rope_high_freq_factor;
    c.rope_original_max_seq_len = d.rope_original_max_seq_len;
  }
  if (c.rope_scaling == RopeScaling::kNone) c.rope_factor = d.rope_factor;
  c.recompute = false;
  c.init_std = 0;
  return c;
}

bool model_config_same(const ModelConfig& a, const ModelConfig& b) {
  return model_config_to_toml(model_config_canonical(a)) == model_config_to_toml(model_config_canonical(b));
}

std::vector<double> rope_inv_freq(const ModelConfig& c) {
  std::vector<double> f = rope_theta_freq(c.head_size(), c.rope_theta);
  if (c.rope_scaling == RopeScaling::kLinear) {
    for (double& x : f) x /= c.rope_factor;
  } else if (c.rope_scaling == RopeScaling::kLlama3) {
    // Wavelengths longer than original / low_freq_factor are stretched by the factor, shorter than
    // original / high_freq_factor kept, and those between blended by where they lie.
    const double old_len = c.rope_original_max_seq_len, lo = c.rope_low_freq_factor, hi = c.rope_high_freq_factor;
    const double low_wavelen = old_len / lo, high_wavelen = old_len / hi;
    for (double& x : f) {
      const double wavelen = 2.0 * M_PI / x;
      if (wavelen > low_wavelen) {
        x /= c.rope_factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (old_len / wavelen - lo) / (hi - lo);
        x = (1.0 - smooth) * x / c.rope_factor + smooth * x;
      }
    }
  }
  return f;
}

toml::table model_config_to_toml(const ModelConfig& c) { return schema_to_toml(model_schema(), c); }

SectionDoc model_config_doc() { return section_doc(model_schema()); }

}  // namespace smelt
