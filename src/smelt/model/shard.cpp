// Shard sizes and layout checks (shard.hpp).
#include "smelt/model/shard.hpp"

#include <numeric>

#include <fmt/format.h>

namespace smelt {

Status stage_bounds(int n_layers, int pp, const std::vector<int>& stage_layers, std::vector<int>& out) {
  out.assign(pp + 1, 0);
  if (pp < 1) return Status::error(fmt::format("[parallel] pp = {}: must be >= 1", pp));
  if (!stage_layers.empty()) {
    if ((int)stage_layers.size() != pp)
      return Status::error(fmt::format("[parallel] stage_layers has {} entries for pp = {} stages: give one layer "
                                       "count per stage", stage_layers.size(), pp));
    for (int s = 0; s < pp; s++) {
      if (stage_layers[s] < 1)
        return Status::error(fmt::format("[parallel] stage_layers[{}] = {}: every stage needs at least one layer", s,
                                         stage_layers[s]));
      out[s + 1] = out[s] + stage_layers[s];
    }
    if (out[pp] != n_layers)
      return Status::error(fmt::format("[parallel] stage_layers sum to {} but the model has n_layers = {}", out[pp],
                                       n_layers));
    return Status::ok();
  }
  if (pp > n_layers)
    return Status::error(fmt::format("[parallel] pp = {} stages but the model has n_layers = {}: at most one stage "
                                     "per layer", pp, n_layers));
  for (int s = 0; s < pp; s++) out[s + 1] = out[s] + n_layers / pp + (s < n_layers % pp ? 1 : 0);
  return Status::ok();
}

ModelShard model_shard(int tp, int tp_rank, int pp, int stage, const std::vector<int>& bounds) {
  ModelShard s;
  s.tp = tp, s.tp_rank = tp_rank, s.pp = pp, s.stage = stage;
  s.layer_begin = bounds[stage], s.layer_end = bounds[stage + 1];
  return s;
}

Status shard_validate(const ModelConfig& c, const ModelShard& s) {
  const int tp = s.tp;
  if (tp < 1) return Status::error(fmt::format("[parallel] tp = {}: must be >= 1", tp));
  if (c.n_heads % tp != 0)
    return Status::error(fmt::format("[parallel] tp = {}: must divide n_heads = {} (each rank takes whole attention "
                                     "heads)", tp, c.n_heads));
  if (c.n_kv_heads % tp != 0 && tp % c.n_kv_heads != 0)
    return Status::error(fmt::format("[parallel] tp = {} with n_kv_heads = {}: the KV heads are split (tp divides "
                                     "them) or replicated (they divide tp), neither holds", tp, c.n_kv_heads));
  if (c.ffn_hidden % tp != 0)
    return Status::error(fmt::format("[parallel] tp = {}: must divide ffn_hidden = {} (the SwiGLU units are split "
                                     "evenly)", tp, c.ffn_hidden));
  if (c.vocab_size < tp)
    return Status::error(fmt::format("[parallel] tp = {}: more ranks than vocab_size = {} rows", tp, c.vocab_size));
  const int end = s.layer_end < 0 ? c.n_layers : s.layer_end;
  if (s.layer_begin < 0 || end > c.n_layers || end <= s.layer_begin)
    return Status::error(fmt::format("[parallel] stage {}: layers [{}, {}) of n_layers = {}: a stage holds at least "
                                     "one layer", s.stage, s.layer_begin, end, c.n_layers));
  return Status::ok();
}

ShardDims shard_dims(const ModelConfig& c, const ModelShard& s) {
  ShardDims d;
  const int tp = std::max(1, s.tp), r = s.tp_rank;
  d.C = c.d_model, d.HS = c.head_size();
  d.NH = c.n_heads / tp, d.q0 = r * d.NH;
  if (c.n_kv_heads % tp == 0) {
    d.NKV = c.n_kv_heads / tp, d.kv0 = r * d.NKV;
  } else {  // replicated: tp / n_kv_heads consecutive ranks share one KV head
    d.NKV = 1, d.kv0 = r / (tp / c.n_kv_heads), d.kv_replicated = true;
  }
  d.H = c.ffn_hidden / tp, d.h0 = r * d.H;
  d.v0 = (int)((int64_t)r * c.vocab_size / tp);
  d.V = (int)((int64_t)(r + 1) * c.vocab_size / tp) - d.v0;
  d.l0 = s.layer_begin;
  d.L = (s.layer_end < 0 ? c.n_layers : s.layer_end) - s.layer_begin;
  d.embed = s.first();
  d.head = s.last();
  d.qkv_bias = c.qkv_bias, d.qk_norm = c.qk_norm;
  return d;
}

std::string shard_describe(const ModelShard& s) {
  std::string out;
  if (s.tp > 1) out += fmt::format("tp {} (rank {})", s.tp, s.tp_rank);
  if (s.pp > 1)
    out += fmt::format("{}pp {} (stage {}: layers {}-{})", out.empty() ? "" : " x ", s.pp, s.stage, s.layer_begin,
                       s.layer_end - 1);
  return out.empty() ? "the whole model" : out;
}

std::vector<LinearShape> linear_shapes(const ShardDims& d) {
  return {{"qkv", d.C, d.qkv(), d.L},
          {"attn_out", d.A(), d.C, d.L},
          {"ffn_up", d.C, 2 * d.H, d.L},
          {"ffn_down", d.H, d.C, d.L},
          {"lm_head", d.C, d.V, d.head ? 1 : 0, false}};
}

}  // namespace smelt
