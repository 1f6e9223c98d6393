// The reference scorer prep calls (refine/reference_scorer.hpp, CCNet's perplexity filter): a
// decoder checkpoint or GGUF file with its tokenizer, scoring a document's bits per byte through
// the KV-cache decoder (model/decoder.hpp) in windows of max_seq_len tokens (docs/quality.md,
// "Perplexity under a reference model"). Not prep's buckets or thresholds, not `smelt eval`.
#pragma once
#include <memory>
#include <string>

#include "smelt/common/status.hpp"
#include "smelt/refine/reference_scorer.hpp"

namespace smelt {

struct RefScorerOptions {
  // A run folder (its newest valid checkpoint), a checkpoint folder (holds manifest.json) or a
  // .gguf file, as `smelt generate` and `smelt eval` resolve --checkpoint / --gguf. A checkpoint
  // brings its tokenizer.json; a GGUF file carries its own.
  std::string checkpoint;
  // Linear layers in f32 | bf16 | f16 | q8_0 | auto: bf16 on AMX, else q8_0 where the int8 decode
  // kernels have AVX2 or AVX512-VNNI, else f32 (the fastest this CPU has for wide steps).
  std::string weights = "auto";
  int max_seq_len = 0;  // tokens per window, in [2, the model's]; 0: the model's max_seq_len
  int batch_rows = 8;   // windows (decoder slots) of one document run together in a step
  int threads = 1;      // OpenMP threads of each decoder step
  // Inference contexts (decoder, KV caches, scratch): up to this many documents are scored at
  // once, one per calling thread; further callers wait for a free one. f32 contexts share the one
  // set of weights; bf16/f16/q8_0 contexts each hold their own converted copy.
  int contexts = 1;
};

// Loads the model and its tokenizer and makes the first context. Errors name the file and what
// was expected (a missing checkpoint, no tokenizer beside it, a tokenizer without an
// end-of-document token or larger than the model's vocabulary, a bad option).
Status make_ref_scorer(const RefScorerOptions& o, std::unique_ptr<ReferenceScorer>& out);

}  // namespace smelt
