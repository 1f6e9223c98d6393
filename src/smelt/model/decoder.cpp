// Batched KV-cache decoding over the training model's parameters and row-wise kernels
// (rmsnorm_forward, rope_forward, swiglu_forward, embedding_forward); linear layers on the decode
// kernels (decode_linear.hpp), the training GEMMs for wide non-invariant steps, or bf16 GEMMs.
// Attention over a slot's cache is decode_attention.hpp's. Not sampling, not the
// training forward (model.cpp), not scheduling (serve/engine.cpp).
#include "smelt/model/decoder.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>
#include <omp.h>

#include "smelt/kernels/kernels.hpp"
#include "smelt/obs/trace.hpp"

namespace smelt {

namespace {
// Fewer rows than this: norms, RoPE, SwiGLU and the embedding run on one thread (a parallel
// region's barrier is most of a one-row norm's time), and f32 and bf16 linear layers run on the
// decode kernels (weights read once for all rows) rather than the training GEMMs.
constexpr int kWideRows = 16;

// bf16: whether a step can be wide enough for the training GEMM, whose bf16 input copy (x16_) is
// then allocated; under batch invariance every step runs the decode kernel.
bool bf16_wide_steps(const DecoderOptions& o) { return !o.batch_invariant && o.max_rows >= kWideRows; }

// q8_0: each matrix the linear layers read (not the embedding table, unless it is also the LM
// head) whose rows are whole blocks is quantized.
bool q8_quantized(const ParamLayout& l, const ParamTensor& t) {
  return !(t.cols == 1 || t.cols % kQ8Block || (t.offset == l.wte && l.lm_head != l.wte));
}

// The most query heads one decode_attention_group call takes: a kv head's whole group, up to the
// kernel's limit. Attention's score buffer holds that many heads' scores per thread.
int attention_heads_max(const ModelConfig& c) { return std::min(c.n_heads / c.n_kv_heads, kMaxGroup); }

// The query heads per call in a step of n rows: the group whole (up to attention_heads_max), or
// split into as many parts as give each thread a (row, kv head, part) of its own.
int attention_part(const ModelConfig& c, int threads, int n) {
  const int group = c.n_heads / c.n_kv_heads, items = n * c.n_kv_heads;
  const int parts = items >= threads ? 1 : std::min(group, (threads + items - 1) / items);
  return std::min((group + parts - 1) / parts, attention_heads_max(c));
}
}  // namespace

int64_t decoder_bytes(const ModelConfig& c, const DecoderOptions& o) {
  const int64_t C = c.d_model, HS = c.head_size(), KV = (int64_t)c.n_kv_heads * HS, H = c.ffn_hidden;
  const int64_t A = (int64_t)c.n_heads * HS, r = std::max(1, o.max_rows);
  const int64_t T = o.slot_tokens > 0 ? o.slot_tokens : c.max_seq_len;
  const int64_t cache = (int64_t)o.slots * c.n_layers * T * KV, widest = std::max({C, A, H});
  // the RoPE table, attention's scores, row buffers (x, ln, head, qkv, att, gu, sw, rstd) and the
  // rows' positions, slots and tokens; the KV caches below
  int64_t floats = T * HS + (int64_t)std::max(1, o.threads) * attention_heads_max(c) * T +
                   r * (3 * C + c.qkv_size() + A + 3 * H + 1) + 3 * r;
  if (c.qk_norm) floats += r * (c.n_heads + c.n_kv_heads) * (HS + 1);  // q,k before the norm and their scales
  int64_t halves = 0, q8 = 0;
  if (o.format == WeightFormat::kBf16) {
    halves = param_layout(c).total + (bf16_wide_steps(o) ? r * widest : 0);
    floats += r * widest;
  } else if (o.format == WeightFormat::kF16) {
    halves = param_layout(c).total;
    floats += r * widest;
  } else if (o.format == WeightFormat::kQ8_0) {
    const ParamLayout l = param_layout(c);
    for (const ParamTensor& t : l.tensors)
      if (q8_quantized(l, t)) q8 += t.size() / kQ8Block;
    q8 += r * widest / kQ8Block + 1;
  }
  return 2 * cache * kv_format_bytes(decoder_kv_format(o)) + (int64_t)sizeof(float) * floats +
         (int64_t)sizeof(uint16_t) * halves + (int64_t)sizeof(BlockQ8_0) * q8;
}

KvFormat decoder_kv_format(const DecoderOptions& o) {
  if (o.kv_cache) return *o.kv_cache;
  if (o.format == WeightFormat::kF16) return KvFormat::kF16;
  if (o.format == WeightFormat::kBf16) return KvFormat::kBf16;
  return KvFormat::kF32;
}

Status kv_format_parse(const std::string& s, KvFormat& out) {
  if (s == "f32" || s == "fp32") out = KvFormat::kF32;
  else if (s == "f16" || s == "fp16") out = KvFormat::kF16;
  else if (s == "bf16") out = KvFormat::kBf16;
  else return Status::error(fmt::format("KV cache type \"{}\": expected f32, f16 or bf16", s));
  return Status::ok();
}

const char* weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::kF32: return "f32";
    case WeightFormat::kBf16: return "bf16";
    case WeightFormat::kF16: return "f16";
    case WeightFormat::kQ8_0: return "q8_0";
  }
  return "?";
}

