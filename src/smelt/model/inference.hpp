// KV-cache decoding of one sequence for the Llama-style decoder (docs/generate.md): a Decoder
// (decoder.hpp) with one slot, fed a prompt in chunks of up to kChunk rows and then one token at
// a time. The same parameters (the flat buffer in ParamLayout order), RoPE table and kernels as
// training. Not sampling (serve/sampling.hpp), not the tokenizer, not training (model.hpp).
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "smelt/common/status.hpp"
#include "smelt/model/config.hpp"
#include "smelt/model/decoder.hpp"

namespace smelt {

class InferenceSession {
 public:
  // Plans the KV cache (L, max_tokens, NKV*HS) for keys and for values and every scratch buffer
  // once; params (layout param_layout(c)) is borrowed and must outlive the session.
  // max_tokens <= c.max_seq_len (the RoPE table and what training saw).
  // bf16: the linear layers run on a bf16 copy of the weights (half the bytes each decoded token
  // reads) with bf16 inputs and fp32 sums; q8_0: on int8 blocks (a quarter of the bytes) with the
  // activations quantized per row; the rest of the arithmetic stays fp32. kv: the KV cache's
  // format (unset: decoder_kv_format's default, a 16-bit cache for f16 and bf16 weights). lora:
  // adapters run unmerged beside the base (borrowed, must outlive the session; nullptr: none).
  Status init(const ModelConfig& c, const float* params, int max_tokens, int threads, WeightFormat format,
              std::optional<KvFormat> kv = std::nullopt, const LoraAdapters* lora = nullptr);
  Status init(const ModelConfig& c, const float* params, int max_tokens, int threads,
              Precision precision = Precision::kFp32) {
    return init(c, params, max_tokens, threads, precision == Precision::kBf16 ? WeightFormat::kBf16 : WeightFormat::kF32);
  }
  // Appends n tokens at positions position()..position()+n-1 (in chunks of up to kChunk rows);
  // logits_out (V) receives the logits of the last one (nullptr: not computed).
  Status prefill(const int32_t* ids, int n, float* logits_out);
  // Appends one token; logits_out (V) receives its next-token logits.
  Status step(int32_t id, float* logits_out) { return prefill(&id, 1, logits_out); }
  // Empties the cache (the next token is at position 0); keeps every buffer.
  void reset() { dec_.clear(0); }

  int position() const { return dec_.position(0); }  // tokens in the cache
  int max_tokens() const { return dec_.slot_tokens(); }
  int64_t bytes() const { return dec_.bytes(); }      // cache + scratch (+ weight copies), bytes
  const ModelConfig& config() const { return dec_.config(); }
  std::string linear_isa() const { return dec_.linear_isa(); }
  KvFormat kv_cache() const { return dec_.kv_cache(); }

  static constexpr int kChunk = 256;  // prefill rows per pass through the layers

 private:
  Decoder dec_;
  std::vector<DecodeRow> rows_;
};

}  // namespace smelt
