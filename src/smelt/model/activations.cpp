// Activation planning: one table of named slices, used both to count bytes (dry run) and to
// slice the single allocation. Per-layer recomputation keeps only each layer's input.
#include "smelt/model/activations.hpp"

#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "smelt/kernels/kernels.hpp"
#include "smelt/model/params.hpp"

namespace smelt {

namespace {
// Walks the slice table; with base == nullptr only counts.
int64_t layout(Activations* a, const ModelConfig& c, int B, int T, float* base) {
  const int64_t N = (int64_t)B * T, C = c.d_model, V = c.vocab_size, H = c.ffn_hidden;
  const int64_t QKV = c.qkv_size(), A = (int64_t)c.n_heads * c.head_size();
  const int L = c.n_layers, sets = c.recompute ? 1 : L;
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
    std::string p = c.recompute ? "layer." : fmt::format("layer.{}.", s);
    LayerActs la;
    la.ln1 = take(p + "ln1", N * C);
    la.rstd1 = take(p + "rstd1", N);
    la.qkv = take(p + "qkv", N * QKV);
    la.att = take(p + "att", N * A);
    la.lse = take(p + "lse", (int64_t)B * c.n_heads * T);
    la.xmid = take(p + "xmid", N * C);
    la.ln2 = take(p + "ln2", N * C);
    la.rstd2 = take(p + "rstd2", N);
    la.gu = take(p + "gu", N * 2 * H);
    la.sw = take(p + "sw", N * H);
    sets_v.push_back(la);
  }
  float* lnf = take("lnf", N * C);
  float* rstdf = take("rstdf", N);
  float* logits = take("logits", N * V);
  float* losses = take("losses", N);
  float* lse_ce = take("lse_ce", N);
  float* dres = take("dres", N * C);
  float* dln = take("dln", N * C);
  float* dqkv = take("dqkv", N * QKV);
  float* datt = take("datt", N * A);
  float* dgu = take("dgu", N * 2 * H);
  float* dsw = take("dsw", N * H);
  if (a && base) {
    a->resid = resid;
    a->layers.clear();
    for (int l = 0; l < L; l++) a->layers.push_back(sets_v[c.recompute ? 0 : l]);
    a->lnf = lnf; a->rstdf = rstdf; a->logits = logits; a->losses = losses; a->lse_ce = lse_ce;
    a->dres = dres; a->dln = dln; a->dqkv = dqkv; a->datt = datt; a->dgu = dgu; a->dsw = dsw;
  }
  return off;
}
}  // namespace

int64_t activation_floats(const ModelConfig& c, int B, int T) {
  return layout(nullptr, c, B, T, nullptr);
}

void activations_init(Activations& a, const ModelConfig& c, int B, int T) {
  a.B = B;
  a.T = T;
  a.recompute = c.recompute;
  a.slices.clear();
  a.buffer.assign(activation_floats(c, B, T), 0.0f);
  layout(&a, c, B, T, a.buffer.data());
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
         (bf16_bytes ? line("bf16 operands", bf16_bytes) : std::string()) +
         line("total", total());
}

Bf16Sizes bf16_sizes(const ModelConfig& c, int B, int T, int threads) {
  const int64_t N = (int64_t)B * T, A = (int64_t)c.n_heads * c.head_size();
  Bf16Sizes s;
  s.weights = param_layout(c).total;
  s.inputs = N * std::max<int64_t>({c.d_model, A, c.ffn_hidden});
  s.grads = N * std::max<int64_t>({c.qkv_size(), c.d_model, 2 * (int64_t)c.ffn_hidden, c.vocab_size});
  s.qkv = N * c.qkv_size();
  s.attn_scratch_floats = attention_bf16_scratch_floats(T, std::max(1, threads));
  return s;
}

MemoryPlan memory_plan(const ModelConfig& c, int B, int T, int zero_ranks, Precision precision, int threads) {
  MemoryPlan p;
  int64_t n = param_layout(c).total;
  p.param_bytes = n * 4;
  p.grad_bytes = n * 4;
  p.zero_ranks = std::max(1, zero_ranks);
  int64_t shard = 0;
  const std::vector<int64_t> b = zero_shard_bounds(n, p.zero_ranks);
  for (int r = 0; r < p.zero_ranks; r++) shard = std::max(shard, b[r + 1] - b[r]);
  p.optimizer_bytes = 2 * shard * 4;
  p.activation_bytes = activation_floats(c, B, T) * 4;
  if (precision == Precision::kBf16) {
    p.bf16_bytes = bf16_sizes(c, B, T, threads).total() * 2;
    p.activation_bytes += (int64_t)kHeadRows * c.vocab_size * 4;  // the blocked LM head's logits
  }
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