Status weight_format_parse(const std::string& s, WeightFormat& out) {
  if (s == "f32" || s == "fp32") out = WeightFormat::kF32;
  else if (s == "bf16") out = WeightFormat::kBf16;
  else if (s == "f16" || s == "fp16") out = WeightFormat::kF16;
  else if (s == "q8_0") out = WeightFormat::kQ8_0;
  else return Status::error(fmt::format("dtype \"{}\": expected f32, bf16, f16 or q8_0", s));
  return Status::ok();
}

Status Decoder::init(const ModelConfig& c, const float* params, const DecoderOptions& o) {
  if (auto s = model_config_validate(c); !s) return s;
  if (!params) return Status::error("[decoder] no parameter buffer");
  DecoderOptions opt = o;
  if (opt.slot_tokens == 0) opt.slot_tokens = c.max_seq_len;
  if (opt.slot_tokens < 0 || opt.slot_tokens > c.max_seq_len)
    return Status::error(fmt::format("[decoder] {} tokens per sequence: must be in [1, max_seq_len = {}] "
                                     "(the RoPE positions the model was trained for)",
                                     opt.slot_tokens, c.max_seq_len));
  if (opt.slots < 1 || opt.max_rows < 1)
    return Status::error(fmt::format("[decoder] slots = {}, max_rows = {}: both must be >= 1", opt.slots,
                                     opt.max_rows));
  if (opt.lora && (int)opt.lora->layout.layers.size() != c.n_layers)
    return Status::error(fmt::format("[decoder] LoRA adapters for {} layers on a model of {}",
                                     opt.lora->layout.layers.size(), c.n_layers));
  const int C = c.d_model, HS = c.head_size(), KV = c.n_kv_heads * HS, H = c.ffn_hidden;
  const int A = c.n_heads * HS;
  cfg_ = c;
  opt_ = opt;
  opt_.threads = std::max(1, opt.threads);
  layout_ = param_layout(c);
  w_ = params;
  pos_.assign(opt.slots, 0);
  const size_t cache = (size_t)opt.slots * c.n_layers * opt.slot_tokens * KV;
  kv_ = decoder_kv_format(opt);
  kcache_.assign(cache * kv_format_bytes(kv_), 0);
  vcache_.assign(cache * kv_format_bytes(kv_), 0);
  scores_.assign((size_t)opt_.threads * attention_heads_max(c) * opt.slot_tokens, 0.0f);
  rope_.assign((size_t)opt.slot_tokens * HS, 0.0f);
  const std::vector<double> inv_freq = rope_inv_freq(c);
  rope_table(rope_.data(), opt.slot_tokens, HS, inv_freq.data());
  const size_t r = opt.max_rows;
  x_.assign(r * C, 0.0f);
  ln_.assign(r * C, 0.0f);
  head_.assign(r * C, 0.0f);
  qkv_.assign(r * c.qkv_size(), 0.0f);
  att_.assign(r * A, 0.0f);
  gu_.assign(r * 2 * H, 0.0f);
  sw_.assign(r * H, 0.0f);
  rstd_.assign(r, 0.0f);
  const size_t qk_heads = c.qk_norm ? (size_t)(c.n_heads + c.n_kv_heads) : 0;
  qk_raw_.assign(r * qk_heads * HS, 0.0f);
  qk_rstd_.assign(r * qk_heads, 0.0f);
  posbuf_.assign(r, 0);
  slotbuf_.assign(r, 0);
  tokbuf_.assign(r, 0);
  lora_u_.assign(opt.lora ? (size_t)opt_.threads * opt.lora->config.rank : 0, 0.0f);
  const size_t widest = std::max({C, A, H});
  w16_ = {}, x16_ = {}, wq_ = {}, xq_ = {}, xr_ = {};
  kernels_set_threads(opt_.threads);
  if (opt.format == WeightFormat::kBf16) {
    w16_.assign(layout_.total, 0);
    bf16_from_f32(w16_.data(), params, layout_.total);
    if (bf16_wide_steps(opt)) x16_.assign(r * widest, 0);
    xr_.assign(r * widest, 0.0f);
  } else if (opt.format == WeightFormat::kF16) {
    w16_.assign(layout_.total, 0);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < layout_.total; i++) w16_[i] = fp16_from_f32(params[i]);
    xr_.assign(r * widest, 0.0f);
  } else if (opt.format == WeightFormat::kQ8_0) {
    // Each matrix the linear layers read (not the embedding table, unless it is also the LM head)
    // whose rows are whole blocks is quantized; one whose rows are not (IC % 32 != 0) stays fp32,
    // as GGUF's q8_0 files keep such tensors in a float type.
    q_at_.clear();
    int64_t blocks = 0;
    for (const ParamTensor& t : layout_.tensors) {
      if (!q8_quantized(layout_, t)) continue;
      q_at_[t.offset] = blocks;
      blocks += t.size() / kQ8Block;
    }
    wq_.resize(blocks);
    for (const ParamTensor& t : layout_.tensors) {
      auto it = q_at_.find(t.offset);
      if (it == q_at_.end()) continue;
      const int64_t nb = t.cols / kQ8Block;
#pragma omp parallel for schedule(static)
      for (int64_t row = 0; row < t.rows; row++)
        quantize_row_q8_0(wq_.data() + it->second + row * nb, params + t.offset + row * t.cols, t.cols);
    }
    xq_.resize(r * widest / kQ8Block + 1);
  }
  bytes_ = (int64_t)(kcache_.size() + vcache_.size()) +
           (int64_t)sizeof(float) *
               (int64_t)(scores_.size() + rope_.size() + x_.size() + ln_.size() + head_.size() + qkv_.size() +
                         att_.size() + gu_.size() + sw_.size() + rstd_.size() + xr_.size() + qk_raw_.size() +
                         qk_rstd_.size() + 3 * r) +
           (int64_t)sizeof(uint16_t) * (int64_t)(w16_.size() + x16_.size()) +
           (int64_t)sizeof(BlockQ8_0) * (int64_t)(wq_.size() + xq_.size());
  return Status::ok();
}

