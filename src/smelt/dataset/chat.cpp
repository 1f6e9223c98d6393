// Chat records -> rendered text with trained spans -> ids and loss mask (chat.hpp). The spans come
// from renderings of the conversation's prefixes, so any template works that renders a prefix as a
// prefix; the mask is by byte offset, so the ids are those of the whole text tokenized at once.
#include "smelt/dataset/chat.hpp"

#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

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

ChatRenderer chat_jinja_renderer(std::string source, nlohmann::ordered_json extra) {
  return [source = std::move(source), extra = std::move(extra)](const std::vector<ChatTurn>& turns, bool gen,
                                                                 std::string& out) {
    nlohmann::ordered_json ctx = extra.is_object() ? extra : nlohmann::ordered_json::object();
    nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
    for (const auto& t : turns) msgs.push_back({{"role", t.role}, {"content", t.content}});
    ctx["messages"] = std::move(msgs);
    ctx["add_generation_prompt"] = gen;
    return jinja_render(source, ctx, out);
  };
}

Status chat_render(const ChatRenderer& render, const std::vector<ChatTurn>& turns, ChatRendered& out) {
  out = ChatRendered{};
  if (Status s = render_prefix(render, turns, turns.size(), false, out.text); !s) return s;
  std::string prompt, through;
  for (size_t i = 0; i < turns.size(); i++) {
    if (turns[i].role != "assistant") continue;
    if (Status s = render_prefix(render, turns, i, true, prompt); !s) return s;
    if (Status s = render_prefix(render, turns, i + 1, false, through); !s) return s;
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
