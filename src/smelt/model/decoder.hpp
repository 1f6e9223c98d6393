// Batched KV-cache decoding for the Llama-style decoder (docs/generate.md, docs/serve.md): one
// step runs rows from any number of sequences through the model together: each row is one token
// of one sequence (a cache slot), the linear layers are GEMMs over all the step's rows and the
// attention of each row reads only its own slot's keys and values. `smelt generate` uses one slot
// (InferenceSession, inference.hpp); `smelt serve` many (serve/engine.hpp).
//
// Batch invariance: with batch_invariant set (serve), the linear layers run on the
// decode_linear kernels, whose every output element is computed the same way whatever the other
// rows are, and every other op is row-wise; so a sequence's logits are the same bits alone or in
// any batch and with any thread count. Unset, steps with many rows (a prompt) use the training
// GEMMs (faster prefill, results that depend on the row count in the last bits).
// Not sampling (serve/sampling.hpp), not scheduling (serve/engine.hpp), not training (model.hpp).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "smelt/common/status.hpp"
#include "smelt/kernels/decode_attention.hpp"
#include "smelt/kernels/decode_linear.hpp"
#include "smelt/model/config.hpp"
#include "smelt/model/lora.hpp"
#include "smelt/model/params.hpp"

namespace smelt {

// How the linear layers' weights are held: fp32 (exact), bf16 (a bf16 copy, inputs rounded to
// bf16, fp32 sums; the decode kernel, or oneDNN's GEMM for wide steps unless batch invariant), f16 (an IEEE half copy, inputs rounded to half, fp32 sums: the arithmetic of a GGUF F16
// tensor's dot products on CPUs) or q8_0 (int8 blocks of 32 with an fp16 scale; activations
// quantized the same way per row, int8 dot products; a matrix whose rows are not whole blocks of
// 32 stays fp32). Norm weights, the embedding table lookup, RoPE and attention's arithmetic stay
// fp32 in every format; the KV cache is held as DecoderOptions::kv_cache says.
enum class WeightFormat { kF32, kBf16, kF16, kQ8_0 };
const char* weight_format_name(WeightFormat f);  // "f32", "bf16", "f16", "q8_0"
// "f32"/"fp32", "bf16", "f16"/"fp16", "q8_0" (errors name the value and the choices).
Status weight_format_parse(const std::string& s, WeightFormat& out);
// "f32"/"fp32", "f16"/"fp16", "bf16" (errors name the value and the choices).
Status kv_format_parse(const std::string& s, KvFormat& out);

struct DecoderOptions {
  int slots = 1;            // sequences held at once, each with its own KV cache
  int slot_tokens = 0;      // cache length per slot (<= max_seq_len); 0: max_seq_len
  int max_rows = 256;       // rows per step at most (GEMM scratch)
  int threads = 1;
  WeightFormat format = WeightFormat::kF32;
  bool batch_invariant = false;
  // How the KV cache holds keys and values (decode_attention.hpp). Unset: as the weights (f16 for
  // f16, bf16 for bf16), fp32 for f32 and q8_0.
  std::optional<KvFormat> kv_cache;
  // LoRA adapters run unmerged beside the base's linear layers (fp32, row by row: batch invariant
  // in every format); borrowed, must outlive the decoder. nullptr: none.
  const LoraAdapters* lora = nullptr;
};

// The bytes a Decoder with these options will hold (its bytes() after init, which counts its
// buffers as allocated): what a memory plan counts for it before it exists.
int64_t decoder_bytes(const ModelConfig& c, const DecoderOptions& o);
// The KV cache format o.kv_cache gives, or the default for o.format when it is unset.
KvFormat decoder_kv_format(const DecoderOptions& o);

// One row of a step: token `token` appended to slot `slot` at position(slot) (rows of the same
// slot take consecutive positions in the order given); `logits`: this row's next-token logits are
// wanted.
struct DecodeRow {
  int slot = 0;
  int32_t token = 0;
  bool logits = false;
};

class Decoder {
 public:
  // params (layout param_layout(c), fp32) is borrowed and must outlive the decoder (q8_0, f16 and
  // bf16 make their own copies of the linear weights here).
  Status init(const ModelConfig& c, const float* params, const DecoderOptions& o);
  // Runs rows[0..n) (n <= max_rows) through the model. logits_out receives one (V) row per
  // DecodeRow with logits set, in row order (nullptr when none is set). Checks every slot, token
  // and position before touching a cache: on error nothing has changed.
  Status step(const DecodeRow* rows, int n, float* logits_out);
  // Empties a slot (its next token is at position 0); keeps every buffer.
  void clear(int slot) { pos_[slot] = 0; }
  // Drops the slot's tokens from position p on (p <= position(slot)).
  void truncate(int slot, int p) { pos_[slot] = p; }
  // Makes slot `to` hold the first n tokens of slot `from` (n <= position(from)): their keys and
  // values copied layer by layer, position(to) = n. Lets several continuations of one context
  // share its forward pass (eval/scorer.hpp).
  void copy_prefix(int from, int to, int n);

