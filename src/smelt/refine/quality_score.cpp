// Hard filters and the quality score from a document's signals (formula at the top of
// quality_score.hpp and in docs/quality.md). Not the measuring, not the sampling draw.
#include "smelt/refine/quality_score.hpp"

#include <algorithm>
#include <fmt/format.h>

#include "smelt/common/config_schema.hpp"

namespace smelt {
namespace {

// Applies the rules in a fixed order; with names set, also lists the ones that fail. Score and
// names come from this one walk, so they cannot disagree.
class Judge {
 public:
  Judge(const QualityConfig& c, std::string* names) : c_(c), names_(names) {}

  double check(const char* name, bool failed, double excess) {
    if (!failed) return 1.0;
    note(name);
    return std::clamp(1.0 - c_.penalty_severity * std::max(0.0, excess), c_.penalty_floor, 1.0);
  }
  double at_least(const char* name, double v, double t) {
    return check(name, v < t, t > 0 ? (t - v) / t : 0.0);
  }
  double at_most(const char* name, double v, double t) {  // unbounded values
    return check(name, v > t, t > 0 ? (v - t) / t : 1.0);
  }
  double at_most_fraction(const char* name, double v, double t) {  // values in [0,1]
    return check(name, v > t, t < 1 ? (v - t) / (1.0 - t) : 0.0);
  }
  double flag(const char* name, bool failed, double factor) {
    if (!failed || factor >= 1.0) return 1.0;  // a factor of 1 switches the rule off
    note(name);
    return std::clamp(factor, 0.0, 1.0);
  }

