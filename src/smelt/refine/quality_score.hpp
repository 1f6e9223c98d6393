// From signals to decisions: hard filters that always drop (empty, too short, wrong language when
// languages are asked for, ...) and one quality score in [0,1] that drives sampling in prep.
// Not here: measuring (quality_signals.hpp) or the keep/drop draw (prep).
#pragma once
#include <string>
#include <vector>

#include "smelt/common/config.hpp"
#include "smelt/refine/quality_signals.hpp"

namespace smelt {

struct QualityConfig {
  std::vector<std::string> languages;  // empty: any language; else e.g. ["en", "zh"]
  uint64_t min_chars = 1;              // hard: fewer code points drop as "too_short" (0 chars: "empty")
  // thresholds of the Gopher/C4 rules; each failed rule lowers the score (see quality_score.cpp)
  // ... more fields defined by quality_score.cpp's author, each documented with its default
};

// Reads [prep.quality] keys into c (unknown keys are errors via s.finish()).
void quality_config_read(ConfigSection& s, QualityConfig& c);

// The reason a document is dropped outright ("empty", "too_short", "wrong_language", ...), or "" to keep it.
std::string quality_hard_filter(const QualitySignals& q, const QualityConfig& c);

// One score in [0,1]: 1 for text that passes every rule, lower the more and the worse it fails.
double quality_score(const QualitySignals& q, const QualityConfig& c);

// The rule names that failed (for --keep-rejected examples and stats), comma-separated.
std::string quality_failed_rules(const QualitySignals& q, const QualityConfig& c);

}  // namespace smelt
