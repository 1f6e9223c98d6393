// Hard filters and the quality score from a document's signals (formula at the top of
// quality_score.hpp and in docs/quality.md). Not the measuring, not the sampling draw.
#include "smelt/refine/quality_score.hpp"

#include <algorithm>
#include <fmt/format.h>

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
    if (!failed) return 1.0;
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
    // Stop-word lists exist for English and Chinese only; other languages are not judged by them.
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

void quality_config_read(ConfigSection& s, QualityConfig& c) {
  s.get("languages", c.languages);
  s.get("min_chars", c.min_chars);
  s.get("min_language_confidence", c.min_language_confidence);
  s.get("max_replacement_char_fraction", c.max_replacement_char_fraction);
  s.get("gopher_quality", c.gopher_quality);
  s.get("gopher_repetition", c.gopher_repetition);
  s.get("c4", c.c4);
  s.get("html", c.html);
  s.get("penalty_severity", c.penalty_severity);
  s.get("penalty_floor", c.penalty_floor);
  s.get("min_words", c.min_words);
  s.get("max_words", c.max_words);
  s.get("zh_min_words", c.zh_min_words);
  s.get("zh_max_words", c.zh_max_words);
  s.get("min_mean_word_length", c.min_mean_word_length);
  s.get("max_mean_word_length", c.max_mean_word_length);
  s.get("max_symbol_word_ratio", c.max_symbol_word_ratio);
  s.get("max_bullet_line_fraction", c.max_bullet_line_fraction);
  s.get("max_ellipsis_line_fraction", c.max_ellipsis_line_fraction);
  s.get("min_alpha_word_fraction", c.min_alpha_word_fraction);
  s.get("min_stop_words", c.min_stop_words);
  s.get("max_dup_line_fraction", c.max_dup_line_fraction);
  s.get("max_dup_line_char_fraction", c.max_dup_line_char_fraction);
  s.get("max_dup_para_fraction", c.max_dup_para_fraction);
  s.get("max_dup_para_char_fraction", c.max_dup_para_char_fraction);
  s.get("max_top_2gram_char_fraction", c.max_top_2gram_char_fraction);
  s.get("max_top_3gram_char_fraction", c.max_top_3gram_char_fraction);
  s.get("max_top_4gram_char_fraction", c.max_top_4gram_char_fraction);
  s.get("max_dup_5gram_char_fraction", c.max_dup_5gram_char_fraction);
  s.get("max_dup_6gram_char_fraction", c.max_dup_6gram_char_fraction);
  s.get("max_dup_7gram_char_fraction", c.max_dup_7gram_char_fraction);
  s.get("max_dup_8gram_char_fraction", c.max_dup_8gram_char_fraction);
  s.get("max_dup_9gram_char_fraction", c.max_dup_9gram_char_fraction);
  s.get("max_dup_10gram_char_fraction", c.max_dup_10gram_char_fraction);
  s.get("min_terminal_punct_line_fraction", c.min_terminal_punct_line_fraction);
  s.get("max_javascript_line_fraction", c.max_javascript_line_fraction);
  s.get("max_policy_line_fraction", c.max_policy_line_fraction);
  s.get("lorem_ipsum_factor", c.lorem_ipsum_factor);
  s.get("curly_brace_factor", c.curly_brace_factor);
  s.get("max_html_link_text_ratio", c.max_html_link_text_ratio);
}

