// Builds the flat, named parameter layout (Hugging Face Llama names) from a ModelConfig.
#include "smelt/model/params.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "smelt/kernels/kernels.hpp"

namespace smelt {

ParamLayout param_layout(const ModelConfig& c) {
  ParamLayout p;
  const int64_t C = c.d_model, V = c.vocab_size, H = c.ffn_hidden, HS = c.head_size();
  auto add = [&](std::string name, int64_t rows, int64_t cols, bool decay) {
    int64_t off = p.total;
    p.tensors.push_back({std::move(name), off, rows, cols, decay});
    p.total += rows * cols;
    return off;
  };
  p.wte = add("model.embed_tokens.weight", V, C, false);
  for (int l = 0; l < c.n_layers; l++) {
    std::string pre = fmt::format("model.layers.{}.", l);
    LayerOffsets o;
    o.ln1 = add(pre + "input_layernorm.weight", C, 1, false);
    o.wqkv = add(pre + "self_attn.q_proj.weight", c.n_heads * HS, C, true);
    add(pre + "self_attn.k_proj.weight", c.n_kv_heads * HS, C, true);
    add(pre + "self_attn.v_proj.weight", c.n_kv_heads * HS, C, true);
    o.wo = add(pre + "self_attn.o_proj.weight", C, c.n_heads * HS, true);
    o.ln2 = add(pre + "post_attention_layernorm.weight", C, 1, false);
    o.wgu = add(pre + "mlp.gate_proj.weight", H, C, true);
    add(pre + "mlp.up_proj.weight", H, C, true);
    o.wdown = add(pre + "mlp.down_proj.weight", C, H, true);
    p.layers.push_back(o);
  }
  p.lnf = add("model.norm.weight", C, 1, false);
  // The untied head is a matrix like any other projection, so it decays (as in nanoGPT/torchtitan);
  // the tied one is the embedding and does not.
  p.lm_head = c.tie_embeddings ? p.wte : add("lm_head.weight", V, C, true);
  return p;
}

std::vector<int64_t> zero_shard_bounds(int64_t total, int ranks) {
  const int64_t blocks = (total + kGradNormBlock - 1) / kGradNormBlock;
  std::vector<int64_t> b(ranks + 1);
  for (int r = 0; r <= ranks; r++) b[r] = std::min(total, blocks * r / ranks * kGradNormBlock);
  return b;
}

}  // namespace smelt
