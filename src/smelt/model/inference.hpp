// KV-cache decoding for the Llama-style decoder (docs/generate.md): the same parameters (the flat
// buffer in ParamLayout order), the same RoPE table and kernels as training, with each layer's
// keys and values kept in a cache planned once, so a new token costs one row through the model.
// Not sampling (serve/sampling.hpp), not the tokenizer, not training (model.hpp).
#pragma once
#include <cstdint>
#include <vector>

#include "smelt/common/status.hpp"
#include "smelt/model/config.hpp"
#include "smelt/model/params.hpp"

namespace smelt {

class InferenceSession {
 public:
  // Plans the KV cache (L, max_tokens, NKV*HS) for keys and for values and every scratch buffer
  // once; params (layout param_layout(c)) is borrowed and must outlive the session.
  // max_tokens <= c.max_seq_len (the RoPE table and what training saw).
  // precision bf16: the linear layers run on a bf16 copy of the weights made here (half the bytes
  // each decoded token reads) with bf16 inputs and fp32 sums; everything else stays fp32.
  Status init(const ModelConfig& c, const float* params, int max_tokens, int threads,
              Precision precision = Precision::kFp32);
  // Appends n tokens at positions position()..position()+n-1 (in chunks of up to kChunk rows);
  // logits_out (V) receives the logits of the last one (nullptr: not computed).
  Status prefill(const int32_t* ids, int n, float* logits_out);
  // Appends one token; logits_out (V) receives its next-token logits.
  Status step(int32_t id, float* logits_out) { return prefill(&id, 1, logits_out); }
  // Empties the cache (the next token is at position 0); keeps every buffer.
  void reset() { pos_ = 0; }

  int position() const { return pos_; }          // tokens in the cache
  int max_tokens() const { return max_tokens_; }
  int64_t bytes() const { return bytes_; }       // cache + scratch, bytes
  const ModelConfig& config() const { return cfg_; }

  static constexpr int kChunk = 256;  // prefill rows per pass through the layers

 private:
  void layer(int l, int n);
  // out (n,OC) = beta out + inp (n,IC) @ W^T, W at params offset w, in the session's precision.
  void linear(float* out, const float* inp, int64_t w, int n, int IC, int OC, float beta);

  ModelConfig cfg_;
  ParamLayout layout_;
  const float* w_ = nullptr;
  Precision precision_ = Precision::kFp32;
  std::vector<uint16_t> w16_, x16_;  // bf16: the weights' copy, one chunk of GEMM inputs
  int max_tokens_ = 0, rows_ = 0, threads_ = 1, pos_ = 0;
  int64_t bytes_ = 0;
  std::vector<float> kcache_, vcache_;  // (L, max_tokens, NKV*HS) each, keys after RoPE
  std::vector<float> rope_;             // (max_tokens, HS/2, 2)
  std::vector<float> x_, ln_, qkv_, att_, gu_, sw_, rstd_;  // (rows, C|C|QKV|NH*HS|2H|H|1)
  std::vector<int32_t> posbuf_;         // (rows)
};

}  // namespace smelt
