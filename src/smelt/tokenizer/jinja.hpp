// Jinja2 subset for Hugging Face chat templates: renders tokenizer_config.json's chat_template the way
// @huggingface/jinja does (lstrip_blocks and trim_blocks on, values shown as that library shows them).
// Not a general Jinja: no macros, includes, blocks or autoescape; an unsupported construct is refused by name.
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "smelt/common/status.hpp"

namespace smelt {

// Renders `source` with `context` (messages, bos_token, eos_token, add_generation_prompt, tools...).
// ordered_json keeps key order, so tojson prints keys as the published file has them. Errors read
// "chat_template line L, column C: ..."; a template's raise_exception('m') returns its message m.
Status jinja_render(const std::string& source, const nlohmann::ordered_json& context, std::string& out);

namespace jinja { struct Node; }

// A template parsed once and rendered many times (a chat data set renders every conversation's
// prefixes with it). Copies share the parsed tree, which rendering only reads (thread-safe).
class JinjaTemplate {
 public:
  // Syntax errors and unsupported constructs are found here, named as jinja_render names them.
  static Status parse(const std::string& source, JinjaTemplate& out);
  Status render(const nlohmann::ordered_json& context, std::string& out) const;
  bool empty() const { return !body_; }

 private:
  std::shared_ptr<const std::vector<jinja::Node>> body_;
};

}  // namespace smelt
