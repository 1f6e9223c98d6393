// Llama-style decoder forward/backward over the planned buffers (docs/model.md): embedding;
// per layer x += o(attn(rope(qkv(rmsnorm(x))))), x += down(swiglu(gate_up(rmsnorm(x))));
// final rmsnorm; LM head (tied or untied); fused softmax cross-entropy.
#include "smelt/model/model.hpp"

#include <chrono>
#include <cmath>
#include <algorithm>
#include <cstring>
#include <optional>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "smelt/common/clock.hpp"
#include "smelt/kernels/kernels.hpp"
#include "smelt/kernels/q8_matmul.hpp"
#include "smelt/obs/trace.hpp"

namespace smelt {

namespace {
// splitmix64 + Box-Muller: the same init on every platform and standard library.
struct InitRng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return ((next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
  double normal() {
    return std::sqrt(-2.0 * std::log(uniform())) * std::cos(6.283185307179586 * uniform());
  }
};
// Op families of the profile (Model::set_profiling), in step order.
enum ProfOp {
  kPEmbedF, kPNormF, kPQkvF, kPRopeF, kPAttnF, kPOF, kPGateUpF, kPSwigluF, kPDownF, kPCopyF,
  kPHeadF, kPCeF, kPCeB, kPHeadB, kPNormB, kPDownB, kPSwigluB, kPGateUpB, kPOB, kPAttnB, kPRopeB,
  kPQkvB, kPEmbedB, kPZeroGrad, kPCount
};
const char* const kProfNames[kPCount] = {
  "fwd embedding", "fwd rmsnorm", "fwd qkv matmul", "fwd rope", "fwd attention", "fwd o matmul",
  "fwd gate_up matmul", "fwd swiglu", "fwd down matmul", "fwd residual copy", "fwd lm_head matmul",
  "fwd cross-entropy", "bwd cross-entropy", "bwd lm_head matmul", "bwd rmsnorm",
  "bwd down matmul", "bwd swiglu", "bwd gate_up matmul", "bwd o matmul", "bwd attention",
  "bwd rope", "bwd qkv matmul", "bwd embedding", "zero_grad"};
}  // namespace

int Model::profile_count() { return kPCount; }
const char* Model::profile_name(int op) { return op >= 0 && op < kPCount ? kProfNames[op] : ""; }
void Model::profile_reset() {
  for (double& x : prof_) x = 0;
}
void Model::prof_start() {
  if (profiling_) prof_last_ = now_s();
}
void Model::prof_mark(int op) {
  if (!profiling_) return;
  double t = now_s();
  prof_[op] += t - prof_last_;
  prof_last_ = t;
}

Status Model::init(const ModelConfig& c, int B, int T, int threads, uint64_t seed,
                   int64_t budget_bytes, int optimizer_shards) {
  return init(c, ModelShard{}, B, T, threads, seed, budget_bytes, optimizer_shards, 1);
}

Status Model::init(const ModelConfig& c, const ModelShard& shard, int B, int T, int threads, uint64_t seed,
                   int64_t budget_bytes, int optimizer_shards, int slots) {
  if (auto s = model_config_validate(c); !s) return s;
  if (auto s = shard_validate(c, shard); !s) return s;
  if (B <= 0 || T <= 0 || T > c.max_seq_len)
    return Status::error(fmt::format("[model] batch {}x{}: need B >= 1 and 1 <= T <= max_seq_len = {}",
                                     B, T, c.max_seq_len));
  cfg_ = c;
  shard_ = shard;
  if (shard_.layer_end < 0) shard_.layer_end = c.n_layers;
  d_ = shard_dims(c, shard_);
  Bmax_ = B;
  Tmax_ = T;
  threads_ = threads;
  layout_ = param_layout(c, shard_);
  slots = std::max(1, slots);
  if (lora_on()) {  // before anything is allocated: what the base is held as decides the buffers
    if (Status s = lora_config_validate(lcfg_); !s) return s;
    if (lcfg_.base_dtype == "bf16" && precision_ != Precision::kBf16)
      return Status::error("[lora] base_dtype = \"bf16\" runs the base's GEMMs on its bf16 copy: it needs bf16 precision");
  }
  plan_ = memory_plan(c, shard_, B, T, optimizer_shards, precision_, threads, slots, lora_on() ? &lcfg_ : nullptr);
  spdlog::info("[model] memory plan for batch {}x{} ({} parameters{}{}{}):\n{}", B, T, layout_.total,
               shard_.whole() ? "" : fmt::format(" of {}, {}", param_count(c), shard_describe(shard_)),
               c.recompute ? ", recompute on" : "",
               precision_ == Precision::kBf16 ? fmt::format(", bf16 GEMMs on {}", gemm_bf16_isa()) : "",
               plan_.report());
  if (auto s = memory_plan_check(plan_, budget_bytes); !s) return s;

  // With LoRA both are mapped lazily: the frozen base's gradients are never written but for its
  // norms', and a compact base's matrices never touch params_. Otherwise all of both is written.
  params_.reset(layout_.total, lora_on());
  grads_.reset(layout_.total, lora_on());
  base16_stale_ = true;
  alloc_q8_base();
  slots_.assign(slots, Slot{});
  slot_ = 0;
  activations_init(acts_, d_, c.recompute, B, T);
  for (int i = 1; i < slots; i++) activations_init(slots_[i].acts, d_, c.recompute, B, T);
  batch_ = nullptr;
  rope_.assign((size_t)c.max_seq_len * c.head_size(), 0.0f);
  if (precision_ == Precision::kBf16) {
    const Bf16Sizes z = bf16_sizes(c, shard_, B, T, threads);
    w16_.reset(z.weights, lora_on());  // (a q8_0 base's matrices have no bf16 copy)
    x16_.assign(z.inputs, 0);
    d16_.assign(z.grads, 0);
    qkv16_.assign(z.qkv, 0);
    attn16_scratch_.assign(z.attn_scratch_floats, 0.0f);
    head_block_.assign(d_.head ? (size_t)kHeadRows * d_.V : 0, 0.0f);
  } else {
    w16_.release();
    x16_ = {}, d16_ = {}, qkv16_ = {}, attn16_scratch_ = {}, head_block_ = {};
  }
  sparsity_scratch_.assign(T, 0.0f);
  inv_freq_ = rope_inv_freq(c);
  rope_table(rope_.data(), c.max_seq_len, c.head_size(), inv_freq_.data());
  init_params(seed);
  return lora_alloc(B, T);
}

int64_t Model::release_step_buffers() {
  int64_t bytes = 0;
  auto drop = [&bytes](auto& v) {
    bytes += (int64_t)(v.capacity() * sizeof(v[0]));
    std::remove_reference_t<decltype(v)>().swap(v);
  };
  drop(acts_.buffer);
  for (Slot& s : slots_) drop(s.acts.buffer);
  drop(x16_), drop(d16_), drop(qkv16_), drop(attn16_scratch_), drop(head_block_), drop(tp_ce_);
  if (!(lora_on() && lcfg_.base_dtype == "bf16")) {  // (a bf16 base's copy is the base itself)
    bytes += (int64_t)(w16_.size() * sizeof(uint16_t));
    w16_.release();
  }
  acts_ = Activations{};
  slots_.assign(1, Slot{});
  slot_ = 0;
  batch_ = nullptr;
  Bmax_ = 0, Tmax_ = 0;  // forward's size check now refuses every batch
  return bytes;
}

// Normal(0, init_std) matrices; the projections into the residual stream (o_proj, down_proj)
// scaled by 1/sqrt(2L) (GPT-2); norms start at 1. The whole model draws one normal (two uniforms)
// per matrix element from one splitmix64 stream, tensor by tensor in layout order; splitmix64's
// state after k draws is seed + k * gamma, so any element's draw is computed in place and a shard
// holds exactly the values of its box in the whole model.
void Model::init_params(uint64_t seed) {
  const ParamLayout full = param_layout(cfg_);
  std::vector<int64_t> before(full.tensors.size() + 1, 0);  // matrix elements drawn before each tensor
  for (size_t i = 0; i < full.tensors.size(); i++)
    before[i + 1] = before[i] + (full.tensors[i].cols == 1 ? 0 : full.tensors[i].size());
  constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;
  std::vector<float> held;  // a compact matrix's values before they are converted
  for (const auto& t : layout_.tensors) {
    const bool conv = compact(t);
    if (conv) held.resize((size_t)t.size());
    float* p = conv ? held.data() : params_.data() + t.offset;
    if (t.full_cols == 1) {  // norms start at 1, biases at 0
      const bool bias = t.name.size() > 5 && t.name.compare(t.name.size() - 5, 5, ".bias") == 0;
      for (int64_t i = 0; i < t.size(); i++) p[i] = bias ? 0.0f : 1.0f;
      continue;
    }
    bool resid = t.name.find("o_proj") != std::string::npos || t.name.find("down_proj") != std::string::npos;
    double std = cfg_.init_std * (resid ? 1.0 / std::sqrt(2.0 * cfg_.n_layers) : 1.0);
    for (int64_t r = 0; r < t.rows; r++)
      for (int64_t k = 0; k < t.cols; k++) {
        const int64_t e = before[t.full_index] + (t.row0 + r) * t.full_cols + t.col0 + k;
        InitRng rng{seed + 2 * (uint64_t)e * kGamma};
        p[r * t.cols + k] = (float)(std * rng.normal());
      }
    if (conv) set_base_tensor(t, p);
  }
}

bool Model::compact(const ParamTensor& t) const { return lora_base_compact(lcfg_, t); }

void Model::alloc_q8_base() {
  wq_ = {};
  q_at_.clear();
  if (!lora_on() || lcfg_.base_dtype != "q8_0") return;
  int64_t blocks = 0;
  for (const ParamTensor& t : layout_.tensors)
    if (compact(t)) {
      q_at_[t.offset] = blocks;
      blocks += t.size() / kQ8Block;
    }
  wq_.resize((size_t)blocks);
}

void Model::set_base_tensor(const ParamTensor& t, const float* v) {
  if (!compact(t)) {
    std::copy(v, v + t.size(), params_.data() + t.offset);
    base16_stale_ = true;
    return;
  }
  if (lcfg_.base_dtype == "bf16") {
    bf16_from_f32(w16_.data() + t.offset, v, t.size());
    return;
  }
  BlockQ8_0* q = wq_.data() + q_at_.at(t.offset);
  const int64_t nb = t.cols / kQ8Block;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < t.rows; r++) quantize_row_q8_0(q + r * nb, v + r * t.cols, t.cols);
}

void Model::use_slot(int i) {
  if (i == slot_) return;
  auto park = [&](Slot& s) {  // swaps the model's current state with a slot's
    std::swap(acts_, s.acts);
    std::swap(batch_, s.batch);
    std::swap(valid_, s.valid);
    std::swap(fused_dloss_, s.fused_dloss);
    std::swap(block_entropy_, s.block_entropy);
  };
  park(slots_[slot_]);  // the current set goes back to its slot (the model holds the empty one)
  park(slots_[i]);
  slot_ = i;
}

void Model::linear_forward(float* out, const float* inp, int64_t w, int N, int IC, int OC, float beta) {
  if (!q_at_.empty())
    if (auto it = q_at_.find(w); it != q_at_.end()) {  // a q8_0 base's matrix
      matmul_forward_q8_0(out, inp, wq_.data() + it->second, N, IC, OC, beta);
      return;
    }
  if (precision_ == Precision::kBf16) {
    if (reference_) matmul_forward_bf16_ref(out, inp, w16_.data() + w, N, IC, OC, beta);
    else matmul_forward_bf16(out, x16_.data(), inp, w16_.data() + w, N, IC, OC, beta);
  } else {
    (reference_ ? matmul_forward_ref : matmul_forward)(out, inp, params_.data() + w, N, IC, OC, beta);
  }
}

// dout nullptr (bf16 only): d16_ already holds the output gradient in bf16.
void Model::linear_backward(float* dinp, int64_t w, const float* dout, const float* inp, int N, int IC, int OC) {
  float* dw = lora_on() ? nullptr : grads_.data() + w;  // a frozen base: the input's gradient only
  if (!q_at_.empty())
    if (auto it = q_at_.find(w); it != q_at_.end()) {
      matmul_backward_input_q8_0(dinp, dout, wq_.data() + it->second, N, IC, OC);
      return;
    }
  if (precision_ == Precision::kBf16) {
    if (reference_) matmul_backward_bf16_ref(dinp, dw, dout, inp, w16_.data() + w, N, IC, OC);
    else matmul_backward_bf16(dinp, dw, d16_.data(), x16_.data(), dout, inp, w16_.data() + w, N, IC, OC);
  } else {
    (reference_ ? matmul_backward_ref : matmul_backward)(dinp, dw, dout, inp, params_.data() + w, N, IC, OC);
  }
}

// qkv (N,QKV) from the GEMM -> + bias -> q,k heads RMSNormed -> RoPE on q,k (what attention reads).
void Model::qkv_extras_forward(int l, int T) {
  const int N = (int)(batch_->B * (int64_t)batch_->T), HS = d_.HS, NH = d_.NH, NKV = d_.NKV, QKV = d_.qkv();
  const LayerOffsets& o = layout_.layers[l];
  const LayerActs& a = acts_.layers[l];
  const float* w = params_.data();
  const int32_t* pos = batch_->positions.empty() ? nullptr : batch_->positions.data();
  const bool ref = reference_;
  if (o.bqkv >= 0) bias_forward(a.qkv, w + o.bqkv, N, QKV);
  if (o.qk_norm >= 0) {
    auto norm = ref ? head_rmsnorm_forward_ref : head_rmsnorm_forward;
    const float eps = (float)cfg_.norm_eps;
    norm(a.qkv, a.qk_raw, a.qk_rstd, w + o.qk_norm, N, QKV, 0, NH, HS, eps);
    norm(a.qkv, a.qk_raw + (int64_t)N * NH * HS, a.qk_rstd + (int64_t)N * NH, w + o.qk_norm + HS, N, QKV, NH * HS,
         NKV, HS, eps);
  }
  if (ref) {
    rope_forward_ref(a.qkv, pos, N, T, QKV, 0, NH, HS, inv_freq_.data());
    rope_forward_ref(a.qkv, pos, N, T, QKV, NH * HS, NKV, HS, inv_freq_.data());
  } else {
    rope_forward(a.qkv, pos, rope_.data(), N, T, QKV, 0, NH, HS);
    rope_forward(a.qkv, pos, rope_.data(), N, T, QKV, NH * HS, NKV, HS);
  }
}

// dqkv from attention -> through RoPE -> through the QK-norm (its weights' gradient summed over the
// TP ranks, each of which saw its own heads) -> the bias's gradient; dqkv is then the GEMM output's.
void Model::qkv_extras_backward(int l, int T) {
  const int N = (int)(batch_->B * (int64_t)batch_->T), HS = d_.HS, NH = d_.NH, NKV = d_.NKV, QKV = d_.qkv();
  const LayerOffsets& o = layout_.layers[l];
  const LayerActs& a = acts_.layers[l];
  const Activations& s = acts_;
  const float* w = params_.data();
  float* g = grads_.data();
  const int32_t* pos = batch_->positions.empty() ? nullptr : batch_->positions.data();
  const bool ref = reference_;
  if (ref) {
    rope_backward_ref(s.dqkv, pos, N, T, QKV, 0, NH, HS, inv_freq_.data());
    rope_backward_ref(s.dqkv, pos, N, T, QKV, NH * HS, NKV, HS, inv_freq_.data());
  } else {
    rope_backward(s.dqkv, pos, rope_.data(), N, T, QKV, 0, NH, HS);
    rope_backward(s.dqkv, pos, rope_.data(), N, T, QKV, NH * HS, NKV, HS);
  }
  if (o.qk_norm >= 0) {
    auto norm = ref ? head_rmsnorm_backward_ref : head_rmsnorm_backward;
    std::memset(s.dqk_norm, 0, sizeof(float) * 2 * HS);
    norm(s.dqkv, s.dqk_norm, a.qk_raw, w + o.qk_norm, a.qk_rstd, N, QKV, 0, NH, HS);
    norm(s.dqkv, s.dqk_norm + HS, a.qk_raw + (int64_t)N * NH * HS, w + o.qk_norm + HS, a.qk_rstd + (int64_t)N * NH,
         N, QKV, NH * HS, NKV, HS);
    tp_sum(s.dqk_norm, 2 * HS);
    for (int i = 0; i < 2 * HS; i++) g[o.qk_norm + i] += s.dqk_norm[i];
  }
  if (o.bqkv >= 0) bias_backward(g + o.bqkv, s.dqkv, N, QKV);
}

void Model::layer_forward(int l, int B, int T) {
  TraceSpan span("forward.layer", "layer", d_.l0 + l);
  const ModelConfig& c = cfg_;
  const int N = B * T, C = d_.C, H = d_.H, HS = d_.HS;
  const int NH = d_.NH, NKV = d_.NKV, QKV = d_.qkv(), A = d_.A();
  const LayerOffsets& o = layout_.layers[l];
  const float* w = params_.data();
  const LayerActs& a = acts_.layers[l];
  const int32_t* seg = batch_->segments.empty() || !batch_->mask_segments ? nullptr : batch_->segments.data();
  float* x = acts_.resid[l];

  const bool ref = reference_;
  auto rmsnorm = ref ? rmsnorm_forward_ref : rmsnorm_forward;
  rmsnorm(a.ln1, a.rstd1, x, w + o.ln1, N, C, (float)c.norm_eps);
  prof_mark(kPNormF);
  linear_forward(a.qkv, a.ln1, o.wqkv, N, C, QKV, 0.0f);
  lora_forward(l, kLoraQ, kLoraV, a.qkv, QKV, a.ln1, N);
  prof_mark(kPQkvF);
  qkv_extras_forward(l, T);
  prof_mark(kPRopeF);
  if (ref) {
    attention_forward_ref(a.att, a.qkv, seg, ref_scratch_.data(), B, T, NH, NKV, HS);
  } else {
    if (precision_ == Precision::kBf16)
      attention_forward_bf16(a.att, a.lse, qkv16_.data(), attn16_scratch_.data(), a.qkv, seg, B, T, NH, NKV, HS);
    else
      attention_forward(a.att, a.lse, a.qkv, seg, B, T, NH, NKV, HS);
  }
  prof_mark(kPAttnF);
  // Row-parallel under TP: each rank's partial product, the residual added once (rank 0), summed.
  if (shard_.tp_rank == 0) std::memcpy(a.xmid, x, sizeof(float) * N * C);
  else std::memset(a.xmid, 0, sizeof(float) * N * C);
  prof_mark(kPCopyF);
  linear_forward(a.xmid, a.att, o.wo, N, A, C, 1.0f);
  lora_forward(l, kLoraO, kLoraO, a.xmid, C, a.att, N);
  tp_sum(a.xmid, (int64_t)N * C);
  prof_mark(kPOF);
  if (between_blocks_) between_blocks_();
  rmsnorm(a.ln2, a.rstd2, a.xmid, w + o.ln2, N, C, (float)c.norm_eps);
  prof_mark(kPNormF);
  linear_forward(a.gu, a.ln2, o.wgu, N, C, 2 * H, 0.0f);
  lora_forward(l, kLoraGate, kLoraUp, a.gu, 2 * H, a.ln2, N);
  prof_mark(kPGateUpF);
  (ref ? swiglu_forward_ref : swiglu_forward)(a.sw, a.gu, N, H);
  prof_mark(kPSwigluF);
  float* y = acts_.resid[l + 1];
  if (shard_.tp_rank == 0) std::memcpy(y, a.xmid, sizeof(float) * N * C);
  else std::memset(y, 0, sizeof(float) * N * C);
  prof_mark(kPCopyF);
  linear_forward(y, a.sw, o.wdown, N, H, C, 1.0f);
  lora_forward(l, kLoraDown, kLoraDown, y, C, a.sw, N);
  tp_sum(y, (int64_t)N * C);
  prof_mark(kPDownF);
}

// Every buffer is sized by rows N = B*T (and T for RoPE/attention scratch), so any batch with
// B*T <= Bmax*Tmax and T <= Tmax fits: bucketed batches trade rows for length.
Status model_batch_check(const char* who, const Batch& b, const ModelConfig& c, int Bmax, int Tmax) {
  if (b.B <= 0 || b.T <= 0 || (int64_t)b.B * b.T > (int64_t)Bmax * Tmax || b.T > Tmax)
    return Status::error(fmt::format("{} batch {}x{} does not fit the planned {}x{} ({} rows, T <= {})", who, b.B, b.T,
                                     Bmax, Tmax, (int64_t)Bmax * Tmax, Tmax));
  const int N = b.B * b.T, V = c.vocab_size;
  if ((int64_t)b.inputs.size() < N || (int64_t)b.targets.size() < N ||
      (!b.segments.empty() && (int64_t)b.segments.size() < N) ||
      (!b.positions.empty() && (int64_t)b.positions.size() < N))
    return Status::error(fmt::format("{} batch buffers are smaller than B*T", who));
  for (int n = 0; n < N; n++) {
    if (b.inputs[n] < 0 || b.inputs[n] >= V || b.targets[n] < -1 || b.targets[n] >= V)
      return Status::error(fmt::format("{} batch position {}: token {} / target {} outside "
                                       "the vocabulary [0, {})", who, n, b.inputs[n], b.targets[n], V));
    if (!b.positions.empty() && (b.positions[n] < 0 || b.positions[n] >= c.max_seq_len))
      return Status::error(fmt::format("{} batch position {}: RoPE position {} outside "
                                       "[0, max_seq_len = {})", who, n, b.positions[n], c.max_seq_len));
  }
  return Status::ok();
}

Status Model::forward_loss(const Batch& b, float& loss) { return forward(b, loss, 0.0f, true); }

Status Model::forward(const Batch& b, float& loss, float grad_dloss) { return forward(b, loss, grad_dloss, false); }

Status Model::forward(const Batch& b, float& loss, float grad_dloss, bool loss_only) {
  const ModelConfig& c = cfg_;
  if (Status s = model_batch_check("[model]", b, c, Bmax_, Tmax_); !s) return s;
  const int N = b.B * b.T, C = c.d_model, V = c.vocab_size;
  TraceSpan span("forward");
  kernels_set_threads(threads_);
  batch_ = &b;
  const float* w = params_.data();
  const bool ref = reference_;
  const bool tp = shard_.tp > 1;
  prof_start();
  if (lora_on()) {  // a training forward draws the next dropout masks; an evaluation none
    lora_drop_ = !loss_only && lcfg_.dropout > 0;
    if (lora_drop_) lora_counter_++;
  }
  // bf16: the weights as they are now (after the last optimizer step, a load or a gather); under
  // LoRA the frozen base's copy is made once, and again only after the base was written.
  if (precision_ == Precision::kBf16) {
    if (!lora_on() || base16_stale_) {
      // Only what the GEMMs read: an untied embedding table is looked up in fp32, never multiplied.
      const bool tied = layout_.lm_head == layout_.wte;
      for (const auto& t : layout_.tensors)
        if (t.cols > 1 && (tied || t.offset != layout_.wte) && !compact(t))  // (a compact base holds its own)
          bf16_from_f32(w16_.data() + t.offset, w + t.offset, t.size());
      base16_stale_ = false;
    }
    const int64_t need = attention_bf16_scratch_floats(Tmax_, threads_);
    if ((int64_t)attn16_scratch_.size() < need) attn16_scratch_.assign(need, 0.0f);  // set_threads raised the count
  }
  if (d_.embed) {
    TraceSpan emb("embedding");
    if (tp) embed_forward_tp(b);
    else (ref ? embedding_forward_ref : embedding_forward)(acts_.resid[0], b.inputs.data(), w + layout_.wte, N, C, V);
    prof_mark(kPEmbedF);
  }
  for (int l = 0; l < d_.L; l++) {
    layer_forward(l, b.B, b.T);
    if (between_blocks_) between_blocks_();
  }
  fused_dloss_ = 0.0f;
  block_entropy_ = -1.0;
  valid_ = 0;
  for (int n = 0; n < N; n++) valid_ += b.targets[n] >= 0;
  if (!d_.head) {  // a pipeline stage before the last: its output goes on to the next stage
    std::memset(acts_.losses, 0, sizeof(float) * N);
    loss = 0.0f;
    return Status::ok();
  }
  TraceSpan head("head.loss");  // the final norm, the LM head and the cross-entropy, to the end
  (ref ? rmsnorm_forward_ref : rmsnorm_forward)(acts_.lnf, acts_.rstdf, acts_.resid[d_.L],
                                                w + layout_.lnf, N, C, (float)c.norm_eps);
  prof_mark(kPNormF);
  const bool train16 = grad_dloss > 0.0f && precision_ == Precision::kBf16;
  // (fp32 keeps the whole-matrix GEMM: its 64-row tiles measured slower than the memory saved)
  if (tp) {
    // The vocabulary-parallel head: this rank's (N, V/tp) logits, the softmax's max, sum and the
    // target's logit summed over the TP ranks; no rank holds a full row.
    linear_forward(acts_.logits, acts_.lnf, layout_.lm_head, N, C, d_.V, 0.0f);
    prof_mark(kPHeadF);
    cross_entropy_tp(b);
  } else if ((train16 || (loss_only && precision_ == Precision::kBf16)) && !ref) {
    // bf16 training, or a bf16 loss alone: the LM head and the cross-entropy (with its gradient
    // when training) in blocks of kHeadRows rows whose logits stay in a cache-sized scratch,
    // never written out as (N,V); the sampled rows' prediction entropy is taken from the block.
    const std::vector<int> rows = entropy_sample(b, entropy_rows_);
    double h = 0.0;
    size_t next = 0;
    for (int r0 = 0; r0 < N; r0 += kHeadRows) {
      const int r = std::min(kHeadRows, N - r0);
      float* lg = head_block_.data();
      linear_forward(lg, acts_.lnf + (int64_t)r0 * C, layout_.lm_head, r, C, V, 0.0f);
      for (; next < rows.size() && rows[next] < r0 + r; next++) h += softmax_entropy(lg + (int64_t)(rows[next] - r0) * V, V);
      if (train16)
        cross_entropy_forward_grad_bf16(acts_.losses + r0, acts_.lse_ce + r0, d16_.data() + (int64_t)r0 * V, lg,
                                        b.targets.data() + r0, grad_dloss, r, V);  // (overwrites the block)
      else
        cross_entropy_forward(acts_.losses + r0, acts_.lse_ce + r0, lg, b.targets.data() + r0, r, V);
    }
    block_entropy_ = rows.empty() ? 0.0 : h / (double)rows.size();
    if (train16) fused_dloss_ = grad_dloss;
    prof_mark(kPHeadF);
  } else {
    linear_forward(acts_.logits, acts_.lnf, layout_.lm_head, N, C, V, 0.0f);
    prof_mark(kPHeadF);
    if (between_blocks_) between_blocks_();
    if (ref) cross_entropy_forward_ref(acts_.losses, acts_.logits, b.targets.data(), N, V);
    else cross_entropy_forward(acts_.losses, acts_.lse_ce, acts_.logits, b.targets.data(), N, V);
  }
  prof_mark(kPCeF);
  double sum = 0.0;  // in row order: deterministic
  for (int n = 0; n < N; n++)
    if (b.targets[n] >= 0) sum += acts_.losses[n];
  loss = valid_ ? (float)(sum / valid_) : 0.0f;
  return Status::ok();
}

// Rows of the vocabulary this rank holds: its part of each token's embedding (zero for tokens
// outside [v0, v0 + V)), summed over the TP ranks.
void Model::embed_forward_tp(const Batch& b) {
  const int N = b.B * b.T, C = d_.C;
  const float* wte = params_.data() + layout_.wte;
  float* x = acts_.resid[0];
  for (int n = 0; n < N; n++) {
    const int64_t t = (int64_t)b.inputs[n] - d_.v0;
    if (t >= 0 && t < d_.V) std::memcpy(x + (int64_t)n * C, wte + t * C, sizeof(float) * C);
    else std::memset(x + (int64_t)n * C, 0, sizeof(float) * C);
  }
  tp_.sum(x, (int64_t)N * C);
}

void Model::embed_backward_tp(const Batch& b) {
  const int N = b.B * b.T, C = d_.C;
  float* g = grads_.data() + layout_.wte;
  const float* dx = acts_.dres;
  for (int n = 0; n < N; n++) {  // in row order: deterministic
    const int64_t t = (int64_t)b.inputs[n] - d_.v0;
    if (t < 0 || t >= d_.V) continue;
    float* row = g + t * C;
    const float* d = dx + (int64_t)n * C;
    for (int k = 0; k < C; k++) row[k] += d[k];
  }
}

// Vocabulary-parallel cross-entropy over (N, V/tp) logits: the row max (max over ranks), the sum of
// exp(logit - max) and the target's logit (sums over ranks: the rank holding the target adds it,
// the others 0); loss = max + log(sum) - target logit; lse_ce keeps max + log(sum) for backward.
void Model::cross_entropy_tp(const Batch& b) {
  const int N = b.B * b.T, V = d_.V;
  const float* lg = acts_.logits;
  tp_ce_.resize(3 * (size_t)N);  // [row max | sum exp | target logit]
  float* mx = tp_ce_.data();
  float* parts = mx + N;
#pragma omp parallel for schedule(static) num_threads(threads_)
  for (int n = 0; n < N; n++) {
    const float* r = lg + (int64_t)n * V;
    float m = -INFINITY;
    for (int j = 0; j < V; j++) m = std::max(m, r[j]);
    mx[n] = m;
  }
  tp_.max(mx, N);
#pragma omp parallel for schedule(static) num_threads(threads_)
  for (int n = 0; n < N; n++) {
    const float* r = lg + (int64_t)n * V;
    double se = 0.0;
    for (int j = 0; j < V; j++) se += std::exp((double)r[j] - mx[n]);
    const int64_t t = (int64_t)b.targets[n] - d_.v0;
    parts[n] = (float)se;
    parts[N + n] = t >= 0 && t < V ? r[t] : 0.0f;
  }
  tp_.sum(parts, 2 * (int64_t)N);
  for (int n = 0; n < N; n++) {
    const float lse = mx[n] + std::log(parts[n]);
    acts_.lse_ce[n] = lse;
    acts_.losses[n] = b.targets[n] >= 0 ? lse - parts[N + n] : 0.0f;
  }
}

// dlogits = dloss (softmax - onehot(target)) on this rank's columns, rows without a target zero;
// in place of the logits.
void Model::cross_entropy_backward_tp(const Batch& b, float dloss) {
  const int N = b.B * b.T, V = d_.V;
  float* lg = acts_.logits;
#pragma omp parallel for schedule(static) num_threads(threads_)
  for (int n = 0; n < N; n++) {
    float* r = lg + (int64_t)n * V;
    if (b.targets[n] < 0) {
      std::memset(r, 0, sizeof(float) * V);
      continue;
    }
    const float lse = acts_.lse_ce[n];
    for (int j = 0; j < V; j++) r[j] = std::exp(r[j] - lse) * dloss;
    const int64_t t = (int64_t)b.targets[n] - d_.v0;
    if (t >= 0 && t < V) r[t] -= dloss;
  }
}

void Model::layer_backward(int l, int B, int T) {
  TraceSpan span("backward.layer", "layer", d_.l0 + l);
  const int N = B * T, C = d_.C, H = d_.H, HS = d_.HS;
  const int NH = d_.NH, NKV = d_.NKV, QKV = d_.qkv(), A = d_.A();
  const LayerOffsets& o = layout_.layers[l];
  const float* w = params_.data();
  float* g = grads_.data();
  const LayerActs& a = acts_.layers[l];
  const Activations& s = acts_;
  const int32_t* seg = batch_->segments.empty() || !batch_->mask_segments ? nullptr : batch_->segments.data();

  // MLP block: y = xmid + down(swiglu(gate_up(rmsnorm(xmid)))); dres holds dy, becomes dxmid.
  const bool ref = reference_;
  auto rmsnorm = ref ? rmsnorm_backward_ref : rmsnorm_backward;
  linear_backward(s.dsw, o.wdown, s.dres, a.sw, N, H, C);
  lora_backward(l, kLoraDown, kLoraDown, s.dsw, s.dres, C, a.sw, N);
  prof_mark(kPDownB);
  (ref ? swiglu_backward_ref : swiglu_backward)(s.dgu, s.dsw, a.gu, N, H);
  prof_mark(kPSwigluB);
  linear_backward(s.dln, o.wgu, s.dgu, a.ln2, N, C, 2 * H);
  lora_backward(l, kLoraGate, kLoraUp, s.dln, s.dgu, 2 * H, a.ln2, N);
  tp_sum(s.dln, (int64_t)N * C);  // column-parallel input: each rank's part of the norm's gradient
  prof_mark(kPGateUpB);
  rmsnorm(s.dres, g + o.ln2, s.dln, a.xmid, w + o.ln2, a.rstd2, N, C);
  prof_mark(kPNormB);
  if (between_blocks_) between_blocks_();
  // Attention block: xmid = x + o(attn(rope(qkv(rmsnorm(x))))); dres becomes dx.
  linear_backward(s.datt, o.wo, s.dres, a.att, N, A, C);
  lora_backward(l, kLoraO, kLoraO, s.datt, s.dres, C, a.att, N);
  prof_mark(kPOB);
  if (ref)
    attention_backward_ref(s.dqkv, s.datt, a.qkv, seg, ref_scratch_.data(), B, T, NH, NKV, HS);
  else if (precision_ == Precision::kBf16)
    attention_backward_bf16(s.dqkv, qkv16_.data(), d16_.data(), attn16_scratch_.data(), s.datt, a.qkv, a.att,
                            a.lse, seg, B, T, NH, NKV, HS);
  else
    attention_backward(s.dqkv, s.datt, a.qkv, a.att, a.lse, seg, B, T, NH, NKV, HS);
  prof_mark(kPAttnB);
  qkv_extras_backward(l, T);
  prof_mark(kPRopeB);
  linear_backward(s.dln, o.wqkv, s.dqkv, a.ln1, N, C, QKV);
  lora_backward(l, kLoraQ, kLoraV, s.dln, s.dqkv, QKV, a.ln1, N);
  tp_sum(s.dln, (int64_t)N * C);
  prof_mark(kPQkvB);
  rmsnorm(s.dres, g + o.ln1, s.dln, acts_.resid[l], w + o.ln1, a.rstd1, N, C);
  prof_mark(kPNormB);
}

void Model::backward(float dloss) {
  const ModelConfig& c = cfg_;
  const Batch& b = *batch_;
  const int N = b.B * b.T, C = c.d_model, V = d_.V;
  TraceSpan span("backward");
  kernels_set_threads(threads_);
  const float* w = params_.data();
  float* g = grads_.data();
  if (dloss == 0.0f) dloss = valid_ ? 1.0f / (float)valid_ : 0.0f;
  const bool ref = reference_;
  const bool tp = shard_.tp > 1;
  prof_start();
  const bool tied = layout_.lm_head == layout_.wte;
  // Where each layer's range of the gradient ends (the next layer's start, the final norm, or the end).
  auto layer_end = [&](int l) {
    return l + 1 < d_.L ? layout_.layers[l + 1].ln1 : layout_.lnf >= 0 ? layout_.lnf : layout_.total;
  };
  // With LoRA the base's ranges are not what trains: the adapters' whole range is final at the end.
  const auto grad_ready = lora_on() ? std::function<void(int64_t, int64_t)>() : grad_ready_;
  if (d_.head) {
    // bf16 (fast kernels): dlogits go straight to bf16, the LM head's GEMM operand.
    const bool dlogits16 = precision_ == Precision::kBf16 && !ref && !tp;
    std::optional<TraceSpan> head(std::in_place, "head.backward");  // to the final norm's gradient
    if (tp) {
      cross_entropy_backward_tp(b, dloss);
    } else if (ref) {
      std::memcpy(ref_logits_.data(), acts_.logits, sizeof(float) * N * V);
      cross_entropy_backward_ref(acts_.logits, ref_logits_.data(), b.targets.data(), dloss, N, V);
    } else if (dlogits16 && fused_dloss_ == dloss) {
      // made by the forward (grad_dloss)
    } else if (dlogits16) {
      cross_entropy_backward_bf16(d16_.data(), acts_.logits, acts_.lse_ce, b.targets.data(), dloss, N, V);
    } else {
      cross_entropy_backward(acts_.logits, acts_.lse_ce, b.targets.data(), dloss, N, V);
    }
    prof_mark(kPCeB);
    fused_dloss_ = 0.0f;
    linear_backward(acts_.dln, layout_.lm_head, dlogits16 ? nullptr : acts_.logits, acts_.lnf, N, C, V);
    tp_sum(acts_.dln, (int64_t)N * C);
    prof_mark(kPHeadB);
    if (between_blocks_) between_blocks_();
    if (grad_ready && !tied) grad_ready(layout_.lm_head, layout_.total);
    std::memset(acts_.dres, 0, sizeof(float) * N * C);
    (ref ? rmsnorm_backward_ref : rmsnorm_backward)(acts_.dres, g + layout_.lnf, acts_.dln, acts_.resid[d_.L],
                                                    w + layout_.lnf, acts_.rstdf, N, C);
    prof_mark(kPNormB);
    if (grad_ready) grad_ready(layout_.lnf, tied ? layout_.total : layout_.lm_head);
  }  // (a stage before the last: dres holds its output's gradient, from the next stage)
  for (int l = d_.L - 1; l >= 0; l--) {
    // Recompute rewrites resid[l+1] with the same bits it already holds (same kernels, inputs).
    if (c.recompute) layer_forward(l, b.B, b.T);
    layer_backward(l, b.B, b.T);
    if (grad_ready) grad_ready(layout_.layers[l].ln1, layer_end(l));
    if (between_blocks_) between_blocks_();
  }
  if (lora_on()) {  // (the frozen embedding's gradient is not needed)
    if (grad_ready_) grad_ready_(0, lora_.params.total);
    return;
  }
  if (!d_.embed) return;  // dres holds the input's gradient, for the previous stage
  TraceSpan emb("embedding.backward");
  if (tp) embed_backward_tp(b);
  else (ref ? embedding_backward_ref : embedding_backward)(g + layout_.wte, acts_.dres, b.inputs.data(), N, C, V);
  prof_mark(kPEmbedB);
  if (grad_ready) grad_ready(layout_.wte, d_.L > 0 ? layout_.layers[0].ln1 : layout_.lnf);
}

// Up to max_rows evenly spaced rows with a target, in increasing order.
std::vector<int> Model::entropy_sample(const Batch& b, int max_rows) {
  const int N = b.B * b.T;
  std::vector<int> rows, out;
  for (int n = 0; n < N; n++)
    if (b.targets[n] >= 0) rows.push_back(n);
  const int take = std::min<int>(max_rows, (int)rows.size());
  for (int i = 0; i < take; i++) out.push_back(rows[(size_t)i * rows.size() / take]);
  return out;
}

double Model::prediction_entropy(int max_rows) const {
  if (!batch_ || !d_.head) return 0.0;
  if (block_entropy_ >= 0.0) return block_entropy_;  // a fused training forward kept no logits
  const int V = d_.V;
  const std::vector<int> rows = entropy_sample(*batch_, max_rows);
  if (rows.empty()) return 0.0;
  const int take = (int)rows.size();
  if (shard_.tp > 1) {
    // H = lse - sum_j p_j logit_j: each rank's columns' part of the sum, summed over the TP ranks.
    std::vector<float> part(take);
    for (int i = 0; i < take; i++) {
      const float* r = acts_.logits + (size_t)rows[i] * V;
      const float lse = acts_.lse_ce[rows[i]];
      double s = 0.0;
      for (int j = 0; j < V; j++) s += std::exp((double)r[j] - lse) * r[j];
      part[i] = (float)s;
    }
    tp_.sum(part.data(), take);
    double total = 0.0;
    for (int i = 0; i < take; i++) total += acts_.lse_ce[rows[i]] - part[i];
    return total / take;
  }
  std::vector<double> h(take);
#pragma omp parallel for schedule(static) num_threads(threads_)
  for (int i = 0; i < take; i++) h[i] = softmax_entropy(acts_.logits + (size_t)rows[i] * V, V);
  double total = 0.0;  // in row order: the same bits for any thread count
  for (double x : h) total += x;
  return total / take;
}

double Model::attention_sparsity(int max_queries, float threshold) const {
  if (!batch_) return 0.0;
  const ModelConfig& c = cfg_;
  const int B = batch_->B, T = batch_->T, HS = d_.HS, NH = d_.NH, QKV = d_.qkv();
  const int group = NH / d_.NKV;
  const int32_t* seg = batch_->segments.empty() || !batch_->mask_segments ? nullptr : batch_->segments.data();
  const float scale = 1.0f / std::sqrt((float)HS);
  const int64_t queries = (int64_t)B * T * NH;
  const int take = (int)std::min<int64_t>(max_queries, queries);
  int64_t below = 0, total = 0;
  const int first = (c.recompute || reference_) ? d_.L - 1 : 0;
  for (int l = first; l < d_.L; l++) {
    const LayerActs& a = acts_.layers[l];
    for (int i = 0; i < take; i++) {
      int64_t qi = i * queries / take;  // (b, t, h) flattened
      const int h = (int)(qi % NH), t = (int)(qi / NH % T), b = (int)(qi / NH / T);
      const float* q = a.qkv + ((size_t)b * T + t) * QKV + (size_t)h * HS;
      const int kvh = h / group;
      float* s = sparsity_scratch_.data();  // (Tmax), sized at init
      float mx = -INFINITY;
      for (int j = 0; j <= t; j++) {
        if (seg && seg[(size_t)b * T + j] != seg[(size_t)b * T + t]) { s[j] = -INFINITY; continue; }
        const float* k = a.qkv + ((size_t)b * T + j) * QKV + (size_t)(NH + kvh) * HS;
        float d = 0;
        for (int e = 0; e < HS; e++) d += q[e] * k[e];
        s[j] = d * scale;
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (int j = 0; j <= t; j++) sum += std::isinf(s[j]) ? 0.0 : std::exp((double)s[j] - mx);
      for (int j = 0; j <= t; j++) {
        if (std::isinf(s[j])) continue;
        total++;
        if (std::exp((double)s[j] - mx) / sum < threshold) below++;
      }
    }
  }
  return total ? (double)below / (double)total : 0.0;
}

void Model::set_reference(bool on) {
  reference_ = on;
  if (on) {
    ref_scratch_.assign((size_t)Tmax_ * Tmax_, 0.0f);
    ref_logits_.assign((size_t)Bmax_ * Tmax_ * d_.V, 0.0f);
  } else {
    ref_scratch_ = {};
    ref_logits_ = {};
  }
}

void Model::zero_grad() {
  prof_start();
  // On the team: one thread's memset of a large model's gradients leaves the others idle. With
  // LoRA the adapters' (the frozen base's norm gradients are made but never read).
  kernels_set_threads(threads_);
  const int64_t n = lora_on() ? (int64_t)lg_.size() : (int64_t)grads_.size(), block = 1 << 18;
  float* g = grads();
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < n; b += block) std::memset(g + b, 0, sizeof(float) * std::min(block, n - b));
  prof_mark(kPZeroGrad);
}

}  // namespace smelt