std::string Decoder::linear_isa() const {
  switch (opt_.format) {
    case WeightFormat::kBf16:
      return std::string("bf16 decode_linear ") + decode_linear_isa() +
             (opt_.batch_invariant ? "" : std::string(", ") + gemm_bf16_isa() + " for wide steps");
    case WeightFormat::kQ8_0: return std::string("q8_0 decode_linear ") + decode_linear_isa();
    case WeightFormat::kF16: return std::string("f16 decode_linear ") + decode_linear_isa();
    case WeightFormat::kF32:
      return std::string("f32 decode_linear ") + decode_linear_isa() + (opt_.batch_invariant ? "" : ", sgemm for wide steps");
  }
  return "?";
}

void Decoder::linear(float* out, const float* inp, int64_t w, int n, int IC, int OC, float beta) {
  switch (opt_.format) {
    case WeightFormat::kF32:
      if (!opt_.batch_invariant && n >= kWideRows) matmul_forward(out, inp, w_ + w, n, IC, OC, beta);
      else decode_linear_f32(out, OC, inp, w_ + w, n, IC, OC, beta);
      return;
    case WeightFormat::kQ8_0: {
      auto it = q_at_.find(w);
      if (it == q_at_.end()) {  // rows that are not whole blocks: kept in fp32
        decode_linear_f32(out, OC, inp, w_ + w, n, IC, OC, beta);
        return;
      }
      const int nb = IC / kQ8Block;
      // Row quantization is row-wise (batch invariant); parallel only when there are many rows.
      kernels_set_threads(n < kWideRows ? 1 : opt_.threads);
#pragma omp parallel for schedule(static)
      for (int i = 0; i < n; i++) quantize_row_q8_0(xq_.data() + (size_t)i * nb, inp + (size_t)i * IC, IC);
      kernels_set_threads(opt_.threads);
      decode_linear_q8_0(out, OC, xq_.data(), wq_.data() + it->second, n, IC, OC, beta);
      return;
    }
    case WeightFormat::kF16:
      // Inputs rounded to half (row-wise, elementwise: batch invariant), then fp32 arithmetic on
      // the widened weights.
      round_to_fp16(xr_.data(), inp, (int64_t)n * IC);
      decode_linear_f16(out, OC, xr_.data(), w16_.data() + w, n, IC, OC, beta);
      return;
    case WeightFormat::kBf16:
      if (!opt_.batch_invariant && n >= kWideRows) {
        matmul_forward_bf16(out, x16_.data(), inp, w16_.data() + w, n, IC, OC, beta);
        return;
      }
      // Inputs rounded to bf16 (elementwise: batch invariant), then fp32 arithmetic on the
      // widened weights, as f16.
      round_to_bf16(xr_.data(), inp, (int64_t)n * IC);
      decode_linear_bf16(out, OC, xr_.data(), w16_.data() + w, n, IC, OC, beta);
      return;
  }
}

