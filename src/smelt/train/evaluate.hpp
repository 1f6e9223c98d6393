// Held-out evaluation (`smelt eval`, the trainer's [eval]): the mean loss of a model over the first
// tokens of held-out shards, in nats per token and in bits per byte of the text those tokens spell,
// and that text itself (for the compressors beside it, compressors.hpp). Not the training loop
// (trainer.hpp).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "smelt/common/status.hpp"
#include "smelt/dataset/loader.hpp"
#include "smelt/model/decoder.hpp"
#include "smelt/model/model.hpp"

namespace smelt {

class Tokenizer;

struct EvalResult {
  double loss = 0, perplexity = 0;  // nats per target token, e^loss
  double entropy = 0;  // mean entropy (nats) of the predictions, 128 sampled rows per batch
  uint64_t tokens = 0;
  // The text the target tokens spell (token_byte_lengths): its bytes, and the loss per byte in bits
  // (sum of the losses / (ln 2 x bytes)); -1 when no tokenizer was given.
  uint64_t bytes = 0;
  double bits_per_byte = -1;
  double seconds = 0;  // wall time of the evaluation
  int batches = 0;
};

// The evaluation's view of a tokenizer: every id's length in bytes of text. A byte-level BPE token
// is its bytes; the end-of-document token is 1 (the newline that separates documents in
// eval_text); other special tokens 0.
struct EvalText {
  std::vector<uint32_t> bytes;  // [id]
  int64_t eod = -1;
  static EvalText from(const Tokenizer& t);
};

// Mean loss over the first max_tokens target tokens of `sources` (file order, packed rows shaped
// like base's; never past one pass), on the model's current weights. With `text`, also bytes and
// bits per byte; with `targets`, the evaluated target ids in order. `forward` replaces
// m.forward_loss for each batch (a pipeline stage's part of it: the losses and the entropy are
// then the model's own, zero on a stage without the head).
using EvalForward = std::function<Status(const Batch&, float&)>;
Status evaluate(Model& m, const LoaderConfig& base, const std::string& sources, int64_t max_tokens, EvalResult& r,
                const EvalText* text = nullptr, std::vector<int32_t>* targets = nullptr,
                const EvalForward& forward = {});
// What evaluate reads of a model: a batch's loss, then that forward's per-token losses and mean
// prediction entropy (over up to 128 rows). The overload above fills it from a Model; the trainer
// fills it from the GPU model ([train] device = "cuda").
struct EvalModel {
  int max_seq_len = 0;
  EvalForward forward;
  std::function<const float*()> token_losses;
  std::function<double()> entropy;
};
Status evaluate(const EvalModel& m, const LoaderConfig& base, const std::string& sources, int64_t max_tokens,
                EvalResult& r, const EvalText* text = nullptr, std::vector<int32_t>* targets = nullptr);

// The text of evaluated targets: tokens decoded, each end-of-document token a newline, other
// special tokens nothing. Its size is the EvalResult's bytes.
std::string eval_text(const Tokenizer& t, const std::vector<int32_t>& targets);

// How far the next-token distributions of one weight format (q8_0) are from another's (f32) on
// held-out text, both through the decoder (decoder.hpp) on the same rows: mean and largest
// KL(p_ref || p_test) per target token, how often their argmax agrees, and both losses.
struct KlResult {
  double mean_kl = 0, max_kl = 0;  // nats
  double greedy_agreement = 0;     // fraction of positions whose argmax is the same
  uint64_t agree = 0, tokens = 0, bytes = 0;
  double loss = 0, ref_loss = 0;                        // nats per token, test and reference
  double bits_per_byte = -1, ref_bits_per_byte = -1;   // with text
  double seconds = 0;
};
// Rows as evaluate() reads them, attended as the training forward attends them (with [data]
// doc_mask each document of a row on its own, else the whole row).
Status evaluate_kl(const ModelConfig& c, const float* params, WeightFormat test, WeightFormat ref,
                   const LoaderConfig& base, const std::string& sources, int64_t max_tokens, int threads,
                   KlResult& r, const EvalText* text = nullptr);

}  // namespace smelt