std::vector<std::string> quality_config_check(const QualityConfig& c) {
  std::vector<std::string> errs;
  auto unit = [&](const char* key, double v) {
    if (!(v >= 0 && v <= 1)) errs.push_back(fmt::format("[prep.quality] {} = {}: expected a value in [0, 1]", key, v));
  };
  auto positive = [&](const char* key, double v) {
    if (!(v >= 0)) errs.push_back(fmt::format("[prep.quality] {} = {}: expected a value >= 0", key, v));
  };
  for (const std::string& l : c.languages)
    if (l != "en" && l != "zh" && l != "other" && l != "unknown")
      errs.push_back(fmt::format("[prep.quality] languages: '{}' is not one of en, zh, other, unknown", l));
  unit("min_language_confidence", c.min_language_confidence);
  unit("max_replacement_char_fraction", c.max_replacement_char_fraction);
  positive("penalty_severity", c.penalty_severity);
  unit("penalty_floor", c.penalty_floor);
  if (c.min_words > c.max_words)
    errs.push_back(fmt::format("[prep.quality] min_words = {} is above max_words = {}", c.min_words, c.max_words));
  if (c.zh_min_words > c.zh_max_words)
    errs.push_back(fmt::format("[prep.quality] zh_min_words = {} is above zh_max_words = {}", c.zh_min_words, c.zh_max_words));
  positive("min_mean_word_length", c.min_mean_word_length);
  positive("max_mean_word_length", c.max_mean_word_length);
  if (c.min_mean_word_length > c.max_mean_word_length)
    errs.push_back("[prep.quality] min_mean_word_length is above max_mean_word_length");
  positive("max_symbol_word_ratio", c.max_symbol_word_ratio);
  unit("max_bullet_line_fraction", c.max_bullet_line_fraction);
  unit("max_ellipsis_line_fraction", c.max_ellipsis_line_fraction);
  unit("min_alpha_word_fraction", c.min_alpha_word_fraction);
  unit("max_dup_line_fraction", c.max_dup_line_fraction);
  unit("max_dup_line_char_fraction", c.max_dup_line_char_fraction);
  unit("max_dup_para_fraction", c.max_dup_para_fraction);
  unit("max_dup_para_char_fraction", c.max_dup_para_char_fraction);
  unit("max_top_2gram_char_fraction", c.max_top_2gram_char_fraction);
  unit("max_top_3gram_char_fraction", c.max_top_3gram_char_fraction);
  unit("max_top_4gram_char_fraction", c.max_top_4gram_char_fraction);
  unit("max_dup_5gram_char_fraction", c.max_dup_5gram_char_fraction);
  unit("max_dup_6gram_char_fraction", c.max_dup_6gram_char_fraction);
  unit("max_dup_7gram_char_fraction", c.max_dup_7gram_char_fraction);
  unit("max_dup_8gram_char_fraction", c.max_dup_8gram_char_fraction);
  unit("max_dup_9gram_char_fraction", c.max_dup_9gram_char_fraction);
  unit("max_dup_10gram_char_fraction", c.max_dup_10gram_char_fraction);
  unit("min_terminal_punct_line_fraction", c.min_terminal_punct_line_fraction);
  unit("max_javascript_line_fraction", c.max_javascript_line_fraction);
  unit("max_policy_line_fraction", c.max_policy_line_fraction);
  unit("lorem_ipsum_factor", c.lorem_ipsum_factor);
  unit("curly_brace_factor", c.curly_brace_factor);
  unit("max_html_link_text_ratio", c.max_html_link_text_ratio);
  return errs;
}

std::string quality_hard_filter(const QualitySignals& q, const QualityConfig& c) {
  if (q.lines == 0) return "empty";  // every non-space character belongs to a line
  if (q.chars < c.min_chars) return "too_short";
  if (q.replacement_char_fraction > c.max_replacement_char_fraction) return "replacement_chars";
  if (!c.languages.empty()) {
    const bool listed = std::find(c.languages.begin(), c.languages.end(), q.language.lang) != c.languages.end();
    if (!listed || q.language.confidence < c.min_language_confidence) return "wrong_language";
  }
  return "";
}

double quality_score(const QualitySignals& q, const QualityConfig& c) { return evaluate(q, c, nullptr); }

std::string quality_failed_rules(const QualitySignals& q, const QualityConfig& c) {
  std::string names;
  evaluate(q, c, &names);
  return names;
}

}  // namespace smelt
