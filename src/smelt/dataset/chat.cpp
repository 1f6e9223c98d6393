// Chat records -> rendered text with trained spans -> ids and loss mask (chat.hpp). The spans come
// from renderings of the conversation's prefixes, so any template works that renders a prefix as a
// prefix; the mask is by byte offset, so the ids are those of the whole text tokenized at once.
#include "smelt/dataset/chat.hpp"

#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "smelt/common/files.hpp"
#include "smelt/tokenizer/chat_state.hpp"
#include "smelt/tokenizer/jinja.hpp"

namespace smelt {

namespace {

bool fail(std::string& reason, std::string& why, const char* kind, std::string detail) {
  reason = kind;
  why = std::move(detail);
  return false;
}

// The rendering of turns[0..n), with the generation prompt or not.
Status render_prefix(const ChatRenderer& render, const std::vector<ChatTurn>& turns, size_t n, bool gen,
                     std::string& out) {
  const std::vector<ChatTurn> head(turns.begin(), turns.begin() + (std::ptrdiff_t)n);
  out.clear();
  return render(head, gen, out);
}

}  // namespace

bool chat_parse_record(std::string_view line, std::vector<ChatTurn>& turns, std::string& reason, std::string& why) {
  turns.clear();
  nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return fail(reason, why, "not JSON", "not a JSON object");
  auto ms = j.find("messages");
  if (ms == j.end() || !ms->is_array() || ms->empty())
    return fail(reason, why, "no messages", "no \"messages\" array of {role, content} (or an empty one)");
  bool assistant = false;
  for (size_t i = 0; i < ms->size(); i++) {
    const nlohmann::json& m = (*ms)[i];
    if (!m.is_object()) return fail(reason, why, "message not an object", fmt::format("message {}: not an object", i));
    auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      return fail(reason, why, "missing role", fmt::format("message {}: no \"role\" string", i));
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "user" && r != "assistant")
      return fail(reason, why, "unknown role",
                  fmt::format("message {}: role '{}' (expected system, user or assistant)", i, r));
    auto content = m.find("content");
    if (content == m.end() || content->is_null())
      return fail(reason, why, "missing content", fmt::format("message {} ({}): no \"content\"", i, r));
    if (!content->is_string())
      return fail(reason, why, "content not a string",
                  fmt::format("message {} ({}): content is {}, expected a string", i, r, content->type_name()));
    std::string text = content->get<std::string>();
    if (text.empty()) return fail(reason, why, "empty content", fmt::format("message {} ({}): empty content", i, r));
    assistant = assistant || r == "assistant";
    turns.push_back({r, std::move(text)});
  }
  if (!assistant) return fail(reason, why, "no assistant turn", "no assistant message: nothing to train on");
  return true;
}

const char* const kSmeltChatTemplate =
    "{%- for message in messages -%}\n"
    "{%- if message['role'] == 'system' -%}\n"
    "{{ message['content'] + '\\n\\n' }}\n"
    "{%- elif message['role'] == 'user' -%}\n"
    "{{ 'User: ' + message['content'] + '\\n\\n' }}\n"
    "{%- else -%}\n"
    "{{ 'Assistant: ' + message['content'] + eos_token }}\n"
    "{%- endif -%}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}{{ 'Assistant:' }}{%- endif -%}\n";

nlohmann::json ChatTemplateSource::to_json() const {
  nlohmann::json j = {{"template", source}, {"origin", origin}};
  for (const char* k : {"bos_token", "eos_token"})
    j[k] = extra.contains(k) && extra[k].is_string() ? nlohmann::json(extra[k].get<std::string>()) : nlohmann::json(nullptr);
  return j;
}

