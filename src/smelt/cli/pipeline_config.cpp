// `smelt pipeline`'s sections (pipeline_config.hpp): read key by key, then checked.
#include "smelt/cli/pipeline_config.hpp"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "smelt/common/config.hpp"

namespace smelt {

const std::vector<std::string> kPipelineStages = {"prep", "tokenizer", "tokenize", "train", "eval", "generate"};

namespace {

// [tokenize] language_weights = { en = 1, zh = 1 }: names that can be a shard's suffix and a blend
// source's name, weights > 0.
void read_language_weights(const toml::table& root, PipelineConfig& c, std::vector<std::string>& errors) {
  const toml::node_view<const toml::node> node = root["tokenize"]["language_weights"];
  if (!node) return;
  const toml::table* t = node.as_table();
  if (!t) {
    errors.push_back("[tokenize] language_weights: expected a table of language = weight, e.g. { en = 1, zh = 1 }");
    return;
  }
  for (const auto& [key, value] : *t) {
    const std::string lang(key.str());
    const std::optional<double> w = value.value<double>();
    const bool name_ok = !lang.empty() && std::all_of(lang.begin(), lang.end(), [](char ch) {
      return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '-';
    });
    if (!name_ok)
      errors.push_back(fmt::format("[tokenize] language_weights: \"{}\" is not a language code (a-z, 0-9, _ and -, "
                                   "as prep's quality.lang writes them)", lang));
    else if (!w || !(*w > 0))
      errors.push_back(fmt::format("[tokenize] language_weights.{}: expected a number > 0", lang));
    else
      c.language_weights.emplace_back(lang, *w);
  }
  if (t->empty()) errors.push_back("[tokenize] language_weights is empty: name the languages, or leave it out");
}

}  // namespace

Status pipeline_config_read(const toml::table& root, PipelineConfig& c) {
  std::vector<std::string> errors;
  ConfigSection p(root, "pipeline");
  p.get("inputs", c.inputs);
  p.get("workdir", c.workdir);
  p.get("stages", c.stages);
  for (auto& e : p.finish()) errors.push_back(e);
  ConfigSection t(root, "tokenizer");
  t.get("vocab_size", c.vocab_size);
  t.get("pretokenizer", c.pretokenizer);
  t.get("special_tokens", c.special_tokens);
  t.get("memory_mb", c.tokenizer_memory_mb);
  for (auto& e : t.finish()) errors.push_back(e);
  ConfigSection k(root, "tokenize");
  k.get("holdout", c.holdout);
  k.known("language_weights");
  for (auto& e : k.finish()) errors.push_back(e);
  read_language_weights(root, c, errors);
  ConfigSection g(root, "generate");
  std::string prompt;
  g.get("prompt", prompt);
  g.get("prompts", c.prompts);
  if (!prompt.empty()) c.prompts.insert(c.prompts.begin(), prompt);
  if (c.prompts.empty()) c.prompts = {"The"};
  g.get("max_new_tokens", c.max_new_tokens);
  g.get("temperature", c.temperature);
  g.get("top_k", c.top_k);
  g.get("seed", c.seed);
  g.get("repeat_penalty", c.repeat_penalty);
  g.get("frequency_penalty", c.frequency_penalty);
  g.get("presence_penalty", c.presence_penalty);
  for (auto& e : g.finish()) errors.push_back(e);
  for (const auto& s : c.stages)
    if (std::find(kPipelineStages.begin(), kPipelineStages.end(), s) == kPipelineStages.end())
      errors.push_back(fmt::format("[pipeline] stages: \"{}\" is not a stage; allowed: prep, tokenizer, tokenize, "
                                   "train, eval, generate", s));
  if (c.inputs.empty() && std::find(c.stages.begin(), c.stages.end(), "prep") != c.stages.end())
    errors.push_back("[pipeline] inputs is empty: list the raw input files or folders for prep");
  if (!(c.holdout >= 0 && c.holdout < 1))
    errors.push_back(fmt::format("[tokenize] holdout = {}: must be in [0, 1)", c.holdout));
  if (auto t = root["eval"]["tokens"].value<int64_t>()) c.eval_tokens = *t;
  if (!(c.repeat_penalty >= 1 && c.repeat_penalty <= 10))
    errors.push_back(fmt::format("[generate] repeat_penalty = {}: must be in [1, 10] (1: off)", c.repeat_penalty));
  for (const auto& [key, v] :
       {std::pair{"frequency_penalty", c.frequency_penalty}, {"presence_penalty", c.presence_penalty}})
    if (!(v >= -2 && v <= 2)) errors.push_back(fmt::format("[generate] {} = {}: must be in [-2, 2] (0: off)", key, v));
  if (c.vocab_size < 257) errors.push_back(fmt::format("[tokenizer] vocab_size = {}: must be >= 257", c.vocab_size));
  if (!errors.empty()) {
    std::string m = errors[0];
    for (size_t i = 1; i < errors.size(); ++i) m += "\n" + errors[i];
    return Status::error(m);
  }
  return Status::ok();
}

}  // namespace smelt
