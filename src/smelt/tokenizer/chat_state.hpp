// A model's chat template as a checkpoint's state records it, and the context every chat template
// renders with (docs/finetune.md): state["chat"]
// ({"template", "bos_token", "eos_token", "origin"}: what a chat run trained with), else
// state["import"]["chat_template"] with the import's bos_token and eos_token (an imported model's
// tokenizer_config.json). Read by the trainer, `smelt serve` and the exports; not the renderer
// (jinja.hpp) nor the rendering of conversations (dataset/chat.hpp).
//
// chat_template_context is the one place the context is built, so that `smelt serve` renders a
// conversation exactly as the fine-tuning rendered it.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace smelt {

struct StateChatTemplate {
  std::string source;                // Jinja
  std::string bos_token, eos_token;  // "" when the state names none
  std::string origin;                // for logs
  // {"bos_token", "eos_token"}, each only when set: what the template reads besides the conversation.
  nlohmann::ordered_json extra() const;
};

// false when the state carries no template.
bool chat_template_in_state(const nlohmann::json& state, StateChatTemplate& out);

// A chat template's context: `extra` (bos_token, eos_token, ...) with messages = [{role, content}]
// of msgs (any range of items with .role and .content) and add_generation_prompt.
template <class Messages>
nlohmann::ordered_json chat_template_context(const nlohmann::ordered_json& extra, const Messages& msgs, bool gen) {
  nlohmann::ordered_json ctx = extra.is_object() ? extra : nlohmann::ordered_json::object();
  nlohmann::ordered_json m = nlohmann::ordered_json::array();
  for (const auto& x : msgs) m.push_back({{"role", x.role}, {"content", x.content}});
  ctx["messages"] = std::move(m);
  ctx["add_generation_prompt"] = gen;
  return ctx;
}

}  // namespace smelt