namespace {

// A token setting of tokenizer_config.json: "text" or {"content": "text", ...}; "" when absent.
std::string token_setting(const nlohmann::json& c, const char* key) {
  if (!c.contains(key)) return "";
  const nlohmann::json& v = c[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

// tokenizer_config.json's chat_template: a string, or a list of {name, template} (the "default" one).
Status template_of_config(const nlohmann::json& c, const std::string& where, std::string& out) {
  const nlohmann::json* t = c.contains("chat_template") ? &c["chat_template"] : nullptr;
  if (t && t->is_string()) {
    out = t->get<std::string>();
    return Status::ok();
  }
  if (t && t->is_array())
    for (const auto& e : *t)
      if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string()) {
        out = e["template"].get<std::string>();
        return Status::ok();
      }
  return Status::error(fmt::format("{}: no chat_template (a string, or a list holding one named \"default\")", where));
}

Status template_from_file(const std::string& path, ChatTemplateSource& out) {
  std::string text;
  if (Status s = files_read_small(path, text); !s) return Status::error("[data] chat_template: " + s.message());
  out.origin = path;
  if (path.size() < 5 || path.compare(path.size() - 5, 5, ".json") != 0) {
    out.source = std::move(text);  // a Jinja file
    return Status::ok();
  }
  nlohmann::json c = nlohmann::json::parse(text, nullptr, false);
  if (c.is_discarded() || !c.is_object())
    return Status::error(fmt::format("[data] chat_template {}: not a JSON object (expected a tokenizer_config.json)", path));
  if (Status s = template_of_config(c, "[data] chat_template " + path, out.source); !s) return s;
  for (const char* k : {"bos_token", "eos_token"})
    if (std::string v = token_setting(c, k); !v.empty()) out.extra[k] = v;
  return Status::ok();
}

}  // namespace

Status chat_template_resolve(const std::string& path, const nlohmann::json* state, const Tokenizer& tok,
                             ChatTemplateSource& out) {
  out = ChatTemplateSource{};
  if (!path.empty()) {
    if (Status s = template_from_file(path, out); !s) return s;
  } else if (StateChatTemplate st; state && chat_template_in_state(*state, st)) {
    out.source = st.source;
    out.origin = st.origin;
    out.extra = st.extra();
  } else {
    const std::optional<uint32_t> eod = tok.eod_id();
    if (!eod)
      return Status::error("[data] format = \"chat\": the model has no chat template and its tokenizer no "
                           "end-of-document token for Smelt's template to end a reply with; set [data] chat_template");
    std::string eos;
    tok.decode(&*eod, 1, eos);
    out.source = kSmeltChatTemplate;
    out.origin = "Smelt's built-in template";
    out.extra["eos_token"] = eos;
  }
  JinjaTemplate check;
  if (Status s = JinjaTemplate::parse(out.source, check); !s)
    return Status::error(fmt::format("chat template ({}): {}", out.origin, s.message()));
  return Status::ok();
}

Status chat_jinja_renderer(const ChatTemplateSource& t, ChatRenderer& out) {
  JinjaTemplate parsed;
  if (Status s = JinjaTemplate::parse(t.source, parsed); !s) return s;
  out = [parsed = std::move(parsed), extra = t.extra](const std::vector<ChatTurn>& turns, bool gen, std::string& text) {
    return parsed.render(chat_template_context(extra, turns, gen), text);
  };
  return Status::ok();
}

Status chat_render(const ChatRenderer& render, const std::vector<ChatTurn>& turns, ChatRendered& out) {
  out = ChatRendered{};
  if (Status s = render_prefix(render, turns, turns.size(), false, out.text); !s) return s;
  std::string prompt, through;
  for (size_t i = 0; i < turns.size(); i++) {
    if (turns[i].role != "assistant") continue;
    if (Status s = render_prefix(render, turns, i, true, prompt); !s) return s;
    if (i + 1 == turns.size()) through = out.text;  // (the whole conversation, rendered above)
    else if (Status s = render_prefix(render, turns, i + 1, false, through); !s) return s;
    if (through.compare(0, prompt.size(), prompt) != 0 || out.text.compare(0, through.size(), through) != 0)
      return Status::error(fmt::format("turn {} (assistant): the template renders the conversation up to it "
                                       "differently from the whole (it rewrites earlier turns), so the reply has no "
                                       "span of its own", i));
    if (through.size() > prompt.size()) out.trained.emplace_back(prompt.size(), through.size());
  }
  return Status::ok();
}

void chat_tokenize(const Tokenizer& tok, const ChatRendered& r, std::vector<uint32_t>& ids,
                   std::vector<uint8_t>& mask) {
  const size_t first = ids.size();
  tok.encode(r.text, ids, true);
  mask.resize(mask.size() + (ids.size() - first), 0);
  uint8_t* mk = mask.data() + (mask.size() - (ids.size() - first));
  size_t at = 0, span = 0;  // byte offset of the token; the first span not yet behind it
  std::string bytes;
  for (size_t k = first; k < ids.size(); k++) {
    while (span < r.trained.size() && r.trained[span].second <= at) span++;
    mk[k - first] = span < r.trained.size() && r.trained[span].first <= at ? 1 : 0;
    bytes.clear();
    tok.decode(&ids[k], 1, bytes);
    at += bytes.size();
  }
}

Status chat_read_file(const std::string& path,
                      const std::function<Status(const std::vector<ChatTurn>&, int64_t line)>& each,
                      ChatReadStats& stats) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::error(fmt::format("{}: cannot open", path));
  constexpr size_t kExamples = 8;
  auto skip = [&](const std::string& reason, const std::string& why) {
    stats.skipped++;
    stats.skipped_by_reason[reason]++;
    if (stats.examples.size() < kExamples)
      stats.examples.push_back(fmt::format("{} line {}: {}", path, stats.lines, why));
  };
  std::string line, reason, why;
  std::vector<ChatTurn> turns;
  while (std::getline(in, line)) {
    stats.lines++;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (!chat_parse_record(line, turns, reason, why)) {
      skip(reason, why);
      continue;
    }
    if (Status s = each(turns, stats.lines); !s) {
      skip("template", s.message());
      continue;
    }
    stats.records++;
  }
  if (in.bad()) return Status::error(fmt::format("{}: read failed after line {}", path, stats.lines));
  return Status::ok();
}

}  // namespace smelt