  int position(int slot) const { return pos_[slot]; }
  int slots() const { return opt_.slots; }
  int slot_tokens() const { return opt_.slot_tokens; }
  int max_rows() const { return opt_.max_rows; }
  int64_t bytes() const { return bytes_; }  // caches + weight copies + scratch
  const ModelConfig& config() const { return cfg_; }
  const DecoderOptions& options() const { return opt_; }
  KvFormat kv_cache() const { return kv_; }
  // Where the linear layers run ("decode_linear avx512-vnni", "sgemm", "oneDNN bf16 ...").
  std::string linear_isa() const;

 private:
  void layer(int l, int n);
  // Byte offset of kv head g's row at position pos of layer l in slot `slot`'s cache.
  size_t cache_at(int slot, int l, int g, int pos) const {
    return ((((size_t)slot * cfg_.n_layers + l) * cfg_.n_kv_heads + g) * opt_.slot_tokens + pos) *
           cfg_.head_size() * kv_format_bytes(kv_);
  }
  void attention(int l, int n);
  // The adapters of targets [first, last] of layer l (those present) added to out (n rows, ld ldo) from x.
  void adapters(int l, int first, int last, float* out, int ldo, const float* x, int n);
  // out (n, OC) = beta out + inp (n, IC) @ W^T for the weight at params offset w.
  void linear(float* out, const float* inp, int64_t w, int n, int IC, int OC, float beta);

  ModelConfig cfg_;
  DecoderOptions opt_;
  ParamLayout layout_;
  const float* w_ = nullptr;
  std::vector<uint16_t> w16_, x16_;  // bf16 / f16: the weights' copy; bf16: one step's GEMM inputs
  std::vector<float> xr_;            // f16: one step's inputs rounded to half
  std::vector<BlockQ8_0> wq_, xq_;   // q8_0: the quantized weights, one step's quantized rows
  std::unordered_map<int64_t, int64_t> q_at_;  // q8_0: a weight's float offset -> its first block in wq_
  std::vector<int> pos_;             // (slots) tokens in each cache
  int64_t bytes_ = 0;
  KvFormat kv_ = KvFormat::kF32;
  // (slots, L, NKV, slot_tokens, HS) elements of format kv_ each, keys after RoPE: a head's
  // positions are contiguous, one stream for attention to read
  std::vector<char> kcache_, vcache_;
  std::vector<float> scores_;           // (threads, group heads, slot_tokens): attention's scores
  std::vector<float> rope_;             // (slot_tokens, HS/2, 2)
  std::vector<float> x_, ln_, qkv_, att_, gu_, sw_, rstd_, head_;  // per-row scratch
  std::vector<float> qk_raw_, qk_rstd_;  // qk_norm: per-row q,k before their norm, and its scales
  std::vector<int32_t> posbuf_, slotbuf_, tokbuf_;                 // (max_rows)
  std::vector<float> lora_u_;                                      // (threads, rank): the adapters' scratch
};

}  // namespace smelt
