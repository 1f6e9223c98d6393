// KV-cache decoding over the training model's parameters and kernels (rmsnorm_forward,
// matmul_forward, rope_forward, swiglu_forward); only the single-query attention over the cache
// is written here. Not sampling, not the training forward (model.cpp).
#include "smelt/model/inference.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "smelt/kernels/kernels.hpp"

namespace smelt {

namespace {
// Output rows per block of a one-row linear layer: the OpenMP team splits the weight's rows (a
// single input row has no rows to split); fixed, so bits do not depend on the thread count.
constexpr int kGemvBlock = 128;
// Fewer rows than this: norms, RoPE, SwiGLU and the embedding run on one thread.
constexpr int kWideRows = 16;
}  // namespace

Status InferenceSession::init(const ModelConfig& c, const float* params, int max_tokens,
                              int threads, Precision precision) {
  if (auto s = model_config_validate(c); !s) return s;
  if (!params) return Status::error("[inference] no parameter buffer");
  if (max_tokens <= 0 || max_tokens > c.max_seq_len)
    return Status::error(fmt::format("[inference] max_tokens = {}: must be in [1, max_seq_len = {}] "
                                     "(the RoPE positions the model was trained for)",
                                     max_tokens, c.max_seq_len));
  cfg_ = c;
  layout_ = param_layout(c);
  w_ = params;
  max_tokens_ = max_tokens;
  rows_ = std::min(max_tokens, kChunk);
  threads_ = std::max(1, threads);
  pos_ = 0;
  const int C = c.d_model, HS = c.head_size(), KV = c.n_kv_heads * HS, H = c.ffn_hidden;
  const size_t cache = (size_t)c.n_layers * max_tokens * KV;
  kcache_.assign(cache, 0.0f);
  vcache_.assign(cache, 0.0f);
  rope_.assign((size_t)max_tokens * HS, 0.0f);
  rope_table(rope_.data(), max_tokens, HS, (float)c.rope_theta);
  const size_t r = rows_;
  x_.assign(r * C, 0.0f);
  ln_.assign(r * C, 0.0f);
  qkv_.assign(r * c.qkv_size(), 0.0f);
  att_.assign(r * c.n_heads * HS, 0.0f);
  gu_.assign(r * 2 * H, 0.0f);
  sw_.assign(r * H, 0.0f);
  rstd_.assign(r, 0.0f);
  posbuf_.assign(r, 0);
  precision_ = precision;
  if (precision == Precision::kBf16) {
    w16_.assign(layout_.total, 0);
    kernels_set_threads(threads_);
    bf16_from_f32(w16_.data(), params, layout_.total);
    x16_.assign(r * std::max({C, c.n_heads * HS, H}), 0);
  } else {
    w16_ = {}, x16_ = {};
  }
  bytes_ = (int64_t)sizeof(float) *
               (int64_t)(2 * cache + rope_.size() + x_.size() + ln_.size() + qkv_.size() + att_.size() +
                         gu_.size() + sw_.size() + rstd_.size() + posbuf_.size()) +
           (int64_t)sizeof(uint16_t) * (int64_t)(w16_.size() + x16_.size());
  return Status::ok();
}

void InferenceSession::linear(float* out, const float* inp, int64_t w, int n, int IC, int OC, float beta) {
  const bool bf16 = precision_ == Precision::kBf16;
  if (n > 1) {
    if (bf16) matmul_forward_bf16(out, x16_.data(), inp, w16_.data() + w, n, IC, OC, beta);
    else matmul_forward(out, inp, w_ + w, n, IC, OC, beta);
    return;
  }
  // One row: out is OC contiguous floats, so a block of weight rows is a smaller matmul.
  const int blocks = (OC + kGemvBlock - 1) / kGemvBlock;
  if (bf16) {
    kernels_set_threads(1);
    bf16_from_f32(x16_.data(), inp, IC);  // once, before the blocks share it
    kernels_set_threads(threads_);
  }
#pragma omp parallel for schedule(static)
  for (int b = 0; b < blocks; b++) {
    const int o0 = b * kGemvBlock, oc = std::min(kGemvBlock, OC - o0);
    if (bf16)
      gemm_bf16(false, true, 1, oc, IC, x16_.data(), IC, w16_.data() + w + (int64_t)o0 * IC, IC, beta, out + o0, OC);
    else
      matmul_forward(out + o0, inp, w_ + w + (int64_t)o0 * IC, 1, IC, oc, beta);  // nested: 1 thread
  }
}

void InferenceSession::layer(int l, int n) {
  const ModelConfig& c = cfg_;
  const int C = c.d_model, H = c.ffn_hidden, HS = c.head_size(), NH = c.n_heads;
  const int NKV = c.n_kv_heads, QKV = c.qkv_size(), A = NH * HS, KV = NKV * HS;
  const int group = NH / NKV;
  const LayerOffsets& o = layout_.layers[l];
  const float eps = (float)c.norm_eps;

  // Row-wise kernels on a few rows run on one thread: a parallel region costs a barrier, which
  // is most of a one-row norm's time (and far more on a busy machine).
  const int row_threads = n < kWideRows ? 1 : threads_;
  kernels_set_threads(row_threads);
  rmsnorm_forward(ln_.data(), rstd_.data(), x_.data(), w_ + o.ln1, n, C, eps);
  kernels_set_threads(threads_);
  linear(qkv_.data(), ln_.data(), o.wqkv, n, C, QKV, 0.0f);
  kernels_set_threads(row_threads);
  rope_forward(qkv_.data(), posbuf_.data(), rope_.data(), n, n, QKV, 0, NH, HS);
  rope_forward(qkv_.data(), posbuf_.data(), rope_.data(), n, n, QKV, A, NKV, HS);
  kernels_set_threads(threads_);
  float* kc = kcache_.data() + (size_t)l * max_tokens_ * KV;
  float* vc = vcache_.data() + (size_t)l * max_tokens_ * KV;
  for (int i = 0; i < n; i++) {
    const float* row = qkv_.data() + (size_t)i * QKV;
    std::memcpy(kc + (size_t)(pos_ + i) * KV, row + A, sizeof(float) * KV);
    std::memcpy(vc + (size_t)(pos_ + i) * KV, row + A + KV, sizeof(float) * KV);
  }

  // Causal attention of each new query over the cache (keys 0..its position), one pass with an
  // online softmax (Milakov & Gimelshein 2018): no score buffer. Query head h reads kv head h/group.
  const float scale = 1.0f / std::sqrt((float)HS);
#pragma omp parallel for collapse(2) schedule(static)
  for (int i = 0; i < n; i++)
    for (int h = 0; h < NH; h++) {
      const float* q = qkv_.data() + (size_t)i * QKV + (size_t)h * HS;
      const size_t kv_off = (size_t)(h / group) * HS;
      float acc[512];  // HS <= 512 (model_config_validate)
      std::fill(acc, acc + HS, 0.0f);
      float m = -std::numeric_limits<float>::infinity(), sum = 0.0f;
      const int last = pos_ + i;
      for (int j = 0; j <= last; j++) {
        const float* k = kc + (size_t)j * KV + kv_off;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int e = 0; e < HS; e++) s += q[e] * k[e];
        s *= scale;
        const float* v = vc + (size_t)j * KV + kv_off;
        if (s > m) {
          const float r = std::exp(m - s);  // exp(-inf) = 0 on the first key
          sum = sum * r + 1.0f;
#pragma omp simd
          for (int e = 0; e < HS; e++) acc[e] = acc[e] * r + v[e];
          m = s;
        } else {
          const float p = std::exp(s - m);
          sum += p;
#pragma omp simd
          for (int e = 0; e < HS; e++) acc[e] += p * v[e];
        }
      }
      float* out = att_.data() + (size_t)i * A + (size_t)h * HS;
      const float inv = 1.0f / sum;
      for (int e = 0; e < HS; e++) out[e] = acc[e] * inv;
    }

