// LoRA adapters [Hu et al. 2021] on the decoder's linear layers: for a target W (out, in) the layer
// computes x W^T + scale * (drop(x) A^T) B^T with A (rank, in), B (out, rank), scale = alpha /
// rank, as Hugging Face PEFT defines it (dropout on the adapter's input only). The adapters live
// in a flat buffer of their own with PEFT's tensor names, so that the optimizer, the gradient
// reduction and the checkpoints work on them exactly as on a whole model's parameters while the
// base stays frozen. Here: the configuration, the layout, the initial values, the dropout masks
// and the products of one target (forward and backward over N rows), fused into the base GEMM's
// output columns (q, k and v are column ranges of the fused qkv output, gate and up of gate_up).
// Not the model's wiring (model_lora.cpp), not the PEFT files (ckpt/).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "smelt/common/status.hpp"
#include "smelt/model/config.hpp"
#include "smelt/model/params.hpp"

namespace smelt {

// The targets in PEFT's module names: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj.
enum LoraTarget : int { kLoraQ, kLoraK, kLoraV, kLoraO, kLoraGate, kLoraUp, kLoraDown, kLoraTargets };
const char* lora_target_name(int t);    // "q", "k", ... (the [lora] targets spelling)
const char* lora_module_name(int t);    // "self_attn.q_proj", ..., "mlp.down_proj"

struct LoraConfig {
  int rank = 0;  // 0: no adapters
  double alpha = 16.0;
  double dropout = 0.0;  // on the adapter's input, training forwards only
  std::vector<std::string> targets = {"q", "k", "v", "o", "gate", "up", "down"};
  uint64_t seed = 0;  // A's initial values and the dropout masks
  std::string init;   // a PEFT adapter folder the adapters start from (the trainer reads it; "" = PEFT's init)
  // How the frozen base's layer matrices (q, k, v, o, gate, up, down) are held: "fp32", "bf16"
  // (their bf16 copy alone; needs bf16 precision) or "q8_0" (int8 blocks of 32, dequantized a tile
  // at a time for the GEMMs; a matrix whose rows are not whole blocks stays fp32). Embeddings,
  // head and norms stay fp32.
  std::string base_dtype = "fp32";
  bool enabled() const { return rank > 0; }
  float scale() const { return rank > 0 ? (float)(alpha / rank) : 0.0f; }
};
// rank >= 1, alpha > 0, dropout in [0, 1), targets known and not repeated, base_dtype known.
Status lora_config_validate(const LoraConfig& l);
// Whether a LoRA run holds base tensor t compactly (base_dtype "bf16" or "q8_0", not as fp32): a
// layer matrix (2-D, model.layers.*); under "q8_0" only when its rows are whole blocks of 32.
bool lora_base_compact(const LoraConfig& l, const ParamTensor& t);
// The same targets, in any order.
bool lora_targets_same(const std::vector<std::string>& a, const std::vector<std::string>& b);

// What a LoRA run's checkpoint records of its adapters (manifest state "lora"): rank, alpha,
// dropout and targets; the base as init_from resolved it (its step folder or Hugging Face folder);
// the dropout masks' forward counter, so a resume continues them.
struct LoraState {
  LoraConfig config;
  std::string base;
  uint64_t dropout_counter = 0;
};
nlohmann::json lora_state_json(const LoraState& s);
// Errors name `where` (the manifest) and the field; the config is validated.
Status lora_state_parse(const nlohmann::json& j, const std::string& where, LoraState& out);

// Where one target's adapter sits: A at a (rank x in), B at b (out x rank) in the adapter buffer;
// the target's columns [col0, col0 + out) of its GEMM's output (ld = that output's width).
struct LoraSlot {
  int64_t a = -1, b = -1;  // -1: not a target
  int in = 0, out = 0, col0 = 0;
};
struct LoraLayout {
  ParamLayout params;                                         // lora_A then lora_B per layer and target
  std::vector<std::array<LoraSlot, kLoraTargets>> layers;     // [layer][target]
  int max_in = 0;
};
// PEFT's names: base_model.model.model.layers.L.self_attn.q_proj.lora_A.weight, ...
LoraLayout lora_layout(const ModelConfig& c, const LoraConfig& l);

// FLOPs per token of a training step with these adapters (rank 0: train_flops_per_token): the
// frozen base's GEMMs forward and for their input's gradient (4 x matmul parameters, no weight
// gradients), attention as in full training (12 x layers x d_model x T), and the adapters' six
// products of rank x (in + out) each.
double train_flops_per_token(const ModelConfig& c, int T, const LoraConfig& l);

// PEFT's initial values: A uniform in +-1/sqrt(in) (kaiming_uniform with a = sqrt(5)), drawn from
// splitmix64 by element, B zero, so the adapted model starts as the base.
void lora_init(const LoraLayout& lay, float* p, uint64_t seed);

// The dropout factor of element (row, col) of target t's input in layer l at forward number
// `counter`: 0 (dropped, probability p) or 1 / (1 - p). A hash, so recomputing a layer (recompute,
// the backward's input) gives the same mask.
float lora_keep(uint64_t seed, uint64_t counter, int layer, int target, int64_t row, int64_t col, double p);

// A model's trained adapters with their config and layout (from a checkpoint or a PEFT folder):
// what a merge and an unmerged decoder read.
struct LoraAdapters {
  LoraConfig config;
  LoraLayout layout;
  std::vector<float> params;  // layout.params
  bool on() const { return config.enabled(); }
};
// The (layer, target) whose base weight is named `base_name` (model.layers.L.self_attn.q_proj.weight
// ...) when it carries an adapter in `a`; false otherwise.
bool lora_target_of(const LoraAdapters& a, const std::string& base_name, int& layer, int& target);
// The merge, as PEFT's merge_and_unload: w (out x in, the target's own base weight) += scale * B A.
void lora_merge_into(const LoraAdapters& a, int layer, int target, float* w);
// The unmerged product on n rows, row by row in a fixed order (a row's result does not depend on
// the others: the serving decoder's batch invariance): out[r, col0:col0+out] += scale * (x_r A^T) B^T.
// u: rank floats of scratch.
void lora_apply_rows(const LoraAdapters& a, int layer, int target, float* out, int ldo, const float* x, int n,
                     float* u);

// One target's products over N rows, tiled over `threads` with fixed tiles (the bits do not
// depend on the thread count). x (N, in) the base layer's input; xd (N, in) scratch for the
// dropped input (dropout > 0; else nullptr and x is used); u (N, rank) kept for the backward.
struct LoraOp {
  const float* A = nullptr;  // (rank, in)
  const float* B = nullptr;  // (out, rank)
  float* dA = nullptr;
  float* dB = nullptr;
  int rank = 0, in = 0, out = 0, col0 = 0;
  float scale = 0;
  // dropout (p > 0)
  double p = 0;
  uint64_t seed = 0, counter = 0;
  int layer = 0, target = 0;
};
// out[:, col0:col0+out] += scale * (drop(x) A^T) B^T, u = drop(x) A^T.
void lora_forward(const LoraOp& op, float* out, int ldo, const float* x, float* xd, float* u, int N, int threads);
// dB += scale * dout_t^T u; du = scale * dout_t B; dA += du^T drop(x); dinp += drop'(du A).
// du (N, rank) and dxd (N, in, dropout only) scratch.
void lora_backward(const LoraOp& op, float* dinp, const float* dout, int ldo, const float* x, const float* u,
                   float* xd, float* du, float* dxd, int N, int threads);

}  // namespace smelt
