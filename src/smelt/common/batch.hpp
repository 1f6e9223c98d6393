// A training batch as the loader hands it to the model: token ids, next-token targets, document
// segments and positions, and the data source of every token. Buffers are sized once for the
// largest batch and reused. In common/ so the model never sees dataset/ (the loader: loader.hpp).
#pragma once
#include <cstdint>
#include <vector>

namespace smelt {

struct Batch {
  int B = 0;                       // rows in this batch
  int T = 0;                       // columns (sequence length of this batch; bucketed mode varies it)
  std::vector<int32_t> inputs;     // (B,T) token ids; padding positions hold 0
  std::vector<int32_t> targets;    // (B,T) next-token ids; -1 = no loss here (padding, masked EOD)
  std::vector<int32_t> segments;   // (B,T) document index within the row; -1 = padding
  bool mask_segments = true;       // attention stays inside a segment (the loader: [data] doc_mask)
  std::vector<int32_t> positions;  // (B,T) RoPE positions (restart at 0 per document when doc masking)
  std::vector<uint16_t> sources;   // (B,T) index of the blend source each token came from
  uint64_t target_tokens = 0;      // targets != -1
  uint64_t step = 0;               // the global step this batch belongs to
};

}  // namespace smelt
