// [model] section: TOML -> ModelConfig, validation with messages that name key, value and limits.
#include "smelt/model/config.hpp"

#include <fmt/format.h>

#include "smelt/common/config.hpp"

namespace smelt {

Status model_config_read(const toml::table& root, ModelConfig& c) {
  ConfigSection s(root, "model");
  s.get("vocab_size", c.vocab_size);
  s.get("d_model", c.d_model);
  s.get("n_layers", c.n_layers);
  s.get("n_heads", c.n_heads);
  s.get("n_kv_heads", c.n_kv_heads);
  s.get("ffn_hidden", c.ffn_hidden);
  s.get("max_seq_len", c.max_seq_len);
  s.get("rope_theta", c.rope_theta);
  s.get("norm_eps", c.norm_eps);
  s.get("tie_embeddings", c.tie_embeddings);
  s.get("recompute", c.recompute);
  s.get("init_std", c.init_std);
  auto errs = s.finish();
  if (!errs.empty()) {
    std::string msg;
    for (const auto& e : errs) msg += (msg.empty() ? "" : "\n") + e;
    return Status::error(msg);
  }
  return model_config_validate(c);
}

Status model_config_validate(const ModelConfig& c) {
  auto positive = [](const char* key, int v) -> std::string {
    return v > 0 ? "" : fmt::format("[model] {} = {}: must be a positive integer", key, v);
  };
  for (auto [k, v] : {std::pair{"vocab_size", c.vocab_size}, {"d_model", c.d_model},
                      {"n_layers", c.n_layers}, {"n_heads", c.n_heads},
                      {"n_kv_heads", c.n_kv_heads}, {"ffn_hidden", c.ffn_hidden},
                      {"max_seq_len", c.max_seq_len}}) {
    auto e = positive(k, v);
    if (!e.empty()) return Status::error(e);
  }
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
  if (!(c.rope_theta > 0))
    return Status::error(fmt::format("[model] rope_theta = {}: must be > 0", c.rope_theta));
  if (!(c.norm_eps > 0 && c.norm_eps < 1))
    return Status::error(fmt::format("[model] norm_eps = {}: must be in (0, 1)", c.norm_eps));
  if (!(c.init_std > 0))
    return Status::error(fmt::format("[model] init_std = {}: must be > 0", c.init_std));
  return Status::ok();
}

toml::table model_config_to_toml(const ModelConfig& c) {
  return toml::table{{"vocab_size", c.vocab_size},   {"d_model", c.d_model},
                     {"n_layers", c.n_layers},       {"n_heads", c.n_heads},
                     {"n_kv_heads", c.n_kv_heads},   {"ffn_hidden", c.ffn_hidden},
                     {"max_seq_len", c.max_seq_len}, {"rope_theta", c.rope_theta},
                     {"norm_eps", c.norm_eps},       {"tie_embeddings", c.tie_embeddings},
                     {"recompute", c.recompute},     {"init_std", c.init_std}};
}

}  // namespace smelt
