// Quality signals of one document's text: Gopher quality and repetition rules, C4 line rules,
// character entropy, script/language, and the HTML signals the extractor measured. Pure
// measurement: thresholds and the score live in quality_score.hpp. Chinese is first-class: words
// are counted as characters where there are no spaces, repetition uses character n-grams.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "smelt/refine/language.hpp"

namespace smelt {

// Measured by the HTML extractor over the whole page; absent for non-HTML inputs.
struct HtmlSignals {
  bool present = false;
  double tag_density = 0;
  double link_text_ratio = 0;
};

struct QualitySignals {
  LanguageGuess language;
  HtmlSignals html;
  // size
  uint64_t chars = 0;              // code points
  uint64_t words = 0;              // whitespace words; Han characters count one word each
  uint64_t lines = 0;              // non-empty lines
  uint64_t paragraphs = 0;         // blank-line-separated blocks
  // Gopher quality
  double mean_word_length = 0;     // in code points, over non-Han words
  double symbol_word_ratio = 0;    // ("#" + "..." + "…") / words
  double bullet_line_fraction = 0; // lines starting with a bullet
  double ellipsis_line_fraction = 0; // lines ending in "..." or "…"
  double alpha_word_fraction = 0;  // words with at least one alphabetic character
  uint64_t stop_words = 0;         // distinct stop words found (English or Chinese list by language)
  // Gopher repetition
  double dup_line_fraction = 0;        // duplicate lines / lines
  double dup_para_fraction = 0;        // duplicate paragraphs / paragraphs
  double dup_line_char_fraction = 0;   // chars in duplicate lines / chars
  double dup_para_char_fraction = 0;   // chars in duplicate paragraphs / chars
  double top_ngram_char_fraction[3] = {0, 0, 0};   // n = 2,3,4: chars covered by the most frequent n-gram
  double dup_ngram_char_fraction[6] = {0, 0, 0, 0, 0, 0};  // n = 5..10: chars in duplicated n-grams
  // C4 line rules
  double terminal_punct_line_fraction = 0;  // lines ending in terminal punctuation (incl. 。！？)
  uint64_t javascript_lines = 0;
  uint64_t policy_lines = 0;        // "terms of use", "privacy policy", "cookie", ...
  bool has_lorem_ipsum = false;
  bool has_curly_brace = false;
  // characters
  double char_entropy = 0;          // Shannon entropy of the code-point distribution, bits
  double replacement_char_fraction = 0;  // U+FFFD / chars (damaged encoding)

  // Appends the signals as one JSON object ("{...}") to out, with stable key names.
  void append_json(std::string& out) const;
};

// Measures text (valid UTF-8); html may be null for non-HTML inputs. Thread-safe.
void quality_compute(std::string_view text_utf8, const HtmlSignals* html, QualitySignals& out);

}  // namespace smelt
