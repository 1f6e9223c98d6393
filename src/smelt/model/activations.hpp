// The planned activation buffers of one forward/backward at batch (B,T): named slices of one
// allocation, sized once from the config, with and without per-layer recomputation; and the memory
// plan (parameters, gradients, optimizer state, activations) with its byte report and budget check.
// Not the parameters (params.hpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "smelt/common/status.hpp"
#include "smelt/model/config.hpp"
#include "smelt/model/shard.hpp"

namespace smelt {

// One layer's saved activations (N = B*T rows).
struct LayerActs {
  float* ln1;    // (N,C) input_layernorm output
  float* rstd1;  // (N)
  float* qkv;    // (N,QKV) q,k after RoPE, v
  float* qk_raw;   // qk_norm: (N,(NH+NKV)*HS) q,k before their norm (else nullptr)
  float* qk_rstd;  // qk_norm: (N*(NH+NKV))
  float* att;    // (N,NH*HS) attention output
  float* lse;    // (B,NH,T) attention logsumexp
  float* xmid;   // (N,C) residual after attention
  float* ln2;    // (N,C)
  float* rstd2;  // (N)
  float* gu;     // (N,2H) [gate | up]
  float* sw;     // (N,H) SwiGLU output
};

struct Activations {
  int B = 0, T = 0;
  bool recompute = false;
  std::vector<float> buffer;         // the one allocation
  std::vector<float*> resid;         // [layer 0..L] (N,C) residual stream entering each layer; [L] final
  std::vector<LayerActs> layers;     // [layer]; all alias one set when recompute is on
  float* lnf = nullptr;      // (N,C) final norm output
  float* rstdf = nullptr;    // (N)
  float* logits = nullptr;   // (N,V); becomes dlogits in backward (in place)
  float* losses = nullptr;   // (N)
  float* lse_ce = nullptr;   // (N) cross-entropy logsumexp
  // gradient scratch (activation gradients, overwritten each layer)
  float* dres = nullptr;     // (N,C) residual-stream gradient
  float* dln = nullptr;      // (N,C)
  float* dqkv = nullptr;     // (N,QKV)
  float* datt = nullptr;     // (N,NH*HS)
  float* dgu = nullptr;      // (N,2H)
  float* dsw = nullptr;      // (N,H)
  float* dqk_norm = nullptr; // qk_norm: (2*HS) one micro-batch's q,k norm weight gradient (summed over TP)
  std::vector<std::pair<std::string, int64_t>> slices;  // [slice] name, floats (for the report)
};

// Floats the activations need at (B,T) (the whole model, or one shard's local sizes: a shard
// without the head keeps no logits).
int64_t activation_floats(const ModelConfig& c, int B, int T);
int64_t activation_floats(const ShardDims& d, bool recompute, int B, int T);
// Allocates and slices (the only allocation of the training step's activations).
void activations_init(Activations& a, const ModelConfig& c, int B, int T);
void activations_init(Activations& a, const ShardDims& d, bool recompute, int B, int T);

// bf16 operands of the linear layers at (B,T) (in bf16 elements): the weights' copy, the widest
// GEMM input (N x max in-features) and the widest output gradient (N x max out-features, the
// LM head's V).
// Attention adds a bf16 copy of qkv (N x QKV) and, per thread, one query block's scores and
// their gradient (attention_bf16_scratch_floats, counted as 2 bf16 elements per float).
// kHeadRows: under bf16 the blocked LM head and cross-entropy (training, evaluation) run in
// blocks of this many rows, whose fp32 logits live in a kHeadRows x V scratch instead of the
// (N,V) logits (counted with the activations).
constexpr int kHeadRows = 64;
struct Bf16Sizes {
  int64_t weights = 0, inputs = 0, grads = 0, qkv = 0, attn_scratch_floats = 0;
  // the packed bf16 kernel's buffers on every thread, in bf16 elements (held by the kernel, not the
  // model; 0 on a CPU without AVX512-BF16)
  int64_t packed = 0;
  int64_t total() const { return weights + inputs + grads + qkv + 2 * attn_scratch_floats + packed; }
};
Bf16Sizes bf16_sizes(const ModelConfig& c, int B, int T, int threads = 1);
Bf16Sizes bf16_sizes(const ModelConfig& c, const ModelShard& shard, int B, int T, int threads = 1);

struct LoraConfig;

struct MemoryPlan {
  int64_t param_bytes = 0, grad_bytes = 0, optimizer_bytes = 0, activation_bytes = 0;
  // LoRA: the adapters' parameter count and the frozen base's dtype (the items above then count
  // the base as held, the adapters and their gradients and moments, and the adapters' buffers).
  int64_t lora_adapters = 0;
  std::string lora_base_dtype;
  int64_t bf16_bytes = 0;  // bf16 precision: the weights' bf16 copy and the GEMM operand scratch
  int zero_ranks = 1;  // > 1: the optimizer state is this rank's ZeRO-1 shard (the largest one)
  int slots = 1;       // activation sets held at once (a pipeline stage's micro-batches in flight)
  int64_t total() const { return param_bytes + grad_bytes + optimizer_bytes + activation_bytes + bf16_bytes; }
  std::string report() const;  // one line per item, in MiB and bytes
};

// Plan for training at batch (B,T) with AdamW (two fp32 moments per parameter).
// zero_ranks > 1: the AdamW moments are sharded over that many data-parallel ranks (ZeRO-1); the
// plan counts the largest shard (zero_shard_bounds).
// precision bf16 adds bf16_sizes (2 bytes each).
MemoryPlan memory_plan(const ModelConfig& c, int B, int T, int zero_ranks = 1,
                       Precision precision = Precision::kFp32, int threads = 1);
// One shard's plan (shard.hpp): its parameters, gradients and moments, `slots` activation sets of
// its local sizes. The trainer plans with it and `smelt plan` calls it.
// lora (enabled): a LoRA run's plan: the base held as lora->base_dtype says (its compact matrices
// instead of fp32), no base gradients but the norms' and biases' (written, never read), the
// adapters with fp32 gradients and moments (ZeRO-1 over them), the adapters' activations and the
// q8_0 GEMMs' per-thread tiles.
MemoryPlan memory_plan(const ModelConfig& c, const ModelShard& shard, int B, int T, int zero_ranks,
                       Precision precision, int threads, int slots = 1, const LoraConfig* lora = nullptr);
// Physical memory of this machine in bytes (the natural budget for a single-process run).
int64_t memory_physical_bytes();
// Fails, naming every item and the budget, when the plan exceeds budget_bytes (<= 0: no limit).
Status memory_plan_check(const MemoryPlan& p, int64_t budget_bytes);

}  // namespace smelt
