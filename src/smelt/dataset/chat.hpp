// Chat data for supervised fine-tuning (docs/finetune.md): JSONL records of OpenAI-style
// {"messages": [{"role", "content"}, ...]} -> the conversation rendered by a chat template -> token
// ids and, per token, whether the loss counts it (the assistant's turns and their end-of-turn
// marker). Not the template language (a ChatRenderer is given) and not the loader.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "smelt/common/status.hpp"
#include "smelt/tokenizer/tokenizer.hpp"

namespace smelt {

struct ChatTurn {
  std::string role;     // "system", "user" or "assistant"
  std::string content;  // non-empty
};

// One JSONL line -> turns. false with `reason` (the kind, for counting: "not JSON", "no messages",
// "message not an object", "missing role", "unknown role", "missing content", "content not a
// string", "empty content", "no assistant turn") and `why` (that, naming the message and value).
bool chat_parse_record(std::string_view line, std::vector<ChatTurn>& turns, std::string& reason, std::string& why);

// The conversation `turns` as the template renders it; add_generation_prompt: end where the next
// assistant reply begins (the template's own flag).
using ChatRenderer =
    std::function<Status(const std::vector<ChatTurn>& turns, bool add_generation_prompt, std::string& out)>;

// A chat template: Jinja source and the values it reads besides the conversation (bos_token,
// eos_token: what the model's tokenizer_config.json names), and where it came from (for logs).
struct ChatTemplateSource {
  std::string source;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  std::string origin;  // "PATH", "checkpoint DIR", "Smelt's built-in template"
  nlohmann::json to_json() const;  // {"template", "bos_token", "eos_token", "origin"}: a checkpoint's state["chat"]
};

// Smelt's own template, for a model that has none (docs/finetune.md, "Smelt's template"): a system
// message as a paragraph, "User: {text}\n\n", "Assistant: {text}{eos_token}"; the generation prompt
// "Assistant:". The reply's span is " {text}{eos_token}": the model learns to end its turn.
extern const char* const kSmeltChatTemplate;

// The template a run trains with ([data] chat_template): PATH (a .jinja file, or a
// tokenizer_config.json: its chat_template, bos_token, eos_token); or, empty, the one `state` (a
// checkpoint's, may be null) carries: state["chat"] (a chat run's), else state["import"]'s
// chat_template (an imported model's); else Smelt's built-in with the tokenizer's end-of-document
// token as eos_token. The template is parsed here: a construct the renderer lacks is named now.
Status chat_template_resolve(const std::string& path, const nlohmann::json* state, const Tokenizer& tok,
                             ChatTemplateSource& out);

// A template as a renderer: the context is {messages: [{role, content}], add_generation_prompt}
// plus its extra values. Parsed once (a syntax error or an unsupported construct is returned here).
Status chat_jinja_renderer(const ChatTemplateSource& t, ChatRenderer& out);

// The rendered conversation and the byte ranges [begin, end) of `text` the loss counts.
struct ChatRendered {
  std::string text;
  std::vector<std::pair<size_t, size_t>> trained;
};

// Renders turns whole and finds each assistant turn i's span as Hugging Face's prefix rule does:
// render(turns[0..i)) with the generation prompt is where the reply starts, render(turns[0..i])
// where it ends (its end-of-turn marker included). Fails, naming the turn, when a shorter
// rendering is not a prefix of the longer (a template that rewrites earlier turns, as one that
// drops the reasoning of all but the last reply): such a conversation has no consistent spans.
Status chat_render(const ChatRenderer& render, const std::vector<ChatTurn>& turns, ChatRendered& out);

// The ids of out.text (special tokens recognised, as a rendered template is tokenized) appended
// to ids, and mask[k] = 1 where token k's first byte lies in a trained span (else 0).
void chat_tokenize(const Tokenizer& tok, const ChatRendered& r, std::vector<uint32_t>& ids, std::vector<uint8_t>& mask);

// A JSONL file of chat records read record by record: each good one handed to `each` (its line
// number with it); the bad ones skipped and counted by reason, the first few kept with file and
// line for the stage's summary. An error `each` returns (the template's: a rewritten turn, a
// raise_exception) skips the record too, counted as "template" with its message.
struct ChatReadStats {
  int64_t lines = 0, records = 0, skipped = 0;
  std::map<std::string, int64_t> skipped_by_reason;  // "unknown role", "empty content", ...
  std::vector<std::string> examples;                 // "FILE line N: message 2: unknown role 'tool'"
};
Status chat_read_file(const std::string& path, const std::function<Status(const std::vector<ChatTurn>&, int64_t line)>& each,
                      ChatReadStats& stats);

}  // namespace smelt
