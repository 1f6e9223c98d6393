// Builds the flat, named parameter layout (Hugging Face Llama names) from a ModelConfig, for the
// whole model or one shard of it (shard.hpp).
#include "smelt/model/params.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "smelt/kernels/kernels.hpp"

namespace smelt {

ParamLayout param_layout(const ModelConfig& c) { return param_layout(c, ModelShard{}); }

ParamLayout param_layout(const ModelConfig& c, const ModelShard& s) {
  ParamLayout p;
  const ShardDims d = shard_dims(c, s);
  const int64_t C = c.d_model, V = c.vocab_size, H = c.ffn_hidden, HS = c.head_size();
  const int64_t NH = c.n_heads, NKV = c.n_kv_heads;
  const bool split_tied = c.tie_embeddings && s.pp > 1;
  int index = 0;  // the full model's tensor count so far
  // A box (rows [r0, r0 + rows) x cols [c0, c0 + cols)) of a full (R, K) tensor; held: this shard
  // has it (the full model's tensors are counted either way).
  auto add = [&](std::string name, int64_t R, int64_t K, bool decay, bool held, int64_t r0, int64_t rows,
                 int64_t c0, int64_t cols) -> int64_t {
    const int at = index++;
    if (!held) return -1;
    ParamTensor t;
    t.name = std::move(name);
    t.offset = p.total;
    t.rows = rows, t.cols = cols, t.decay = decay;
    t.full_rows = R, t.full_cols = K, t.row0 = r0, t.col0 = c0, t.full_index = at;
    t.replica = K == 1 && s.tp_rank > 0;  // norms: replicated over the TP ranks, rank 0 owns them
    p.tensors.push_back(t);
    p.total += rows * cols;
    return t.offset;
  };
  auto whole = [&](std::string name, int64_t R, int64_t K, bool decay, bool held) {
    return add(std::move(name), R, K, decay, held, 0, R, 0, K);
  };
  p.wte = add("model.embed_tokens.weight", V, C, false, d.embed, d.v0, d.V, 0, C);
  if (split_tied && p.wte >= 0) p.tensors.back().tied_copy = true;
  for (int l = 0; l < c.n_layers; l++) {
    const bool held = l >= d.l0 && l < d.l0 + d.L;
    std::string pre = fmt::format("model.layers.{}.", l);
    LayerOffsets o;
    o.ln1 = whole(pre + "input_layernorm.weight", C, 1, false, held);
    o.wqkv = add(pre + "self_attn.q_proj.weight", NH * HS, C, true, held, d.q0 * HS, d.NH * HS, 0, C);
    for (const char* kv : {"self_attn.k_proj.weight", "self_attn.v_proj.weight"}) {
      add(pre + kv, NKV * HS, C, true, held, d.kv0 * HS, d.NKV * HS, 0, C);
      if (held && d.kv_replicated) {  // the first rank of those sharing the head owns it
        p.tensors.back().kv_shared = true;
        p.tensors.back().replica = s.tp_rank % (s.tp / c.n_kv_heads) != 0;
      }
    }
    if (c.qkv_bias) {  // sharded as the rows they add to; owned as the projections are
      o.bqkv = add(pre + "self_attn.q_proj.bias", NH * HS, 1, false, held, d.q0 * HS, d.NH * HS, 0, 1);
      if (held) p.tensors.back().replica = false;
      for (const char* kv : {"self_attn.k_proj.bias", "self_attn.v_proj.bias"}) {
        add(pre + kv, NKV * HS, 1, false, held, d.kv0 * HS, d.NKV * HS, 0, 1);
        if (held) {
          p.tensors.back().kv_shared = d.kv_replicated;
          p.tensors.back().replica = d.kv_replicated && s.tp_rank % (s.tp / c.n_kv_heads) != 0;
        }
      }
    }
    if (c.qk_norm) {  // every TP rank holds them (rank 0 owns them); the model sums their gradient over TP
      o.qk_norm = whole(pre + "self_attn.q_norm.weight", HS, 1, false, held);
      whole(pre + "self_attn.k_norm.weight", HS, 1, false, held);
    }
    o.wo = add(pre + "self_attn.o_proj.weight", C, NH * HS, true, held, 0, C, d.q0 * HS, d.NH * HS);
    o.ln2 = whole(pre + "post_attention_layernorm.weight", C, 1, false, held);
    o.wgu = add(pre + "mlp.gate_proj.weight", H, C, true, held, d.h0, d.H, 0, C);
    add(pre + "mlp.up_proj.weight", H, C, true, held, d.h0, d.H, 0, C);
    o.wdown = add(pre + "mlp.down_proj.weight", C, H, true, held, 0, C, d.h0, d.H);
    if (held) p.layers.push_back(o);
  }
  p.lnf = whole("model.norm.weight", C, 1, false, d.head);
  // The untied head is a matrix like any other projection, so it decays (as in nanoGPT/torchtitan);
  // the tied one is the embedding and does not.
  if (!c.tie_embeddings) {
    p.lm_head = add("lm_head.weight", V, C, true, d.head, d.v0, d.V, 0, C);
  } else if (!split_tied) {
    p.lm_head = p.wte;
  } else if (d.head) {  // the last stage's copy of the first stage's embedding
    index = 0;          // (the embedding's place in the full list)
    p.lm_head = add("model.embed_tokens.weight", V, C, false, true, d.v0, d.V, 0, C);
    p.tensors.back().tied_copy = p.tensors.back().replica = true;
  } else {
    p.lm_head = -1;
  }
  return p;
}

int64_t param_count(const ModelConfig& c) { return param_layout(c).total; }

double train_flops_per_token(const ModelConfig& c, int T) {
  const double C = c.d_model, H = c.ffn_hidden, QKV = c.qkv_size(), A = c.n_heads * c.head_size();
  const double per_layer = C * QKV + A * C + C * 2 * H + H * C;
  const double matmul_params = c.n_layers * per_layer + (double)c.vocab_size * C;
  return 6.0 * matmul_params + 12.0 * c.n_layers * C * T;
}

std::vector<int64_t> zero_shard_bounds(int64_t total, int ranks) {
  const int64_t blocks = (total + kGradNormBlock - 1) / kGradNormBlock;
  std::vector<int64_t> b(ranks + 1);
  for (int r = 0; r <= ranks; r++) b[r] = std::min(total, blocks * r / ranks * kGradNormBlock);
  return b;
}

}  // namespace smelt
