// A model's chat template as a checkpoint's state records it (docs/finetune.md): state["chat"]
// ({"template", "bos_token", "eos_token", "origin"}: what a chat run trained with), else
// state["import"]["chat_template"] with the import's bos_token and eos_token (an imported model's
// tokenizer_config.json). Read by the trainer, `smelt serve` and the exports; not the renderer
// (jinja.hpp) nor the rendering of conversations (dataset/chat.hpp).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace smelt {

struct StateChatTemplate {
  std::string source;                // Jinja
  std::string bos_token, eos_token;  // "" when the state names none
  std::string origin;                // for logs
};

// false when the state carries no template.
bool chat_template_in_state(const nlohmann::json& state, StateChatTemplate& out);

}  // namespace smelt