  linear(x_.data(), att_.data(), o.wo, n, A, C, 1.0f);  // residual add (beta 1)
  kernels_set_threads(row_threads);
  rmsnorm_forward(ln_.data(), rstd_.data(), x_.data(), w_ + o.ln2, n, C, eps);
  kernels_set_threads(threads_);
  linear(gu_.data(), ln_.data(), o.wgu, n, C, 2 * H, 0.0f);
  kernels_set_threads(row_threads);
  swiglu_forward(sw_.data(), gu_.data(), n, H);
  kernels_set_threads(threads_);
  linear(x_.data(), sw_.data(), o.wdown, n, H, C, 1.0f);
}

Status InferenceSession::prefill(const int32_t* ids, int n, float* logits_out) {
  if (!w_) return Status::error("[inference] prefill before init");
  const ModelConfig& c = cfg_;
  const int C = c.d_model, V = c.vocab_size;
  if (n <= 0) return Status::error(fmt::format("[inference] prefill of {} tokens: need at least 1", n));
  if (pos_ + n > max_tokens_)
    return Status::error(fmt::format("[inference] {} cached + {} new tokens exceed max_tokens = {}",
                                     pos_, n, max_tokens_));
  for (int i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= V)
      return Status::error(fmt::format("[inference] token {} at input position {} is outside the "
                                       "vocabulary [0, {})", ids[i], i, V));
  kernels_set_threads(threads_);
  for (int done = 0; done < n;) {
    const int m = std::min(rows_, n - done);
    for (int i = 0; i < m; i++) posbuf_[i] = pos_ + i;
    kernels_set_threads(m < kWideRows ? 1 : threads_);
    embedding_forward(x_.data(), ids + done, w_ + layout_.wte, m, C, V);
    kernels_set_threads(threads_);
    for (int l = 0; l < c.n_layers; l++) layer(l, m);
    pos_ += m;
    done += m;
    if (done == n && logits_out) {
      // Only the last row needs the final norm and the LM head.
      const float* last = x_.data() + (size_t)(m - 1) * C;
      kernels_set_threads(1);
      rmsnorm_forward(ln_.data(), rstd_.data(), last, w_ + layout_.lnf, 1, C, (float)c.norm_eps);
      kernels_set_threads(threads_);
      linear(logits_out, ln_.data(), layout_.lm_head, 1, C, V, 0.0f);
    }
  }
  return Status::ok();
}

}  // namespace smelt
