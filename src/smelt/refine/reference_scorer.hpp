// A reference language model prep scores documents with (CCNet's perplexity filter): bits per byte
// of a document's text under a decoder the user trained. The implementation loads checkpoints and
// runs the model, so it lives above refine/ (perplexity/ref_scorer.hpp); the command line builds
// one and hands it to prep_run. Not here: buckets and thresholds (prep).
#pragma once
#include <string>
#include <string_view>

namespace smelt {

class ReferenceScorer {
 public:
  virtual ~ReferenceScorer() = default;
  // Bits per byte of text under the model (the sum over its tokens of -log2 p(token | the tokens
  // before it), divided by the text's bytes), or -1 for text without bytes. Thread-safe: prep's
  // workers call it at once.
  virtual double bits_per_byte(std::string_view text) = 0;
  // One line for logs and the summary: the checkpoint, its size and the weight format.
  virtual std::string describe() const = 0;
};

}  // namespace smelt
