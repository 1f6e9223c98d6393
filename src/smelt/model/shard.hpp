// Which part of the decoder one rank holds under tensor and pipeline parallelism
// (docs/parallel.md): a pipeline stage (a range of layers; the embedding on the first stage, the
// final norm and the LM head on the last) and, inside it, a tensor-parallel slice (attention heads,
// the SwiGLU hidden units and the vocabulary split over the TP ranks). The local sizes the model
// computes with, and the checks that refuse a layout the model does not allow. Not the
// communication (the trainer gives the model its collectives) and not the rank grid (train/).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "smelt/common/status.hpp"
#include "smelt/model/config.hpp"

namespace smelt {

struct ModelShard {
  int tp = 1, tp_rank = 0;           // tensor parallel: ranks and this rank's place
  int pp = 1, stage = 0;             // pipeline parallel: stages and this rank's stage
  int layer_begin = 0, layer_end = -1;  // the stage's layers [begin, end) of the full model (-1: all)
  bool first() const { return stage == 0; }
  bool last() const { return stage == pp - 1; }
  bool whole() const { return tp == 1 && pp == 1; }
};

// The local sizes of a shard.
struct ShardDims {
  int C = 0, HS = 0;
  int NH = 0, NKV = 0;      // this rank's query and KV heads
  int q0 = 0, kv0 = 0;      // the first of them among the full model's heads
  int H = 0, h0 = 0;        // SwiGLU hidden units held, the first of them
  int V = 0, v0 = 0;        // vocabulary rows held (embedding and LM head), the first of them
  int L = 0, l0 = 0;        // layers held, the first of them
  bool embed = true;        // looks up the embedding (first stage)
  bool head = true;         // the final norm, the LM head and the loss (last stage)
  bool kv_replicated = false;  // fewer KV heads than TP ranks: each KV head is held by tp / n_kv_heads ranks
  bool qkv_bias = false, qk_norm = false;  // the config's (the layer's extra tensors and activations)
  int qkv() const { return (NH + 2 * NKV) * HS; }
  int A() const { return NH * HS; }
};

// The stages' first layers: pp + 1 bounds over n_layers, even (the remainder to the first
// stages) or from stage_layers (one count per stage, summing to n_layers).
Status stage_bounds(int n_layers, int pp, const std::vector<int>& stage_layers, std::vector<int>& out);
// The shard of (tp_rank, stage) with the stage's layers from bounds.
ModelShard model_shard(int tp, int tp_rank, int pp, int stage, const std::vector<int>& bounds);
// Refuses a shard the model does not allow, with the numbers: heads not divisible by tp (and KV
// heads neither divisible by tp nor dividing it), SwiGLU hidden units not divisible by tp, fewer
// vocabulary rows than ranks, a stage without layers.
Status shard_validate(const ModelConfig& c, const ModelShard& s);
ShardDims shard_dims(const ModelConfig& c, const ModelShard& s);
// "tp 2 (rank 1) x pp 2 (stage 0: layers 0-1)" for logs.
std::string shard_describe(const ModelShard& s);

// One kind of linear layer of a shard: its GEMMs' in and out features and how many the shard
// holds (the LM head: 1 where the shard holds the head, else 0). What the GEMM choice, the memory
// plan, the cost model and the benchmarks measure.
struct LinearShape {
  const char* name;  // "qkv", "attn_out", "ffn_up" (gate and up as one), "ffn_down", "lm_head"
  int IC, OC, count;
  bool in_layers = true;  // one per transformer layer (false: the LM head, outside them)
};
std::vector<LinearShape> linear_shapes(const ShardDims& d);  // the five, in that order

}  // namespace smelt