// Causal attention of each row's query over its slot's cache (keys 0..its position), a group of
// query heads sharing a kv head at a time (decode_attention_group reads that head's keys and
// values once). Groups are split into parts when rows x kv heads would leave threads idle; each
// head's result does not depend on the split (bit for bit), so a decode stays batch invariant.
void Decoder::attention(int l, int n) {
  const ModelConfig& c = cfg_;
  const int HS = c.head_size(), NKV = c.n_kv_heads, QKV = c.qkv_size(), A = c.n_heads * HS;
  const int group = c.n_heads / NKV, T = opt_.slot_tokens;
  const int part = attention_part(c, opt_.threads, n), parts = (group + part - 1) / part;
  const float scale = 1.0f / std::sqrt((float)HS);
#pragma omp parallel for collapse(3) schedule(static)
  for (int i = 0; i < n; i++)
    for (int kvh = 0; kvh < NKV; kvh++)
      for (int p = 0; p < parts; p++) {
        const int h = kvh * group + p * part, G = std::min(part, group - p * part);
        const size_t at = cache_at(slotbuf_[i], l, kvh, 0);
        decode_attention_group(att_.data() + (size_t)i * A + (size_t)h * HS,
                               qkv_.data() + (size_t)i * QKV + (size_t)h * HS, G, kcache_.data() + at,
                               vcache_.data() + at, kv_, HS, posbuf_[i] + 1, HS, scale,
                               scores_.data() + (size_t)omp_get_thread_num() * part * T);
      }
}

