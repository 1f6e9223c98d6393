// The reference model of `smelt prep`'s [prep.perplexity]: built by the full binary only (it runs
// the decoder, so it needs BLAS and OpenMP, which the light `smelt` does not link). full_main sets
// the factory; the light binary has none and hands such a prep to smelt-full.
#pragma once
#include <memory>

#include "smelt/common/status.hpp"
#include "smelt/refine/refinery.hpp"

namespace smelt {

using PrepReferenceFactory = Status (*)(const PerplexityConfig&, std::unique_ptr<ReferenceScorer>&);
void set_prep_reference_factory(PrepReferenceFactory f);
PrepReferenceFactory prep_reference_factory();  // null in the light binary

// The factory full_main installs: perplexity/ref_scorer.hpp's scorer for c.
Status prep_reference_make(const PerplexityConfig& c, std::unique_ptr<ReferenceScorer>& out);

}  // namespace smelt
