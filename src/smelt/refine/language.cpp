// Language by script mix: Han-dominant text is "zh", Latin-dominant text with enough English
// function words is "en", other letters are "other", no letters "unknown". One pass, ASCII fast
// path. Not a statistical language identifier (no n-gram model, no third language told apart).
#include "smelt/refine/language.hpp"

#include <algorithm>

#include <utf8proc.h>

#include "smelt/common/utf8.hpp"

namespace smelt {

Script script_of(char32_t cp) {
  if (cp < 0x80) {
    return ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') ? Script::kLatin : Script::kNone;
  }
  if (is_han(cp)) return Script::kHan;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
      break;
    default:
      return Script::kNone;
  }
  return script_of_letter(cp);
}

Script script_of_letter(char32_t cp) {
  // hiragana, katakana (their punctuation, e.g. U+30FB, is not a letter and never gets here)
  if (is_kana(cp)) return Script::kKana;
  if ((cp >= 0xAC00 && cp <= 0xD7A3) || (cp >= 0x1100 && cp <= 0x11FF) || (cp >= 0x3130 && cp <= 0x318F))
    return Script::kHangul;
  if (cp <= 0x024F || (cp >= 0x1E00 && cp <= 0x1EFF) || (cp >= 0x2C60 && cp <= 0x2C7F) ||
      (cp >= 0xA720 && cp <= 0xA7FF) || (cp >= 0xFF21 && cp <= 0xFF5A))
    return Script::kLatin;  // Latin-1, Extended-A/B, Extended Additional, -C, -D, full-width
  if (cp >= 0x0400 && cp <= 0x052F) return Script::kCyrillic;
  if ((cp >= 0x0600 && cp <= 0x06FF) || (cp >= 0x0750 && cp <= 0x077F) || (cp >= 0xFB50 && cp <= 0xFDFF) ||
      (cp >= 0xFE70 && cp <= 0xFEFF))
    return Script::kArabic;
  return Script::kOther;
}

LanguageGuess language_decide(const LanguageCounts& c) {
  LanguageGuess g;
  const double letters =
      static_cast<double>(c.han + c.kana + c.hangul + c.latin + c.cyrillic + c.arabic + c.other);
  if (letters == 0) return g;  // "unknown", confidence 0
  g.han_fraction = c.han / letters;
  g.latin_fraction = c.latin / letters;
  // Weighted shares: a Han character or a Hangul syllable carries about as much text as three
  // Latin letters, a kana about two; without weights a Chinese page full of Latin identifiers
  // would look Latin-dominant.
  const double w_han = kHanWeight * c.han, w_kana = 2.0 * c.kana, w_hangul = kHanWeight * c.hangul;
  const double total = w_han + w_kana + w_hangul + c.latin + c.cyrillic + c.arabic + c.other;
  const double s_cj = (w_han + w_kana) / total, s_latin = c.latin / total;
  const double s_rest = std::max({w_hangul, double(c.cyrillic), double(c.arabic), double(c.other)}) / total;
  if (s_cj >= s_latin && s_cj >= s_rest) {
    // Japanese mixes kana with Han (kana are usually 40-70% of the two); Chinese has none.
    const double kana_share = static_cast<double>(c.kana) / static_cast<double>(c.han + c.kana);
    if (kana_share < 0.1) {
      g.lang = "zh";
      g.confidence = w_han / total;
    } else {
      g.lang = "other";
      g.confidence = s_cj;
    }
  } else if (s_latin >= s_rest) {
    const double density = c.latin_words ? static_cast<double>(c.en_stop_hits) / c.latin_words : 0.0;
    if (density >= kEnglishStopDensity) {
      g.lang = "en";  // English prose runs at 0.3-0.5; full confidence from twice the threshold
      g.confidence = s_latin * std::min(1.0, density / (2 * kEnglishStopDensity));
    } else {
      g.lang = "other";
      g.confidence = s_latin * (1.0 - density / kEnglishStopDensity);
    }
  } else {
    g.lang = "other";
    g.confidence = s_rest;
  }
  g.confidence = std::clamp(g.confidence, 0.0, 1.0);
  return g;
}

LanguageGuess language_detect(std::string_view s) {
  LanguageCounts c;
  uint64_t key = 0;  // the current Latin word, lower-cased ASCII packed little-endian
  int len = 0;       // its length in letters (0: not in a word)
  bool ascii = true;
  auto end_word = [&] {
    if (len == 0) return;
    ++c.latin_words;
    if (ascii && len <= 8 && english_stop_id(key) >= 0) ++c.en_stop_hits;
    key = 0; len = 0; ascii = true;
  };
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned char b = p[i];
    if (b < 0x80) {
      ++i;
      const unsigned char l = b | 0x20;
      if (l >= 'a' && l <= 'z') {
        ++c.latin;
        if (len < 8) key |= static_cast<uint64_t>(l) << (8 * len);
        ++len;
      } else {
        end_word();
      }
      continue;
    }
    const char32_t cp = utf8_next(s, i);
    const Script sc = script_of(cp);
    if (sc == Script::kLatin) { ++c.latin; ++len; ascii = false; continue; }
    end_word();
    language_count_letter(c, sc);
  }
  end_word();
  return language_decide(c);
}

}  // namespace smelt
