// Chat messages -> prompt ids for /v1/chat/completions (docs/serve.md, "Chat template"). A
// tokenizer that carries a chat format's special tokens gets that format (ChatML when it has
// <|im_start|> and <|im_end|>, Llama 3 when it has <|start_header_id|>, <|end_header_id|> and
// <|eot_id|>); any other (a base model's, like the ones Smelt trains) gets a plain-text transcript
// a web-text model has seen many times. Message text is encoded with special tokens NOT
// recognised, so a user cannot write the template's markers. Not Jinja: no template language runs.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "smelt/tokenizer/tokenizer.hpp"

namespace smelt {

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

enum class ChatFormat { kPlain, kChatml, kLlama3 };

struct ChatTemplate {
  ChatFormat format = ChatFormat::kPlain;
  std::vector<std::string> stop;  // stop strings the format adds to every chat request
};

const char* chat_format_name(ChatFormat f);  // "plain", "chatml", "llama3"
// The format the tokenizer's special tokens name (kPlain when none).
ChatTemplate chat_template_for(const Tokenizer& tok);

// Appends the ids of the rendered conversation, ending where the assistant's reply begins.
//   plain:  "{system}\n\n" then "User: {text}\n\n" / "Assistant: {text}\n\n" per message, then
//           "Assistant:"; stop "\nUser:" (a base model goes on to write the next turn itself).
//   chatml: "<|im_start|>{role}\n{text}<|im_end|>\n" per message, then "<|im_start|>assistant\n".
//   llama3: "<|begin_of_text|>" (if present), "<|start_header_id|>{role}<|end_header_id|>\n\n
//           {text}<|eot_id|>" per message, then the assistant's header.
void chat_template_encode(const ChatTemplate& t, const Tokenizer& tok, const std::vector<ChatMessage>& msgs,
                          std::vector<uint32_t>& out);
// The same as text (with the markers written out): for docs, logs and tests.
std::string chat_template_render(const ChatTemplate& t, const std::vector<ChatMessage>& msgs);

}  // namespace smelt
