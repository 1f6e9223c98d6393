// One-sequence decoding on a one-slot Decoder: the prompt in chunks, then a row per token.
#include "smelt/model/inference.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace smelt {

Status InferenceSession::init(const ModelConfig& c, const float* params, int max_tokens, int threads,
                              WeightFormat format, std::optional<KvFormat> kv, const LoraAdapters* lora) {
  if (max_tokens <= 0 || max_tokens > c.max_seq_len)
    return Status::error(fmt::format("[inference] max_tokens = {}: must be in [1, max_seq_len = {}] "
                                     "(the RoPE positions the model was trained for)",
                                     max_tokens, c.max_seq_len));
  DecoderOptions o;
  o.slots = 1;
  o.slot_tokens = max_tokens;
  o.max_rows = std::min(max_tokens, kChunk);
  o.threads = threads;
  o.format = format;
  o.kv_cache = kv;
  o.lora = lora;
  rows_.assign(o.max_rows, DecodeRow{});
  return dec_.init(c, params, o);
}

Status InferenceSession::prefill(const int32_t* ids, int n, float* logits_out) {
  if (rows_.empty()) return Status::error("[inference] prefill before init");
  if (n <= 0) return Status::error(fmt::format("[inference] prefill of {} tokens: need at least 1", n));
  const int V = dec_.config().vocab_size;
  if (position() + n > max_tokens())
    return Status::error(fmt::format("[inference] {} cached + {} new tokens exceed max_tokens = {}",
                                     position(), n, max_tokens()));
  for (int i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= V)
      return Status::error(fmt::format("[inference] token {} at input position {} is outside the "
                                       "vocabulary [0, {})", ids[i], i, V));
  for (int done = 0; done < n;) {
    const int m = std::min((int)rows_.size(), n - done);
    for (int i = 0; i < m; i++) rows_[i] = DecodeRow{0, ids[done + i], false};
    done += m;
    const bool last = done == n && logits_out;
    rows_[m - 1].logits = last;
    if (Status s = dec_.step(rows_.data(), m, last ? logits_out : nullptr); !s) return s;
  }
  return Status::ok();
}

}  // namespace smelt
