// From signals to decisions: hard filters that always drop (empty, too short, damaged encoding) and one quality score in [0,1] that drives sampling in prep.
// Not here: measuring (quality_signals.hpp) or the keep/drop draw (prep).
//
// The score (docs/quality.md has the table): start at 1; every rule that fails multiplies it by
//   factor = clamp(1 - penalty_severity * excess, penalty_floor, 1)
// where excess says how far past its threshold t the value v is, on a 0..1-ish scale:
//   a minimum                          (t - v) / t
//   a maximum on an unbounded value    (v - t) / t        (word count, word length, symbol ratio)
//   a maximum on a fraction in [0,1]   (v - t) / (1 - t)  (1 at the worst possible value)
// Yes/no rules (lorem ipsum, curly brace) multiply by their own fixed factor. Rules that measure
// the same thing are one family and count once, with the smallest factor of the family: duplicate
// lines (count, chars), duplicate paragraphs (count, chars), top 2/3/4-grams, duplicate 5..10-grams.
#pragma once
#include <string>
#include <vector>

#include "smelt/common/config.hpp"
#include "smelt/refine/quality_signals.hpp"

namespace smelt {

struct QualityConfig {
  bool enabled = true;                 // prep's switch: false skips signals, filters and score

  // ---- hard filters: these drop, whatever the score ----
  uint64_t min_chars = 1;              // hard: fewer code points drop as "too_short" (0 chars: "empty")
  double max_replacement_char_fraction = 0.01;  // U+FFFD above this share of chars: "replacement_chars"
  double max_mojibake_fraction = 0.002;  // double-encoded characters above this share: "mojibake"

  // ---- rule groups (false: the group never lowers the score) ----
  bool gopher_quality = true;
  bool gopher_repetition = true;
  bool c4 = true;
  bool html = true;                    // page-level HTML signals (only for HTML inputs)

  // ---- shape of the penalty ----
  double penalty_severity = 1.0;       // how fast a rule's factor falls with its excess
  double penalty_floor = 0.05;         // the smallest factor one rule (or family) can give

  // ---- Gopher quality (Rae et al. 2021, A.1.1) ----
  uint64_t min_words = 50;             // "gopher_min_words"
  uint64_t max_words = 100000;         // "gopher_max_words"
  uint64_t zh_min_words = 100;         // the same bounds for Chinese, where every Han character is
  uint64_t zh_max_words = 200000;      // a word, so these are (mostly) characters
  double min_mean_word_length = 3;     // "gopher_mean_word_length"; only when Han characters are
  double max_mean_word_length = 10;    // at most half of the words
  double max_symbol_word_ratio = 0.1;  // "gopher_symbol_ratio": ("#" + ellipses) per word
  double max_bullet_line_fraction = 0.9;    // "gopher_bullet_lines"
  double max_ellipsis_line_fraction = 0.3;  // "gopher_ellipsis_lines"
  double min_alpha_word_fraction = 0.8;     // "gopher_alpha_words"
  uint64_t min_stop_words = 2;         // "gopher_stop_words": distinct; only for "en" and "zh"

  // ---- Gopher repetition (A.1.2) ----
  double max_dup_line_fraction = 0.30;       // "gopher_dup_lines"
  double max_dup_line_char_fraction = 0.20;  // "gopher_dup_line_chars"
  double max_dup_para_fraction = 0.30;       // "gopher_dup_paras"
  double max_dup_para_char_fraction = 0.20;  // "gopher_dup_para_chars"
  double max_top_2gram_char_fraction = 0.20; // "gopher_top_2gram" ...
  double max_top_3gram_char_fraction = 0.18;
  double max_top_4gram_char_fraction = 0.16;
  double max_dup_5gram_char_fraction = 0.15; // "gopher_dup_5gram" ...
  double max_dup_6gram_char_fraction = 0.14;
  double max_dup_7gram_char_fraction = 0.13;
  double max_dup_8gram_char_fraction = 0.12;
  double max_dup_9gram_char_fraction = 0.11;
  double max_dup_10gram_char_fraction = 0.10;

  // ---- C4 (Raffel et al. 2020, 2.2) ----
  double min_terminal_punct_line_fraction = 0.12;  // "c4_terminal_punct" (FineWeb's line_punct_thr);
                                                   // judged on the larger of the line and the
                                                   // paragraph fraction (hard-wrapped text)
  double max_javascript_line_fraction = 0.1;       // "c4_javascript"
  double max_policy_line_fraction = 0.1;           // "c4_policy"
  double lorem_ipsum_factor = 0.05;                // "c4_lorem_ipsum": C4 drops such pages
  double curly_brace_factor = 1.0;                 // "c4_curly_brace": C4 drops such pages; 1 = off
                                                   // (code and math have braces: docs/quality.md)

  // ---- HTML page signals ----
  double max_html_link_text_ratio = 0.8;  // "html_link_text": link text / visible text of the page
};

// Reads [prep.quality] of root into c through its field table: wrong types and unknown keys go to
// errors; the values are judged by quality_config_check.
void quality_config_read(const toml::table& root, QualityConfig& c, std::vector<std::string>& errors);
// The section with every key (the resolved config).
toml::table quality_config_to_toml(const QualityConfig& c);
struct SectionDoc;
SectionDoc quality_config_doc();  // [prep.quality]'s field table (docs check)

// Rejects values no rule can work with: each key's limits from the table (a fraction outside
// [0, 1], a negative length), then a minimum above its maximum and an unknown language. One
// message per problem, "[prep.quality] key = value: ...". Empty when c is usable.
std::vector<std::string> quality_config_check(const QualityConfig& c);

// The reason a document is dropped outright ("empty", "too_short", "replacement_chars"), or "" to
// keep it. (The language filter is prep's: [prep] languages, langid.hpp.)
std::string quality_hard_filter(const QualitySignals& q, const QualityConfig& c);

// One score in [0,1]: 1 for text that passes every rule, lower the more and the worse it fails.
double quality_score(const QualitySignals& q, const QualityConfig& c);

// The rule names that failed (for --keep-rejected examples and stats), comma-separated.
std::string quality_failed_rules(const QualitySignals& q, const QualityConfig& c);

}  // namespace smelt
