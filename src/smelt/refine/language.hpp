// Script-based language identification: Chinese, English, other. Decides from the mix of scripts
// (Han vs Latin vs others) and, for Latin text, English stop-word hits. Not a general langid model.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "smelt/common/cjk.hpp"

namespace smelt {

struct LanguageGuess {
  std::string lang = "unknown";  // "zh", "en", "other" or "unknown" (no letters at all)
  double confidence = 0;         // [0,1]
  double han_fraction = 0;       // Han characters / letters (Han + other alphabetic)
  double latin_fraction = 0;     // Latin letters / letters
};

LanguageGuess language_detect(std::string_view text_utf8);

// ---- the pieces, shared with quality_compute (which counts in its own single pass) ----

enum class Script : uint8_t { kNone, kLatin, kHan, kKana, kHangul, kCyrillic, kArabic, kOther };

// The script of a letter, or kNone for anything that is not a letter (digits, punctuation,
// spaces, marks). Han covers CJK Unified Ideographs, extension A..H and the compatibility blocks.
Script script_of(char32_t cp);
// The script of a code point already known to be a non-Han letter (Unicode category L*).
Script script_of_letter(char32_t cp);

// Counts of letters per script, and of Latin words (maximal runs of Latin letters) with how many
// of them are English function words. language_decide turns them into a guess.
struct LanguageCounts {
  uint64_t han = 0, kana = 0, hangul = 0, latin = 0, cyrillic = 0, arabic = 0, other = 0;
  uint64_t latin_words = 0;   // runs of Latin letters
  uint64_t en_stop_hits = 0;  // of those, in the English function-word list (english_stop_id)
};

// Index of a lower-case ASCII word packed little-endian into a uint64 (at most 8 letters) in the
// English function-word list, or -1. Indices 0..7 are Gopher's eight stop words (the, be, to,
// of, and, that, have, with); the rest (about 50 more) only serve language detection.
int english_stop_id(uint64_t packed_lower);
inline constexpr int kGopherStopWords = 8;

// Index of a Han character or a two-character word in the Chinese stop-word list, or -1.
// Single characters: zh_stop_id(cp, 0); pairs: zh_stop_id(first, second).
int zh_stop_id(char32_t first, char32_t second);
inline constexpr int kZhStopWords = 48;  // the list's size (ids are 0..kZhStopWords-1)
// A 4096-bit filter over (cp mod 4096) of every character in the Chinese list: false means
// zh_stop_id(cp, x) and zh_stop_id(x, cp) are -1 for any x, without the table lookup.
extern const uint64_t kZhStopFilter[64];
inline bool zh_stop_maybe(char32_t cp) { return (kZhStopFilter[(cp >> 6) & 63] >> (cp & 63)) & 1; }

// Tuning of language_decide, documented in language.cpp.
inline constexpr double kHanWeight = 3.0;          // one Han character ~ three Latin letters of text
inline constexpr double kEnglishStopDensity = 0.12; // English: >= this share of Latin words are
                                                    // English function words

LanguageGuess language_decide(const LanguageCounts& c);

// One letter of script s counted (kNone: nothing), as language_detect and quality_compute count.
inline void language_count_letter(LanguageCounts& c, Script s) {
  switch (s) {
    case Script::kLatin: ++c.latin; break;
    case Script::kHan: ++c.han; break;
    case Script::kKana: ++c.kana; break;
    case Script::kHangul: ++c.hangul; break;
    case Script::kCyrillic: ++c.cyrillic; break;
    case Script::kArabic: ++c.arabic; break;
    case Script::kOther: ++c.other; break;
    case Script::kNone: break;
  }
}

}  // namespace smelt
