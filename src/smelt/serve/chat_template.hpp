// Chat messages -> prompt ids for /v1/chat/completions (docs/serve.md, "Chat template"). A
// tokenizer that carries a chat format's special tokens gets that format (ChatML when it has
// <|im_start|> and <|im_end|>, Llama 3 when it has <|start_header_id|>, <|end_header_id|> and
// <|eot_id|>); any other (a base model's, like the ones Smelt trains) gets a plain-text transcript
// a web-text model has seen many times. Message text is encoded with special tokens NOT
// recognised, so a user cannot write the template's markers. A model that carries its own template
// (a checkpoint's state: the one a chat run trained with, or an imported model's
// tokenizer_config.json chat_template) gets that, rendered by tokenizer/jinja.hpp exactly as the
// fine-tuning rendered its conversations.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "smelt/common/status.hpp"
#include "smelt/tokenizer/jinja.hpp"
#include "smelt/tokenizer/tokenizer.hpp"

namespace smelt {

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

enum class ChatFormat { kPlain, kChatml, kLlama3, kJinja };

struct ChatTemplate {
  ChatFormat format = ChatFormat::kPlain;
  std::vector<std::string> stop;  // stop strings the format adds to every chat request
  JinjaTemplate jinja;            // kJinja: the model's own template
  nlohmann::ordered_json extra;   // kJinja: bos_token, eos_token
  std::string origin;             // kJinja: where the template came from
};

const char* chat_format_name(ChatFormat f);  // "plain", "chatml", "llama3", "jinja"
// The format the tokenizer's special tokens name (kPlain when none).
ChatTemplate chat_template_for(const Tokenizer& tok);
// The model's own template from a checkpoint's state: state["chat"] ({"template", "bos_token",
// "eos_token"}: a chat run's), else state["import"]["chat_template"]. found = false when neither
// (out untouched); an error when the template does not parse. Its eos_token is a stop string.
Status chat_template_from_state(const nlohmann::json& state, ChatTemplate& out, bool& found);

// Appends the ids of the rendered conversation, ending where the assistant's reply begins.
//   plain:  "{system}\n\n" then "User: {text}\n\n" / "Assistant: {text}\n\n" per message, then
//           "Assistant:"; stop "\nUser:" (a base model goes on to write the next turn itself).
//   chatml: "<|im_start|>{role}\n{text}<|im_end|>\n" per message, then "<|im_start|>assistant\n".
//   llama3: "<|begin_of_text|>" (if present), "<|start_header_id|>{role}<|end_header_id|>\n\n
//           {text}<|eot_id|>" per message, then the assistant's header.
//   jinja:  the template with add_generation_prompt, its text tokenized whole (special tokens
//           recognised, as the fine-tuning tokenized it); a message that holds a special token's
//           text is refused (a user cannot forge a turn), naming the message and the token.
Status chat_template_encode(const ChatTemplate& t, const Tokenizer& tok, const std::vector<ChatMessage>& msgs,
                            std::vector<uint32_t>& out);
// The same as text (with the markers written out): for docs, logs and tests.
Status chat_template_render(const ChatTemplate& t, const std::vector<ChatMessage>& msgs, std::string& out);

}  // namespace smelt
