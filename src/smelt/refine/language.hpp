// Script-based language identification: Chinese, English, other. Decides from the mix of scripts
// (Han vs Latin vs others) and, for Latin text, English stop-word hits. Not a general langid model.
#pragma once
#include <string>
#include <string_view>

namespace smelt {

struct LanguageGuess {
  std::string lang = "unknown";  // "zh", "en", "other" or "unknown" (no letters at all)
  double confidence = 0;         // [0,1]
  double han_fraction = 0;       // Han characters / letters (Han + other alphabetic)
  double latin_fraction = 0;     // Latin letters / letters
};

LanguageGuess language_detect(std::string_view text_utf8);

}  // namespace smelt