void Decoder::adapters(int l, int first, int last, float* out, int ldo, const float* x, int n) {
  const LoraAdapters* a = opt_.lora;
  if (!a) return;
  const int rank = a->config.rank;
  for (int t = first; t <= last; t++) {
    const LoraSlot& s = a->layout.layers[l][t];
    if (s.a < 0) continue;
#pragma omp parallel for schedule(static) num_threads(opt_.threads) if (n >= kWideRows)
    for (int i = 0; i < n; i++)
      lora_apply_rows(*a, l, t, out + (int64_t)i * ldo, ldo, x + (int64_t)i * s.in, 1,
                      lora_u_.data() + (size_t)omp_get_thread_num() * rank);
  }
}

void Decoder::layer(int l, int n) {
  TraceSpan span("decoder.layer", "layer", l);
  const ModelConfig& c = cfg_;
  const int C = c.d_model, H = c.ffn_hidden, HS = c.head_size(), NH = c.n_heads;
  const int NKV = c.n_kv_heads, QKV = c.qkv_size(), A = NH * HS, KV = NKV * HS;
  const int threads = opt_.threads;
  const LayerOffsets& o = layout_.layers[l];
  const float eps = (float)c.norm_eps;
  const int row_threads = n < kWideRows ? 1 : threads;

  kernels_set_threads(row_threads);
  rmsnorm_forward(ln_.data(), rstd_.data(), x_.data(), w_ + o.ln1, n, C, eps);
  kernels_set_threads(threads);
  linear(qkv_.data(), ln_.data(), o.wqkv, n, C, QKV, 0.0f);
  adapters(l, kLoraQ, kLoraV, qkv_.data(), QKV, ln_.data(), n);
  kernels_set_threads(row_threads);
  if (o.bqkv >= 0) bias_forward(qkv_.data(), w_ + o.bqkv, n, QKV);
  if (o.qk_norm >= 0) {  // row-wise: batch invariant
    head_rmsnorm_forward(qkv_.data(), qk_raw_.data(), qk_rstd_.data(), w_ + o.qk_norm, n, QKV, 0, NH, HS, eps);
    head_rmsnorm_forward(qkv_.data(), qk_raw_.data() + (size_t)n * NH * HS, qk_rstd_.data() + (size_t)n * NH,
                         w_ + o.qk_norm + HS, n, QKV, A, NKV, HS, eps);
  }
  rope_forward(qkv_.data(), posbuf_.data(), rope_.data(), n, n, QKV, 0, NH, HS);
  rope_forward(qkv_.data(), posbuf_.data(), rope_.data(), n, n, QKV, A, NKV, HS);
  kernels_set_threads(threads);
  for (int i = 0; i < n; i++)
    for (int g = 0; g < NKV; g++) {
      const size_t at = cache_at(slotbuf_[i], l, g, posbuf_[i]);
      const float* row = qkv_.data() + (size_t)i * QKV + (size_t)g * HS;
      kv_store(kcache_.data() + at, row + A, HS, kv_);
      kv_store(vcache_.data() + at, row + A + KV, HS, kv_);
    }
  attention(l, n);
  linear(x_.data(), att_.data(), o.wo, n, A, C, 1.0f);  // residual add (beta 1)
  adapters(l, kLoraO, kLoraO, x_.data(), C, att_.data(), n);
  kernels_set_threads(row_threads);
  rmsnorm_forward(ln_.data(), rstd_.data(), x_.data(), w_ + o.ln2, n, C, eps);
  kernels_set_threads(threads);
  linear(gu_.data(), ln_.data(), o.wgu, n, C, 2 * H, 0.0f);
  adapters(l, kLoraGate, kLoraUp, gu_.data(), 2 * H, ln_.data(), n);
  kernels_set_threads(row_threads);
  swiglu_forward(sw_.data(), gu_.data(), n, H);
  kernels_set_threads(threads);
  linear(x_.data(), sw_.data(), o.wdown, n, H, C, 1.0f);
  adapters(l, kLoraDown, kLoraDown, x_.data(), C, sw_.data(), n);
}

