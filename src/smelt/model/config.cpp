// [model] section: TOML -> ModelConfig, validation with messages that name key, value and limits.
#include "smelt/model/config.hpp"

#include <fmt/format.h>

#include "smelt/common/config_schema.hpp"

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
       field("init_std", &M::init_std, "normal init of every matrix", above(0))}};
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
  if (c.d_model % c.n_heads != 0)
    return Status::error(fmt::format("[model] n_heads = {}: must divide d_model = {}", c.n_heads,
                                     c.d_model));
  if (c.n_heads % c.n_kv_heads != 0)
    return Status::error(fmt::format(
        "[model] n_kv_heads = {}: must divide n_heads = {} (grouped-query attention)",
        c.n_kv_heads, c.n_heads));
  int hs = c.d_model / c.n_heads;
  if (hs % 2 != 0 || hs > 512)
    return Status::error(fmt::format(
        "[model] d_model / n_heads = {}: the head size must be even (RoPE pairs) and at most 512",
        hs));
  return Status::ok();
}

toml::table model_config_to_toml(const ModelConfig& c) { return schema_to_toml(model_schema(), c); }

SectionDoc model_config_doc() { return section_doc(model_schema()); }

}  // namespace smelt
