// Quality signals of one document's text: Gopher quality and repetition rules, C4 line rules,
// character entropy, script/language, and the HTML signals the extractor measured. Pure
// measurement: thresholds and the score live in quality_score.hpp. Chinese is first-class: words
// are counted as characters where there are no spaces, repetition uses character n-grams.
//
// Units, exactly (quality_signals.cpp has the details):
//   char   a code point of the text, whitespace included.
//   word   a maximal run of non-whitespace, non-Han code points, or one Han character. A run made
//          only of punctuation/symbols that touches a Han character (Chinese punctuation such as
//          "，" or "（" written without spaces) is not a word, as "," in "dog," is not one.
//   line   the text between "\n"s, trimmed of whitespace; lines with nothing left are not counted.
//   paragraph  lines between blank (empty or whitespace-only) lines.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "smelt/refine/language.hpp"

namespace smelt {

// Measured by the HTML extractor over the whole page; absent for non-HTML inputs.
struct HtmlSignals {
  bool present = false;
  double tag_density = 0;      // tags per 1000 bytes of HTML (html_extract.hpp)
  double link_text_ratio = 0;  // visible text bytes inside <a> / visible text bytes
};

struct QualitySignals {
  // The language: the script-based guess quality_compute makes (zh, en, other, unknown), replaced in
  // prep by the statistical identifier's (quality_set_language): lang is then an ISO 639-1 code and
  // confidence the identifier's score.
  LanguageGuess language;
  std::vector<std::pair<std::string, double>> lang_top;  // the identifier's next two guesses
  HtmlSignals html;
  // size
  uint64_t chars = 0;              // code points
  uint64_t words = 0;              // whitespace words; Han characters count one word each
  uint64_t han_words = 0;          // of those, Han characters
  uint64_t lines = 0;              // non-empty lines
  uint64_t paragraphs = 0;         // blank-line-separated blocks
  // Gopher quality (Rae et al. 2021, "Scaling Language Models", appendix A.1.1)
  double mean_word_length = 0;     // in code points, over non-Han words that are not all
                                   // punctuation, leading/trailing punctuation not counted
                                   // ("dog." is 3); 0 when there are none
  double symbol_word_ratio = 0;    // ("#" + "..." + "…") / words; "..." counted as Python's
                                   // str.count does (non-overlapping: "......" is two)
  double bullet_line_fraction = 0; // lines starting with a bullet (•‣◦●▪■·・- * + – ✓ ..., "1.",
                                   // "1)", "(1)", "a)", "一、", "（一）")
  double ellipsis_line_fraction = 0; // lines ending in "..." or "…"
  double alpha_word_fraction = 0;  // words with at least one letter (Unicode L*; Han included)
  uint64_t stop_words = 0;         // distinct stop words found: the Chinese list when the language is
                                   // "zh", else Gopher's English eight (matched case-insensitively
                                   // against runs of letters)
  uint64_t stop_words_zh = 0, stop_words_en = 0;  // both counts (stop_words is one of them)
  // Gopher repetition (appendix A.1.2; computed as datatrove's GopherRepetitionFilter, see .cpp)
  double dup_line_fraction = 0;        // duplicate lines / lines
  double dup_para_fraction = 0;        // duplicate paragraphs / paragraphs
  double dup_line_char_fraction = 0;   // chars in duplicate lines / chars
  double dup_para_char_fraction = 0;   // chars in duplicate paragraphs / chars
  double top_ngram_char_fraction[3] = {0, 0, 0};   // n = 2,3,4: chars covered by the most frequent n-gram
  double dup_ngram_char_fraction[6] = {0, 0, 0, 0, 0, 0};  // n = 5..10: chars in duplicated n-grams
  // C4 line rules (Raffel et al. 2020, section 2.2), ASCII case-insensitive
  double terminal_punct_line_fraction = 0;  // lines ending in terminal punctuation (incl. 。！？)
  double terminal_punct_para_fraction = 0;  // paragraphs whose last line does (hard-wrapped text
                                            // ends sentences at paragraph ends, not line ends)
  uint64_t javascript_lines = 0;    // lines containing "javascript"
  uint64_t policy_lines = 0;        // "terms of use", "privacy policy", "cookie policy", "uses cookies",
                                    // "use of cookies", "use cookies", 隐私政策, 使用条款, 服务条款
  bool has_lorem_ipsum = false;     // "lorem ipsum" anywhere
  bool has_curly_brace = false;     // "{" anywhere
  // characters
  double char_entropy = 0;          // Shannon entropy of the code-point distribution, bits
  double replacement_char_fraction = 0;  // U+FFFD / chars (damaged encoding)
  double mojibake_fraction = 0;     // chars in double-encoded sequences / chars (quality_mojibake_chars)

  // Appends the signals as one JSON object ("{...}") to out, with stable key names; fractions
  // rounded to 4 decimals, counts as integers, the html_* keys only when html.present.
  void append_json(std::string& out) const;
};

// Puts the language identifier's answer (langid.hpp) in place of the script guess: lang, its score
// (as language.confidence), the alternatives, and the stop-word count that language uses.
void quality_set_language(QualitySignals& q, std::string lang, double score,
                          std::vector<std::pair<std::string, double>> top);

// Characters that are UTF-8 read as Windows-1252 or Latin-1 and encoded again ("Ã©" for "é", "â€“"
// for "–", "Â " for a no-break space): a lead byte's character (U+00C2..U+00F4) followed by as
// many continuation bytes' characters (U+0080..U+00BF, or Windows-1252's € ‚ ƒ „ … † ‡ ˆ ‰ Š ‹ Œ Ž
// ' ' " " • – — ˜ ™ š › œ ž Ÿ) as that lead byte announces. Counts every character of each such run.
uint64_t quality_mojibake_chars(std::string_view text_utf8);

// Measures text (valid UTF-8); html may be null for non-HTML inputs. Thread-safe (scratch
// buffers are thread-local and reused, so a warm thread does not allocate per document).
void quality_compute(std::string_view text_utf8, const HtmlSignals* html, QualitySignals& out);

}  // namespace smelt
