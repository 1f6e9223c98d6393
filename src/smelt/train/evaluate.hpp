// Held-out evaluation (`smelt eval`, the trainer's [eval]): the mean loss of a model over the first
// tokens of held-out shards. Not the training loop (trainer.hpp).
#pragma once
#include <cstdint>
#include <string>

#include "smelt/common/status.hpp"
#include "smelt/dataset/loader.hpp"
#include "smelt/model/model.hpp"

namespace smelt {

struct EvalResult {
  double loss = 0, perplexity = 0;
  double entropy = 0;  // mean entropy (nats) of the predictions, 128 sampled rows per batch
  uint64_t tokens = 0;
  int batches = 0;
};
// Mean loss over the first max_tokens target tokens of `sources` (file order, packed rows shaped
// like base's), on the model's current weights.
Status evaluate(Model& m, const LoaderConfig& base, const std::string& sources, int64_t max_tokens, EvalResult& r);

}  // namespace smelt
