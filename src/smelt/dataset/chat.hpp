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

// A model's own chat template (tokenizer_config.json's chat_template, tokenizer/jinja.hpp) as a
// renderer: the context is {messages: [{role, content}], add_generation_prompt} plus `extra`
// (bos_token, eos_token, ...: what the model's tokenizer_config.json names).
ChatRenderer chat_jinja_renderer(std::string source, nlohmann::ordered_json extra);

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