void Decoder::copy_prefix(int from, int to, int n) {
  if (from == to) {
    pos_[to] = n;
    return;
  }
  const size_t bytes = (size_t)n * cfg_.head_size() * kv_format_bytes(kv_);  // n positions of one head
  for (int l = 0; l < cfg_.n_layers; l++)
    for (int g = 0; g < cfg_.n_kv_heads; g++) {
      const size_t src = cache_at(from, l, g, 0), dst = cache_at(to, l, g, 0);
      std::memcpy(kcache_.data() + dst, kcache_.data() + src, bytes);
      std::memcpy(vcache_.data() + dst, vcache_.data() + src, bytes);
    }
  pos_[to] = n;
}

Status Decoder::step(const DecodeRow* rows, int n, float* logits_out) {
  if (!w_) return Status::error("[decoder] step before init");
  const ModelConfig& c = cfg_;
  const int C = c.d_model, V = c.vocab_size;
  if (n <= 0 || n > opt_.max_rows)
    return Status::error(fmt::format("[decoder] a step of {} rows: must be in [1, {}]", n, opt_.max_rows));
  // Validate everything first: a failed step changes no cache.
  int wanted = 0;
  for (int i = 0; i < n; i++) {
    const DecodeRow& r = rows[i];
    if (r.slot < 0 || r.slot >= opt_.slots)
      return Status::error(fmt::format("[decoder] row {}: slot {} outside [0, {})", i, r.slot, opt_.slots));
    if (r.token < 0 || r.token >= V)
      return Status::error(fmt::format("[decoder] row {}: token {} is outside the vocabulary [0, {})", i,
                                       r.token, V));
    wanted += r.logits;
  }
  if (wanted && !logits_out) return Status::error("[decoder] logits wanted but no output buffer");
  for (int i = 0; i < n; i++) {
    int p = pos_[rows[i].slot];
    for (int j = 0; j < i; j++) p += rows[j].slot == rows[i].slot;
    if (p >= opt_.slot_tokens)
      return Status::error(fmt::format("[decoder] slot {} is full: {} tokens per sequence", rows[i].slot,
                                       opt_.slot_tokens));
    posbuf_[i] = p;
    slotbuf_[i] = rows[i].slot;
    tokbuf_[i] = rows[i].token;
  }
  TraceSpan span("decoder.step", "rows", n);
  kernels_set_threads(n < kWideRows ? 1 : opt_.threads);
  embedding_forward(x_.data(), tokbuf_.data(), w_ + layout_.wte, n, C, V);
  kernels_set_threads(opt_.threads);
  for (int l = 0; l < c.n_layers; l++) layer(l, n);
  for (int i = 0; i < n; i++) pos_[rows[i].slot]++;
  if (!wanted) return Status::ok();
  // Only the rows whose logits are wanted go through the final norm and the LM head.
  TraceSpan head("decoder.head");
  int m = 0;
  for (int i = 0; i < n; i++)
    if (rows[i].logits) std::memcpy(ln_.data() + (size_t)m++ * C, x_.data() + (size_t)i * C, sizeof(float) * C);
  kernels_set_threads(m < kWideRows ? 1 : opt_.threads);
  rmsnorm_forward(head_.data(), rstd_.data(), ln_.data(), w_ + layout_.lnf, m, C, (float)c.norm_eps);
  kernels_set_threads(opt_.threads);
  linear(logits_out, head_.data(), layout_.lm_head, m, C, V, 0.0f);
  return Status::ok();
}

}  // namespace smelt
