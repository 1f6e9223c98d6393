// The flat parameter layout: every tensor of the model as a named slice of one fp32 buffer, in a
// fixed order with Hugging Face Llama names, so checkpoints, export, gradient reduction and
// optimizer sharding all work on flat ranges. The gradient buffer uses the same layout.
// Not the values (model.cpp owns the buffers) and not checkpoint io (ckpt/).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "smelt/model/config.hpp"

namespace smelt {

struct ParamTensor {
  std::string name;    // "model.layers.0.self_attn.q_proj.weight"
  int64_t offset = 0;  // in floats, into the flat buffer
  int64_t rows = 0;    // out features (or vocab); 1-D tensors have rows = size, cols = 1
  int64_t cols = 1;
  bool decay = true;   // AdamW weight decay applies (matrices yes; norms and embeddings no)
  int64_t size() const { return rows * cols; }
};

// Offsets (in floats) of one layer's tensors. q,k,v are adjacent (one fused GEMM: wqkv) and so
// are gate,up (one fused GEMM: wgu), in that order.
struct LayerOffsets {
  int64_t ln1, wqkv, wo, ln2, wgu, wdown;
};

struct ParamLayout {
  std::vector<ParamTensor> tensors;  // [tensor] in buffer order
  std::vector<LayerOffsets> layers;  // [layer]
  int64_t wte = 0, lnf = 0, lm_head = 0;  // lm_head == wte when tied
  int64_t total = 0;                 // floats
};

// Order: model.embed_tokens.weight; per layer: input_layernorm, self_attn.{q,k,v,o}_proj,
// post_attention_layernorm, mlp.{gate,up,down}_proj; model.norm.weight; lm_head.weight (untied).
ParamLayout param_layout(const ModelConfig& c);

// ZeRO-1 ownership of a flat buffer of `total` floats over `ranks` data-parallel ranks: rank r
// keeps the optimizer state of [b[r], b[r+1]) (ranks + 1 boundaries, b[0] = 0, b[ranks] = total).
// Boundaries fall on gradient-norm blocks (kGradNormBlock floats), so a rank's share of the global
// norm is whole blocks and the sharded norm has the bits of the unsharded one; shares differ by at
// most one block, and a rank may own nothing when there are fewer blocks than ranks.
std::vector<int64_t> zero_shard_bounds(int64_t total, int ranks);

}  // namespace smelt
