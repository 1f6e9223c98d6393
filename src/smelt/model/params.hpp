// The flat parameter layout: every tensor of the model as a named slice of one fp32 buffer, in a
// fixed order with Hugging Face Llama names, so checkpoints, export, gradient reduction and
// optimizer sharding all work on flat ranges. The gradient buffer uses the same layout.
// Not the values (model.cpp owns the buffers) and not checkpoint io (ckpt/).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "smelt/model/config.hpp"
#include "smelt/model/shard.hpp"

namespace smelt {

struct ParamTensor {
  std::string name;    // "model.layers.0.self_attn.q_proj.weight"
  int64_t offset = 0;  // in floats, into the flat buffer
  int64_t rows = 0;    // out features (or vocab); 1-D tensors have rows = size, cols = 1
  int64_t cols = 1;
  bool decay = true;   // AdamW weight decay applies (matrices yes; norms and embeddings no)
  // The box of the full tensor this is: rows [row0, row0 + rows), cols [col0, col0 + cols) of a
  // (full_rows, full_cols) tensor; the whole tensor unless the model is split (shard.hpp).
  int64_t full_rows = 0, full_cols = 1, row0 = 0, col0 = 0;
  int full_index = 0;      // the tensor's place in the full model's list (param_layout(c))
  // A copy whose owner is another rank: the norms on TP ranks > 0 (replicated, identical
  // gradients), a replicated KV head's projections but on the first rank sharing it, the last
  // stage's copy of a tied embedding. Not saved, not in the gradient norm.
  bool replica = false;
  bool kv_shared = false;  // a k/v projection held by several TP ranks (n_kv_heads < tp): gradient summed over them
  bool tied_copy = false;  // either end of a tied embedding split over stages: gradient summed between them
  int64_t size() const { return rows * cols; }
  bool whole() const { return rows == full_rows && cols == full_cols; }
};

// Offsets (in floats) of one layer's tensors. q,k,v are adjacent (one fused GEMM: wqkv) and so
// are gate,up (one fused GEMM: wgu), in that order; so are the q,k,v biases (bqkv, one vector of
// the qkv row's width) and the q,k norms (qk_norm: two HS vectors). -1: the config has none.
struct LayerOffsets {
  int64_t ln1, wqkv, bqkv = -1, qk_norm = -1, wo, ln2, wgu, wdown;
};

struct ParamLayout {
  std::vector<ParamTensor> tensors;  // [tensor] in buffer order
  std::vector<LayerOffsets> layers;  // [layer]
  int64_t wte = 0, lnf = 0, lm_head = 0;  // lm_head == wte when tied; -1 when the shard lacks it
  int64_t total = 0;                 // floats
};

// Order: model.embed_tokens.weight; per layer: input_layernorm, self_attn.{q,k,v}_proj.weight,
// self_attn.{q,k,v}_proj.bias (qkv_bias), self_attn.{q,k}_norm.weight (qk_norm), o_proj,
// post_attention_layernorm, mlp.{gate,up,down}_proj; model.norm.weight; lm_head.weight (untied).
ParamLayout param_layout(const ModelConfig& c);
// One shard's tensors, in the same order, each the box of its full tensor the shard holds
// (q/k/v and gate/up by rows, o and down by columns, the embedding and LM head by vocabulary
// rows). The last stage of a pipeline with tied embeddings holds a copy of the embedding as its
// head (lm_head, tied_copy and replica set).
ParamLayout param_layout(const ModelConfig& c, const ModelShard& s);
// Parameters of the full model (its layout's total).
int64_t param_count(const ModelConfig& c);
// FLOPs per token of a training step: 6 x matmul parameters + 12 x layers x d_model x T.
double train_flops_per_token(const ModelConfig& c, int T);

// ZeRO-1 ownership of a flat buffer of `total` floats over `ranks` data-parallel ranks: rank r
// keeps the optimizer state of [b[r], b[r+1]) (ranks + 1 boundaries, b[0] = 0, b[ranks] = total).
// Boundaries fall on gradient-norm blocks (kGradNormBlock floats), so a rank's share of the global
// norm is whole blocks and the sharded norm has the bits of the unsharded one; shares differ by at
// most one block, and a rank may own nothing when there are fewer blocks than ranks.
std::vector<int64_t> zero_shard_bounds(int64_t total, int ranks);

}  // namespace smelt