 private:
  void note(const char* name) {
    if (!names_) return;
    if (!names_->empty()) names_->push_back(',');
    *names_ += name;
  }
  const QualityConfig& c_;
  std::string* names_;
};

double evaluate(const QualitySignals& q, const QualityConfig& c, std::string* names) {
  Judge j(c, names);
  double s = 1.0;
  const std::string& lang = q.language.lang;
  const bool zh = lang == "zh";
  const double words = static_cast<double>(q.words);
  if (c.gopher_quality) {
    s *= j.at_least("gopher_min_words", words, static_cast<double>(zh ? c.zh_min_words : c.min_words));
    s *= j.at_most("gopher_max_words", words, static_cast<double>(zh ? c.zh_max_words : c.max_words));
    // Mean word length says nothing about Han text (every Han word is one character long):
    // the rule applies when Han characters are at most half of the words.
    if (q.words > q.han_words && 2 * q.han_words <= q.words) {
      s *= j.at_least("gopher_mean_word_length", q.mean_word_length, c.min_mean_word_length);
      s *= j.at_most("gopher_mean_word_length", q.mean_word_length, c.max_mean_word_length);  // not both
    }
    s *= j.at_most("gopher_symbol_ratio", q.symbol_word_ratio, c.max_symbol_word_ratio);
    s *= j.at_most_fraction("gopher_bullet_lines", q.bullet_line_fraction, c.max_bullet_line_fraction);
    s *= j.at_most_fraction("gopher_ellipsis_lines", q.ellipsis_line_fraction, c.max_ellipsis_line_fraction);
    s *= j.at_least("gopher_alpha_words", q.alpha_word_fraction, c.min_alpha_word_fraction);
    // Stop-word lists exist for English and Chinese only; other languages are not judged by them
    // (the language is the identifier's, langid.hpp).
    if (zh || lang == "en")
      s *= j.at_least("gopher_stop_words", static_cast<double>(q.stop_words), static_cast<double>(c.min_stop_words));
  }
  if (c.gopher_repetition) {
    // families: one factor each, the smallest (evaluated in order, so the names list is stable)
    double f = j.at_most_fraction("gopher_dup_lines", q.dup_line_fraction, c.max_dup_line_fraction);
    f = std::min(f, j.at_most_fraction("gopher_dup_line_chars", q.dup_line_char_fraction, c.max_dup_line_char_fraction));
    s *= f;
    f = j.at_most_fraction("gopher_dup_paras", q.dup_para_fraction, c.max_dup_para_fraction);
    f = std::min(f, j.at_most_fraction("gopher_dup_para_chars", q.dup_para_char_fraction, c.max_dup_para_char_fraction));
    s *= f;
    const double top_t[3] = {c.max_top_2gram_char_fraction, c.max_top_3gram_char_fraction,
                             c.max_top_4gram_char_fraction};
    static const char* kTop[3] = {"gopher_top_2gram", "gopher_top_3gram", "gopher_top_4gram"};
    f = 1.0;
    for (int k = 0; k < 3; ++k) f = std::min(f, j.at_most_fraction(kTop[k], q.top_ngram_char_fraction[k], top_t[k]));
    s *= f;
    const double dup_t[6] = {c.max_dup_5gram_char_fraction, c.max_dup_6gram_char_fraction,
                             c.max_dup_7gram_char_fraction, c.max_dup_8gram_char_fraction,
                             c.max_dup_9gram_char_fraction, c.max_dup_10gram_char_fraction};
    static const char* kDup[6] = {"gopher_dup_5gram", "gopher_dup_6gram", "gopher_dup_7gram",
                                  "gopher_dup_8gram", "gopher_dup_9gram", "gopher_dup_10gram"};
    f = 1.0;
    for (int k = 0; k < 6; ++k) f = std::min(f, j.at_most_fraction(kDup[k], q.dup_ngram_char_fraction[k], dup_t[k]));
    s *= f;
  }
  if (c.c4 && q.lines > 0) {
    const double lines = static_cast<double>(q.lines);
    // C4 judges lines; hard-wrapped text (plain-text files, mail, man pages) breaks lines inside
    // sentences, so its paragraph ends are judged instead when they do better.
    s *= j.at_least("c4_terminal_punct", std::max(q.terminal_punct_line_fraction, q.terminal_punct_para_fraction),
                    c.min_terminal_punct_line_fraction);
    s *= j.at_most_fraction("c4_javascript", q.javascript_lines / lines, c.max_javascript_line_fraction);
    s *= j.at_most_fraction("c4_policy", q.policy_lines / lines, c.max_policy_line_fraction);
    s *= j.flag("c4_lorem_ipsum", q.has_lorem_ipsum, c.lorem_ipsum_factor);
    s *= j.flag("c4_curly_brace", q.has_curly_brace, c.curly_brace_factor);
  }
  if (c.html && q.html.present)
    s *= j.at_most_fraction("html_link_text", q.html.link_text_ratio, c.max_html_link_text_ratio);
  return std::clamp(s, 0.0, 1.0);
}

}  // namespace

namespace {

using Q = QualityConfig;

// [prep.quality]: the hard filters, the rule groups, the penalty and every rule's threshold (the
// rule names in quoted comments are quality_failed_rules' names, docs/quality.md has the table).
const Schema<QualityConfig>& quality_schema() {
  const Limits unit = in_range(0, 1), non_negative = at_least(0);
  static const Schema<QualityConfig> s{
      "prep.quality",
      {field("enabled", &Q::enabled, "false: no signals, hard filters or score"),
       field("min_chars", &Q::min_chars, "hard filter: fewer code points drop as too_short"),
       field("max_replacement_char_fraction", &Q::max_replacement_char_fraction,
             "hard filter: more U+FFFD than this share of chars drops as replacement_chars", unit),
       field("max_mojibake_fraction", &Q::max_mojibake_fraction,
             "hard filter: more double-encoded characters (Ã©, â€“) than this share drops as mojibake", unit),
       field("gopher_quality", &Q::gopher_quality, "false: the Gopher quality rules never lower the score"),
       field("gopher_repetition", &Q::gopher_repetition, "false: the Gopher repetition rules never lower the score"),
       field("c4", &Q::c4, "false: the C4 rules never lower the score"),
       field("html", &Q::html, "false: the HTML page rule never lowers the score"),
       field("penalty_severity", &Q::penalty_severity, "how fast a failing rule's factor falls with its excess",
             non_negative),
       field("penalty_floor", &Q::penalty_floor, "the smallest factor one rule (or family) gives", unit),
       field("min_words", &Q::min_words, "gopher_min_words"),
       field("max_words", &Q::max_words, "gopher_max_words"),
       field("zh_min_words", &Q::zh_min_words, "gopher_min_words for Chinese (words are mostly characters)"),
       field("zh_max_words", &Q::zh_max_words, "gopher_max_words for Chinese"),
       field("min_mean_word_length", &Q::min_mean_word_length, "gopher_mean_word_length, lower bound", non_negative),
       field("max_mean_word_length", &Q::max_mean_word_length, "gopher_mean_word_length, upper bound", non_negative),
       field("max_symbol_word_ratio", &Q::max_symbol_word_ratio, "gopher_symbol_ratio", non_negative),
       field("max_bullet_line_fraction", &Q::max_bullet_line_fraction, "gopher_bullet_lines", unit),
       field("max_ellipsis_line_fraction", &Q::max_ellipsis_line_fraction, "gopher_ellipsis_lines", unit),
       field("min_alpha_word_fraction", &Q::min_alpha_word_fraction, "gopher_alpha_words", unit),
       field("min_stop_words", &Q::min_stop_words, "gopher_stop_words (distinct; en and zh only)"),
       field("max_dup_line_fraction", &Q::max_dup_line_fraction, "gopher_dup_lines", unit),
       field("max_dup_line_char_fraction", &Q::max_dup_line_char_fraction, "gopher_dup_line_chars", unit),
       field("max_dup_para_fraction", &Q::max_dup_para_fraction, "gopher_dup_paras", unit),
       field("max_dup_para_char_fraction", &Q::max_dup_para_char_fraction, "gopher_dup_para_chars", unit),
       field("max_top_2gram_char_fraction", &Q::max_top_2gram_char_fraction, "gopher_top_2gram", unit),
       field("max_top_3gram_char_fraction", &Q::max_top_3gram_char_fraction, "gopher_top_3gram", unit),
       field("max_top_4gram_char_fraction", &Q::max_top_4gram_char_fraction, "gopher_top_4gram", unit),
       field("max_dup_5gram_char_fraction", &Q::max_dup_5gram_char_fraction, "gopher_dup_5gram", unit),
       field("max_dup_6gram_char_fraction", &Q::max_dup_6gram_char_fraction, "gopher_dup_6gram", unit),
       field("max_dup_7gram_char_fraction", &Q::max_dup_7gram_char_fraction, "gopher_dup_7gram", unit),
       field("max_dup_8gram_char_fraction", &Q::max_dup_8gram_char_fraction, "gopher_dup_8gram", unit),
       field("max_dup_9gram_char_fraction", &Q::max_dup_9gram_char_fraction, "gopher_dup_9gram", unit),
       field("max_dup_10gram_char_fraction", &Q::max_dup_10gram_char_fraction, "gopher_dup_10gram", unit),
       field("min_terminal_punct_line_fraction", &Q::min_terminal_punct_line_fraction,
             "c4_terminal_punct (the larger of the line and the paragraph fraction)", unit),
       field("max_javascript_line_fraction", &Q::max_javascript_line_fraction, "c4_javascript", unit),
       field("max_policy_line_fraction", &Q::max_policy_line_fraction, "c4_policy", unit),
       field("lorem_ipsum_factor", &Q::lorem_ipsum_factor, "c4_lorem_ipsum: the score's factor", unit),
       field("curly_brace_factor", &Q::curly_brace_factor, "c4_curly_brace: the score's factor", unit),
       field("max_html_link_text_ratio", &Q::max_html_link_text_ratio, "html_link_text (HTML inputs)", unit)}};
  return s;
}

}  // namespace

void quality_config_read(const toml::table& root, QualityConfig& c, std::vector<std::string>& errors) {
  schema_read_keys(quality_schema(), root, c, errors);
}

toml::table quality_config_to_toml(const QualityConfig& c) { return schema_to_toml(quality_schema(), c); }

SectionDoc quality_config_doc() { return section_doc(quality_schema()); }

std::vector<std::string> quality_config_check(const QualityConfig& c) {
  std::vector<std::string> errs;
  schema_check(quality_schema(), c, errs);
  if (c.min_words > c.max_words)
    errs.push_back(fmt::format("[prep.quality] min_words = {} is above max_words = {}", c.min_words, c.max_words));
  if (c.zh_min_words > c.zh_max_words)
    errs.push_back(fmt::format("[prep.quality] zh_min_words = {} is above zh_max_words = {}", c.zh_min_words, c.zh_max_words));
  if (c.min_mean_word_length > c.max_mean_word_length)
    errs.push_back("[prep.quality] min_mean_word_length is above max_mean_word_length");
  return errs;
}

std::string quality_hard_filter(const QualitySignals& q, const QualityConfig& c) {
  if (q.lines == 0) return "empty";  // every non-space character belongs to a line
  if (q.chars < c.min_chars) return "too_short";
  if (q.replacement_char_fraction > c.max_replacement_char_fraction) return "replacement_chars";
  if (q.mojibake_fraction > c.max_mojibake_fraction) return "mojibake";
  return "";
}

double quality_score(const QualitySignals& q, const QualityConfig& c) { return evaluate(q, c, nullptr); }

std::string quality_failed_rules(const QualitySignals& q, const QualityConfig& c) {
  std::string names;
  evaluate(q, c, &names);
  return names;
}

}  // namespace smelt
