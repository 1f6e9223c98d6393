// `smelt pipeline`'s sections (pipeline_config.hpp): one field table each, read with unknown keys
// refused and each key's limits checked, then the rules between keys.
#include "smelt/cli/pipeline_config.hpp"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "smelt/common/config.hpp"
#include "smelt/common/config_schema.hpp"

namespace smelt {

const std::vector<std::string> kPipelineStages = {"prep", "tokenizer", "tokenize", "train", "eval", "generate"};

namespace {

using P = PipelineConfig;

// [tokenize] language_weights = { en = 1, zh = 1 }: names that can be a shard's suffix and a blend
// source's name, weights > 0. A field of its own: a table whose keys are the languages, each entry
// checked where it is read (one message per bad entry).
Field<P> language_weights_field() {
  const char* name = "language_weights";
  Field<P> f{name, "one training shard per language, blended by these weights (rows); {}: one shard of every document",
             "table", "", {}, {}, {}};
  f.read = [name](ConfigSection& sec, P& c) {
    const toml::node* node = sec.node(name);
    if (!node) return;
    const toml::table* t = node->as_table();
    if (!t) {
      sec.error("[tokenize] language_weights: expected a table of language = weight, e.g. { en = 1, zh = 1 }");
      return;
    }
    for (const auto& [key, value] : *t) {
      const std::string lang(key.str());
      const std::optional<double> w = value.value<double>();
      const bool name_ok = !lang.empty() && std::all_of(lang.begin(), lang.end(), [](char ch) {
        return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '-';
      });
      if (!name_ok)
        sec.error(fmt::format("[tokenize] language_weights: \"{}\" is not a language code (a-z, 0-9, _ and -, "
                              "as prep's quality.lang writes them)", lang));
      else if (!w || !(*w > 0))
        sec.error(fmt::format("[tokenize] language_weights.{}: expected a number > 0", lang));
      else
        c.language_weights.emplace_back(lang, *w);
    }
    if (t->empty()) sec.error("[tokenize] language_weights is empty: name the languages, or leave it out");
  };
  f.write = [name](const P& c, toml::table& out) {
    toml::table t;
    for (const auto& [lang, w] : c.language_weights) t.insert_or_assign(lang, w);
    t.is_inline(true);
    out.insert_or_assign(name, std::move(t));
  };
  return f;
}

const Schema<P>& pipeline_schema() {
  static const Schema<P> s{
      "pipeline",
      {field("inputs", &P::inputs, "raw input files and folders (required for prep)"),
       field("workdir", &P::workdir, "refined/, tokenizer.json, tokens.*, valid.*, run/, sample.txt"),
       field("stages", &P::stages, "a subset to run")}};
  return s;
}

const Schema<P>& tokenizer_schema() {
  static const Schema<P> s{
      "tokenizer",
      {field("vocab_size", &P::vocab_size, "smelt tokenizer train --vocab-size", at_least(257)),
       field("pretokenizer", &P::pretokenizer, "--pretokenizer: a name or a regex"),
       field("special_tokens", &P::special_tokens, "--special-tokens"),
       field("memory_mb", &P::tokenizer_memory_mb, "--memory-mb, the pre-token table's budget (0: its default)")}};
  return s;
}

const Schema<P>& tokenize_schema() {
  static const Schema<P> s{
      "tokenize",
      {field("holdout", &P::holdout, "fraction of documents held out for [eval] (0: no evaluation)",
             Limits{0, 1, false, true, ""}),
       language_weights_field()}};
  return s;
}

const Schema<P>& generate_schema() {
  static const Schema<P> s{
      "generate",
      {field("prompt", &P::prompt, "one more prompt, continued first"),
       field("prompts", &P::prompts, "each continued greedily and sampled (\"The\" when neither key is given)"),
       field("max_new_tokens", &P::max_new_tokens, "the continuations' length"),
       field("temperature", &P::temperature, "the sampled continuation's"),
       field("top_k", &P::top_k, "the sampled continuation's"),
       field("seed", &P::seed, "the sampled continuation's"),
       field("repeat_penalty", &P::repeat_penalty, "smelt generate --repeat-penalty for both (1: off)",
             in_range(1, 10, "1: off")),
       field("frequency_penalty", &P::frequency_penalty, "smelt generate --frequency-penalty for both (0: off)",
             in_range(-2, 2, "0: off")),
       field("presence_penalty", &P::presence_penalty, "smelt generate --presence-penalty for both (0: off)",
             in_range(-2, 2, "0: off"))}};
  return s;
}

const std::vector<const Schema<P>*>& pipeline_tables() {
  static const std::vector<const Schema<P>*> t = {&pipeline_schema(), &tokenizer_schema(), &tokenize_schema(),
                                                  &generate_schema()};
  return t;
}

// After every table is read: the stage names, and the inputs prep needs (each key's own limits are
// checked where its table is read).
void pipeline_config_validate(const PipelineConfig& c, std::vector<std::string>& errors) {
  for (const auto& s : c.stages)
    if (std::find(kPipelineStages.begin(), kPipelineStages.end(), s) == kPipelineStages.end())
      errors.push_back(fmt::format("[pipeline] stages: \"{}\" is not a stage; allowed: prep, tokenizer, tokenize, "
                                   "train, eval, generate", s));
  if (c.inputs.empty() && std::find(c.stages.begin(), c.stages.end(), "prep") != c.stages.end())
    errors.push_back("[pipeline] inputs is empty: list the raw input files or folders for prep");
}

}  // namespace

Status pipeline_config_read(const toml::table& root, PipelineConfig& c) {
  std::vector<std::string> errors;
  for (const Schema<P>* sc : pipeline_tables()) schema_read(*sc, root, c, errors);
  if (!c.prompt.empty()) c.prompts.insert(c.prompts.begin(), c.prompt);
  if (c.prompts.empty()) c.prompts = {"The"};
  if (auto t = root["eval"]["tokens"].value<int64_t>()) c.eval_tokens = *t;
  pipeline_config_validate(c, errors);
  return config_errors_status(errors);
}

std::vector<SectionDoc> pipeline_config_docs() {
  std::vector<SectionDoc> d;
  for (const Schema<P>* sc : pipeline_tables()) d.push_back(section_doc(*sc));
  return d;
}

}  // namespace smelt
