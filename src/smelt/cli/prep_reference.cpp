// The reference-model factory of prep (prep_reference.hpp). The function pointer lives in
// prep_cmd.cpp's object (the light binary links it); this file, which pulls in the decoder, is
// linked only where full_main names prep_reference_make.
#include "smelt/cli/prep_reference.hpp"

#include "smelt/perplexity/ref_scorer.hpp"

namespace smelt {

Status prep_reference_make(const PerplexityConfig& c, std::unique_ptr<ReferenceScorer>& out) {
  RefScorerOptions o;
  o.checkpoint = c.checkpoint;
  o.weights = c.weights;
  o.threads = c.threads;
  o.contexts = c.contexts;
  o.batch_rows = c.batch_rows;
  o.max_seq_len = c.max_seq_len;
  return make_ref_scorer(o, out);
}

}  // namespace smelt
