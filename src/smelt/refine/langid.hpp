// Statistical language identification for prep: CLD2 (Compact Language Detector 2, Debian's
// libcld2; its tables are compiled in, 160+ languages, offline) by default, or a fastText
// language-ID model the user brings ([prep.language] model = "lid.176.bin" or GlotLID's model.bin).
// Codes are ISO 639-1 where one exists ("en", "zh", "de", "ja"), the model's own label otherwise.
// Not here: what prep keeps (prep.cpp) or the per-language quality rules (quality_score.cpp).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <toml++/toml.h>

#include "smelt/common/status.hpp"

namespace smelt {

struct LangIdConfig {
  // "" (CLD2) or the path of a fastText language-ID model (.bin/.ftz).
  std::string model;
  // A guess less sure than this (its score) counts as "unknown"-ish for the keep decision: a
  // document whose language is in [prep] languages but whose score is below the language's
  // minimum is dropped as "language_unsure". A table per language; "default" applies to the rest.
  // Keys a config gives replace those keys; the others keep theirs. Empty: nothing is unsure.
  // CLD2's scores are shares of the text, not probabilities: see docs/quality.md for values.
  std::map<std::string, double> min_score;  // e.g. {"default": 0.65}
};

void langid_config_read(const toml::table& root, LangIdConfig& c, std::vector<std::string>& errors);
toml::table langid_config_to_toml(const LangIdConfig& c);
struct SectionDoc;
SectionDoc langid_config_doc();  // [prep.language]'s field table (docs check)
std::vector<std::string> langid_config_validate(const LangIdConfig& c);
// The minimum score for lang: min_score[lang], else min_score["default"], else 0.
double langid_min_score(const LangIdConfig& c, const std::string& lang);

struct LangGuess {
  std::string lang = "unknown";  // ISO 639-1 where one exists; "unknown" when nothing is recognised
  double score = 0;              // the model's probability for lang, in [0,1] (CLD2: the share of the
                                 // text in lang, at most 0.5 when CLD2 calls it unreliable; langid.cpp)
  std::vector<std::pair<std::string, double>> top;  // the two best alternatives after lang, best first
};

class LanguageIdentifier {
 public:
  // CLD2 when c.model is empty, else the fastText model (errors name the file and what was expected).
  static Status load(const LangIdConfig& c, std::unique_ptr<LanguageIdentifier>& out);
  virtual ~LanguageIdentifier() = default;
  // Thread-safe; deterministic. Reads at most the first 64 KiB; text without a letter is "unknown".
  virtual LangGuess identify(std::string_view text_utf8) const = 0;
  // "CLD2 (compiled-in tables)" or "fastText lid.176.bin (176 labels)".
  virtual std::string describe() const = 0;
  // A hash of the model (0 for CLD2: its tables are part of the build; else the file's bytes): the
  // resume fingerprint includes it.
  virtual uint64_t content_hash() const = 0;
};

// A language label to ISO 639-1 where one exists: "eng_Latn" and "eng" -> "en", "__label__de" ->
// "de", CLD2's "zh-Hant" -> "zh", "iw" -> "he"; a label without a 639-1 code comes back unchanged
// (lower-cased, prefix and script/region suffix removed: "yue_Hant" -> "yue"). Withdrawn codes
// become current ones ("in" -> "id", "jw" -> "jv"); "un", "und", "zxx" and "" become "unknown".
// Macrolanguage members that models label apart map to the macrolanguage where only it has a
// 639-1 code ("cmn" -> "zh", "arb" -> "ar", "pes" -> "fa"; the list is in scripts/gen-iso639).
std::string iso639_1(std::string_view label);

}  // namespace smelt
