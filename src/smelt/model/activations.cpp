// Activation planning: one table of named slices, used both to count bytes (dry run) and to
// slice the single allocation. Per-layer recomputation keeps only each layer's input.
#include "smelt/model/activations.hpp"

#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "smelt/kernels/kernels.hpp"
#include "smelt/kernels/q8_matmul.hpp"
#include "smelt/model/lora.hpp"
#include "smelt/model/params.hpp"

namespace smelt {

namespace {
// Walks the slice table; with base == nullptr only counts.
// A shard without the head keeps no logits, final norm or cross-entropy rows.
int64_t layout(Activations* a, const ShardDims& d, bool recompute, int B, int T, float* base) {
  const int64_t N = (int64_t)B * T, C = d.C, V = d.head ? d.V : 0, H = d.H;
  const int64_t QKV = d.qkv(), A = d.A();
  const int L = d.L, sets = recompute ? 1 : L;
  int64_t off = 0;
  auto take = [&](const std::string& name, int64_t n) -> float* {
    float* p = base ? base + off : nullptr;
    off += n;
    if (a && base) a->slices.push_back({name, n});
    return p;
  };
  std::vector<float*> resid;
  for (int l = 0; l <= L; l++) resid.push_back(take(fmt::format("resid.{}", l), N * C));
  std::vector<LayerActs> sets_v;
  for (int s = 0; s < sets; s++) {
    std::string p = recompute ? "layer." : fmt::format("layer.{}.", s);
    LayerActs la;
    la.ln1 = take(p + "ln1", N * C);
    la.rstd1 = take(p + "rstd1", N);
    la.qkv = take(p + "qkv", N * QKV);
    la.qk_raw = d.qk_norm ? take(p + "qk_raw", N * (d.NH + d.NKV) * d.HS) : nullptr;
    la.qk_rstd = d.qk_norm ? take(p + "qk_rstd", N * (d.NH + d.NKV)) : nullptr;
    la.att = take(p + "att", N * A);
    la.lse = take(p + "lse", (int64_t)B * d.NH * T);
    la.xmid = take(p + "xmid", N * C);
    la.ln2 = take(p + "ln2", N * C);
    la.rstd2 = take(p + "rstd2", N);
    la.gu = take(p + "gu", N * 2 * H);
    la.sw = take(p + "sw", N * H);
    sets_v.push_back(la);
  }
  float* lnf = take("lnf", d.head ? N * C : 0);
  float* rstdf = take("rstdf", d.head ? N : 0);
  float* logits = take("logits", N * V);
  float* losses = take("losses", N);
  float* lse_ce = take("lse_ce", d.head ? N : 0);
  float* dres = take("dres", N * C);
  float* dln = take("dln", N * C);
  float* dqkv = take("dqkv", N * QKV);
  float* datt = take("datt", N * A);
  float* dgu = take("dgu", N * 2 * H);
  float* dsw = take("dsw", N * H);
  float* dqk_norm = d.qk_norm ? take("dqk_norm", 2 * d.HS) : nullptr;
  if (a && base) {
    a->resid = resid;
    a->layers.clear();
    for (int l = 0; l < L; l++) a->layers.push_back(sets_v[recompute ? 0 : l]);
    a->lnf = lnf; a->rstdf = rstdf; a->logits = logits; a->losses = losses; a->lse_ce = lse_ce;
    a->dres = dres; a->dln = dln; a->dqkv = dqkv; a->datt = datt; a->dgu = dgu; a->dsw = dsw;
    a->dqk_norm = dqk_norm;
  }
  return off;
}
}  // namespace

int64_t activation_floats(const ModelConfig& c, int B, int T) {
  return activation_floats(shard_dims(c, ModelShard{}), c.recompute, B, T);
}

int64_t activation_floats(const ShardDims& d, bool recompute, int B, int T) {
  return layout(nullptr, d, recompute, B, T, nullptr);
}

void activations_init(Activations& a, const ModelConfig& c, int B, int T) {
  activations_init(a, shard_dims(c, ModelShard{}), c.recompute, B, T);
}

void activations_init(Activations& a, const ShardDims& d, bool recompute, int B, int T) {
  a.B = B;
  a.T = T;
  a.recompute = recompute;
  a.slices.clear();
  a.buffer.assign(activation_floats(d, recompute, B, T), 0.0f);
  layout(&a, d, recompute, B, T, a.buffer.data());
}

std::string MemoryPlan::report() const {
  auto line = [](const char* what, int64_t b) {
    return fmt::format("  {:<16} {:>10.1f} MiB  ({} bytes)\n", what, b / 1048576.0, b);
  };
  return line("parameters", param_bytes) + line("gradients", grad_bytes) +
         line(zero_ranks > 1 ? "optimizer shard" : "optimizer state", optimizer_bytes) +
         (zero_ranks > 1 ? fmt::format("  (ZeRO-1: AdamW moments sharded over {} ranks, this rank keeps at most 1/{} "
                                       "of them)\n", zero_ranks, zero_ranks)
                         : std::string()) +
         line("activations", activation_bytes) +
         (slots > 1 ? fmt::format("  (pipeline: {} micro-batches' activations in flight)\n", slots) : std::string()) +
         (bf16_bytes ? line("bf16 operands", bf16_bytes) : std::string()) +
         (lora_adapters ? fmt::format("  (LoRA: {} adapter parameters train; the base is frozen, its layer matrices "
                                      "held in {}, and only its norms' gradients are written)\n",
                                      lora_adapters, lora_base_dtype)
                        : std::string()) +
         line("total", total());
}

Bf16Sizes bf16_sizes(const ModelConfig& c, int B, int T, int threads) {
  return bf16_sizes(c, ModelShard{}, B, T, threads);
}

Bf16Sizes bf16_sizes(const ModelConfig& c, const ModelShard& shard, int B, int T, int threads) {
  const ShardDims d = shard_dims(c, shard);
  const int64_t N = (int64_t)B * T, A = d.A();
  Bf16Sizes s;
  s.weights = param_layout(c, shard).total;
  s.inputs = N * std::max<int64_t>({d.C, A, d.H});
  s.grads = N * std::max<int64_t>({d.qkv(), d.C, 2 * (int64_t)d.H, d.head ? d.V : 0});
  s.qkv = N * d.qkv();
  s.attn_scratch_floats = attention_bf16_scratch_floats(T, std::max(1, threads));
  if (gemm_bf16_native() && gemm_bf16_packed_available()) {
    // the largest of the linear layers' products on each thread, whichever engine the choice takes
    int64_t most = 0;
    for (const LinearShape& l : linear_shapes(d)) {
      if (l.count == 0) continue;  // a stage without the head
      const int in = l.IC, out = l.OC, n = (int)N;
      most = std::max({most, gemm_bf16_packed_scratch_bytes(n, out, in), gemm_bf16_packed_scratch_bytes(n, in, out),
                       gemm_bf16_packed_scratch_bytes(out, in, n)});
    }
    s.packed = std::max(1, threads) * most / 2;
  }
  return s;
}

MemoryPlan memory_plan(const ModelConfig& c, int B, int T, int zero_ranks, Precision precision, int threads) {
  return memory_plan(c, ModelShard{}, B, T, zero_ranks, precision, threads);
}

namespace {
// A LoRA run's items (memory_plan's lora): p already holds the full model's plan.
void lora_plan(MemoryPlan& p, const ModelConfig& c, const ModelShard& shard, int B, int T, Precision precision,
               int threads, const LoraConfig& l) {
  const ParamLayout lay = param_layout(c, shard);
  const LoraLayout ll = lora_layout(c, l);
  const int64_t na = ll.params.total, N = (int64_t)B * T, page = 4096;
  const bool tied = lay.lm_head == lay.wte, q8 = l.base_dtype == "q8_0";
  int64_t fp32 = 0, q8_bytes = 0, grad_bytes = 0, bf16_weights = 0;
  for (const ParamTensor& t : lay.tensors) {
    const bool held = lora_base_compact(l, t);
    if (!held) fp32 += t.size();
    else if (q8) q8_bytes += t.size() / kQ8Block * (int64_t)sizeof(BlockQ8_0);
    if (t.cols == 1) grad_bytes += (4 * t.size() + page - 1) / page * page;  // norms' and biases' pages
    if (t.cols > 1 && (tied || t.offset != lay.wte) && !(held && q8)) bf16_weights += t.size();
  }
  p.lora_adapters = na;
  p.lora_base_dtype = l.base_dtype;
  p.param_bytes = 4 * fp32 + q8_bytes + 4 * na;
  p.grad_bytes = grad_bytes + 4 * na;
  int64_t largest = 0;
  const std::vector<int64_t> b = zero_shard_bounds(na, p.zero_ranks);
  for (int r = 0; r < p.zero_ranks; r++) largest = std::max(largest, b[r + 1] - b[r]);
  p.optimizer_bytes = 2 * largest * 4;
  // u = drop(x) A^T kept per layer and target, du, and with dropout the dropped input and its gradient
  int64_t acts = (int64_t)c.n_layers * kLoraTargets * N * l.rank + N * l.rank;
  if (l.dropout > 0) acts += 2 * N * ll.max_in;
  if (q8) acts += (int64_t)std::max(1, threads) * q8_matmul_scratch_floats(std::max({c.d_model, c.n_heads * c.head_size(), c.ffn_hidden}));
  p.activation_bytes += 4 * acts * p.slots;
  if (precision == Precision::kBf16) {
    const Bf16Sizes z = bf16_sizes(c, shard, B, T, threads);
    p.bf16_bytes = 2 * (z.total() - z.weights + bf16_weights);
  }
}
}  // namespace

MemoryPlan memory_plan(const ModelConfig& c, const ModelShard& shard, int B, int T, int zero_ranks,
                       Precision precision, int threads, int slots, const LoraConfig* lora) {
  MemoryPlan p;
  const ShardDims d = shard_dims(c, shard);
  int64_t n = param_layout(c, shard).total;
  p.param_bytes = n * 4;
  p.grad_bytes = n * 4;
  p.zero_ranks = std::max(1, zero_ranks);
  int64_t largest = 0;
  const std::vector<int64_t> b = zero_shard_bounds(n, p.zero_ranks);
  for (int r = 0; r < p.zero_ranks; r++) largest = std::max(largest, b[r + 1] - b[r]);
  p.optimizer_bytes = 2 * largest * 4;
  p.slots = std::max(1, slots);
  p.activation_bytes = activation_floats(d, c.recompute, B, T) * 4 * p.slots;
  if (precision == Precision::kBf16) {
    p.bf16_bytes = bf16_sizes(c, shard, B, T, threads).total() * 2;
    if (d.head) p.activation_bytes += (int64_t)kHeadRows * d.V * 4;  // the blocked LM head's logits
  }
  if (lora && lora->enabled()) lora_plan(p, c, shard, B, T, precision, threads, *lora);
  return p;
}

int64_t memory_physical_bytes() {
  return (int64_t)sysconf(_SC_PHYS_PAGES) * (int64_t)sysconf(_SC_PAGESIZE);
}

Status memory_plan_check(const MemoryPlan& p, int64_t budget_bytes) {
  if (budget_bytes <= 0 || p.total() <= budget_bytes) return Status::ok();
  return Status::error(fmt::format(
      "[model] the memory plan needs {:.1f} MiB but the budget is {:.1f} MiB:\n{}"
      "fix: a smaller batch or sequence, model.recompute = true, or a smaller model",
      p.total() / 1048576.0, budget_bytes / 1048576.0, p.report()));
}

}  // namespace smelt
