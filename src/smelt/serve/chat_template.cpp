// Chat messages -> prompt ids (chat_template.hpp): markers as special-token ids, message text as
// ordinary text.
#include "smelt/serve/chat_template.hpp"

#include <string_view>

#include <fmt/format.h>

#include "smelt/tokenizer/chat_state.hpp"

namespace smelt {

namespace {

bool has_special(const Tokenizer& tok, std::string_view text) {
  for (const auto& s : tok.model().specials)
    if (s.text == text) return true;
  return false;
}

// One piece of the rendered prompt: a template marker (special tokens recognised) or text.
struct Piece {
  std::string text;
  bool marker = false;
};

// Appends a marker. One out-of-line call instead of a string built from a literal inside each
// push_back, which GCC 12 misreads as a copy past a Piece (-Warray-bounds, a false positive).
[[gnu::noinline]] void add_marker(std::vector<Piece>& p, std::string_view text) {
  p.push_back({std::string(text), true});
}

std::string plain_role(const std::string& role) { return role == "assistant" ? "Assistant" : "User"; }

std::vector<Piece> pieces(const ChatTemplate& t, const Tokenizer* tok, const std::vector<ChatMessage>& msgs) {
  std::vector<Piece> p;
  switch (t.format) {
    case ChatFormat::kPlain:
      for (const auto& m : msgs) {
        if (m.role == "system") {
          p.push_back({m.content, false});
          add_marker(p, "\n\n");
        } else {
          p.push_back({plain_role(m.role) + ": ", true});
          p.push_back({m.content, false});
          add_marker(p, "\n\n");
        }
      }
      add_marker(p, "Assistant:");
      break;
    case ChatFormat::kChatml:
      for (const auto& m : msgs) {
        p.push_back({"<|im_start|>" + m.role + "\n", true});
        p.push_back({m.content, false});
        add_marker(p, "<|im_end|>\n");
      }
      add_marker(p, "<|im_start|>assistant\n");
      break;
    case ChatFormat::kLlama3:
      if (!tok || has_special(*tok, "<|begin_of_text|>")) add_marker(p, "<|begin_of_text|>");
      for (const auto& m : msgs) {
        p.push_back({"<|start_header_id|>" + m.role + "<|end_header_id|>\n\n", true});
        p.push_back({m.content, false});
        add_marker(p, "<|eot_id|>");
      }
      add_marker(p, "<|start_header_id|>assistant<|end_header_id|>\n\n");
      break;
    case ChatFormat::kJinja:
      break;  // (rendered whole: chat_template_render)
  }
  return p;
}

}  // namespace

const char* chat_format_name(ChatFormat f) {
  switch (f) {
    case ChatFormat::kChatml: return "chatml";
    case ChatFormat::kLlama3: return "llama3";
    case ChatFormat::kJinja: return "jinja";
    default: return "plain";
  }
}

ChatTemplate chat_template_for(const Tokenizer& tok) {
  ChatTemplate t;
  if (has_special(tok, "<|im_start|>") && has_special(tok, "<|im_end|>")) {
    t.format = ChatFormat::kChatml;
    t.stop = {"<|im_end|>"};
  } else if (has_special(tok, "<|start_header_id|>") && has_special(tok, "<|end_header_id|>") &&
             has_special(tok, "<|eot_id|>")) {
    t.format = ChatFormat::kLlama3;
    t.stop = {"<|eot_id|>"};
  } else {
    t.format = ChatFormat::kPlain;
    t.stop = {"\nUser:"};
  }
  return t;
}

Status chat_template_from_state(const nlohmann::json& state, ChatTemplate& out, bool& found) {
  found = false;
  StateChatTemplate st;
  if (!chat_template_in_state(state, st)) return Status::ok();
  ChatTemplate t;
  t.format = ChatFormat::kJinja;
  t.origin = st.origin;
  if (Status s = JinjaTemplate::parse(st.source, t.jinja); !s) return Status::error(fmt::format("{}: {}", st.origin, s.message()));
  t.extra = st.extra();
  if (!st.eos_token.empty()) t.stop.push_back(st.eos_token);
  out = std::move(t);
  found = true;
  return Status::ok();
}

Status chat_template_encode(const ChatTemplate& t, const Tokenizer& tok, const std::vector<ChatMessage>& msgs,
                            std::vector<uint32_t>& out) {
  if (t.format == ChatFormat::kJinja) {
    for (size_t i = 0; i < msgs.size(); i++)
      for (const auto& s : tok.model().specials)
        if (s.special && msgs[i].content.find(s.text) != std::string::npos)
          return Status::error(fmt::format("messages[{}].content holds the special token '{}', which the model's "
                                           "chat template reads as a marker", i, s.text));
    std::string text;
    if (Status s = chat_template_render(t, msgs, text); !s) return Status::error("the chat template: " + s.message());
    tok.encode(text, out, /*allow_special=*/true);
    return Status::ok();
  }
  // plain has no markers: the whole transcript is one text, so it splits and merges exactly as the
  // same words did in training. The others: markers with special tokens recognised, message text
  // without (a user cannot forge a turn); a merge never crosses a special token anyway.
  if (t.format == ChatFormat::kPlain) {
    std::string text;
    if (Status s = chat_template_render(t, msgs, text); !s) return s;
    tok.encode(text, out, /*allow_special=*/false);
    return Status::ok();
  }
  for (const auto& p : pieces(t, &tok, msgs)) tok.encode(p.text, out, /*allow_special=*/p.marker);
  return Status::ok();
}

Status chat_template_render(const ChatTemplate& t, const std::vector<ChatMessage>& msgs, std::string& out) {
  out.clear();
  if (t.format == ChatFormat::kJinja) return t.jinja.render(chat_template_context(t.extra, msgs, true), out);
  for (const auto& p : pieces(t, nullptr, msgs)) out += p.text;
  return Status::ok();
}

}  // namespace smelt
