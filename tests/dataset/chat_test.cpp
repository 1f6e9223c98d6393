// Chat records for SFT (dataset/chat.hpp): every kind of bad record named and counted with file and
// line; the trained spans of a ChatML rendering are exactly each assistant reply and its
// end-of-turn marker; the ids are the whole text's (special tokens recognised) and the mask covers
// exactly the tokens that start inside those spans, checked token by token on a real tokenizer (the
// cl100k-derived fixture with ChatML's two markers added); a template that rewrites earlier turns
// is refused naming the turn; the families' own templates (Jinja) give each reply its span.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "smelt/dataset/chat.hpp"
#include "test_references.hpp"
#include "tokenizer/tok_test_util.hpp"

namespace fs = std::filesystem;
using namespace smelt;

namespace {

// ChatML as Qwen2.5's template writes it, without its default system prompt.
Status chatml(const std::vector<ChatTurn>& turns, bool gen, std::string& out) {
  for (const auto& t : turns) out += "<|im_start|>" + t.role + "\n" + t.content + "<|im_end|>\n";
  if (gen) out += "<|im_start|>assistant\n";
  return Status::ok();
}

// The llama3 fixture's tokenizer.json with `markers` added as special tokens, written to path. The
// added tokens are numbered on from the vocabulary without gaps, as published files number them
// (Hugging Face's loader numbers them so, whatever ids a file writes).
void write_marked_tokenizer(const std::string& path, const std::vector<std::string>& markers) {
  nlohmann::json j = nlohmann::json::parse(test::read_file(test::fixtures() + "/llama3.json"));
  int64_t next = 0;
  for (const auto& [k, v] : j["model"]["vocab"].items()) next = std::max<int64_t>(next, v.get<int64_t>() + 1);
  for (auto& a : j["added_tokens"]) a["id"] = next++;
  for (const auto& s : markers) {
    bool have = false;
    for (const auto& a : j["added_tokens"]) have = have || a["content"] == s;
    if (!have)
      j["added_tokens"].push_back({{"id", next++}, {"content", s}, {"single_word", false}, {"lstrip", false},
                                   {"rstrip", false}, {"normalized", false}, {"special", true}});
  }
  test::write_file(path, j.dump());
}

// The fixture tokenizer with <|im_start|> and <|im_end|> added as special tokens.
const Tokenizer& chatml_tokenizer() {
  static Tokenizer tok = [] {
    const std::string path = (fs::temp_directory_path() / ("smelt_chat_tok_" + std::to_string(::getpid()) + ".json")).string();
    write_marked_tokenizer(path, {"<|im_start|>", "<|im_end|>"});
    Tokenizer t;
    Status s = Tokenizer::load(path, t);
    EXPECT_TRUE(s.is_ok()) << s.message();
    fs::remove(path);
    return t;
  }();
  return tok;
}

const std::vector<ChatTurn> kConversation = {
    {"system", "You answer questions about Debian packages."},
    {"user", "How do I list the files of an installed package?"},
    {"assistant", "Run `dpkg -L package`; it prints every path the package installed."},
    {"user", "而且如何查找某个文件属于哪个软件包？"},
    {"assistant", "用 `dpkg -S /路径/文件` 即可。 \"Quotes\", a backslash \\ and\nnew lines stay."}};

// The five families' chat templates of tests/reference/hf_family.py by name ({} without python).
nlohmann::json family_templates() {
  const std::string cmd = "/usr/bin/python3 -c \"import sys, json; sys.path.insert(0, '" + std::string(SMELT_SOURCE_DIR) +
                          "/tests/reference'); import hf_family as h; print(json.dumps({k: getattr(h, k) for k in "
                          "['SMOLLM2_CHAT', 'LLAMA3_CHAT', 'MISTRAL_CHAT', 'QWEN25_CHAT', 'QWEN3_CHAT']}))\" 2> /dev/null";
  std::string text;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) text.append(buf, n);
    ::pclose(p);
  }
  return text.empty() ? nlohmann::json::object() : nlohmann::json::parse(text);
}

}  // namespace

TEST(Chat, BadRecordsAreNamedByKind) {
  const std::pair<const char*, const char*> bad[] = {
      {"[1, 2]", "not JSON"},
      {"{\"messages\": [", "not JSON"},
      {"{\"text\": \"hi\"}", "no messages"},
      {"{\"messages\": []}", "no messages"},
      {"{\"messages\": [\"hi\"]}", "message not an object"},
      {"{\"messages\": [{\"content\": \"hi\"}]}", "missing role"},
      {"{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}", "unknown role"},
      {"{\"messages\": [{\"role\": \"user\"}]}", "missing content"},
      {"{\"messages\": [{\"role\": \"user\", \"content\": [\"a\"]}]}", "content not a string"},
      {"{\"messages\": [{\"role\": \"user\", \"content\": \"\"}]}", "empty content"},
      {"{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}", "no assistant turn"}};
  std::vector<ChatTurn> turns;
  std::string reason, why;
  for (const auto& [line, kind] : bad) {
    EXPECT_FALSE(chat_parse_record(line, turns, reason, why)) << line;
    EXPECT_EQ(reason, kind) << line << ": " << why;
  }
  EXPECT_FALSE(chat_parse_record("{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"robot\", "
                                 "\"content\": \"b\"}]}", turns, reason, why));
  EXPECT_EQ(why, "message 1: role 'robot' (expected system, user or assistant)");
  ASSERT_TRUE(chat_parse_record("{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": "
                                "\"assistant\", \"content\": \"b\"}], \"id\": 7}", turns, reason, why));
  ASSERT_EQ(turns.size(), 2u);
  EXPECT_EQ(turns[1].role, "assistant");
  EXPECT_EQ(turns[1].content, "b");
}

TEST(Chat, AFileIsReadRecordByRecordWithBadLinesSkippedAndCounted) {
  const std::string path = (fs::temp_directory_path() / ("smelt_chat_" + std::to_string(::getpid()) + ".jsonl")).string();
  test::write_file(path,
                   "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}]}\n"
                   "\n"
                   "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}\n"
                   "not json\n"
                   "{\"messages\": [{\"role\": \"user\", \"content\": \"c\"}, {\"role\": \"assistant\", \"content\": \"d\"}]}\n"
                   "{\"messages\": [{\"role\": \"user\", \"content\": \"e\"}, {\"role\": \"assistant\", \"content\": \"REFUSE\"}]}\n");
  std::vector<int64_t> lines;
  ChatReadStats st;
  Status s = chat_read_file(path, [&](const std::vector<ChatTurn>& t, int64_t line) {
    if (t.back().content == "REFUSE") return Status::error("turn 1 (assistant): refused by the renderer");
    lines.push_back(line);
    return Status::ok();
  }, st);
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(lines, (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(st.lines, 6);
  EXPECT_EQ(st.records, 2);
  EXPECT_EQ(st.skipped, 3);
  EXPECT_EQ(st.skipped_by_reason["content not a string"], 1);
  EXPECT_EQ(st.skipped_by_reason["not JSON"], 1);
  EXPECT_EQ(st.skipped_by_reason["template"], 1);
  ASSERT_EQ(st.examples.size(), 3u);
  EXPECT_EQ(st.examples[0], path + " line 3: message 0 (user): content is number, expected a string");
  EXPECT_EQ(st.examples[2], path + " line 6: turn 1 (assistant): refused by the renderer");
  fs::remove(path);
  EXPECT_FALSE(chat_read_file(path, [](const std::vector<ChatTurn>&, int64_t) { return Status::ok(); }, st).is_ok());
}

TEST(Chat, TrainedSpansAreTheRepliesWithTheirEndOfTurnMarker) {
  ChatRendered r;
  ASSERT_TRUE(chat_render(chatml, kConversation, r).is_ok());
  std::string whole;
  ASSERT_TRUE(chatml(kConversation, false, whole).is_ok());
  EXPECT_EQ(r.text, whole);
  ASSERT_EQ(r.trained.size(), 2u);
  for (size_t k = 0; k < 2; k++) {
    const auto [a, b] = r.trained[k];
    EXPECT_EQ(r.text.substr(a, b - a), kConversation[2 + 2 * k].content + "<|im_end|>\n");
    EXPECT_EQ(r.text.substr(0, a).substr(a - 22), "<|im_start|>assistant\n");
  }
  // A template that shows only the last reply in full (as one that drops earlier reasoning): the
  // first reply has no span of its own.
  auto rewriting = [](const std::vector<ChatTurn>& turns, bool gen, std::string& out) {
    for (size_t i = 0; i < turns.size(); i++) {
      const bool last_reply = i + 1 == turns.size() && !gen;
      out += turns[i].role + ": " + (turns[i].role == "assistant" && !last_reply ? "..." : turns[i].content) + "\n";
    }
    return Status::ok();
  };
  Status s = chat_render(rewriting, kConversation, r);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("turn 2 (assistant)"), std::string::npos) << s.message();
}

TEST(Chat, TheMaskCoversExactlyTheTokensOfTheReplies) {
  const Tokenizer& tok = chatml_tokenizer();
  ChatRendered r;
  ASSERT_TRUE(chat_render(chatml, kConversation, r).is_ok());
  std::vector<uint32_t> ids = {7}, want;  // appended after what is there
  std::vector<uint8_t> mask = {1};
  chat_tokenize(tok, r, ids, mask);
  tok.encode(r.text, want, true);
  ASSERT_EQ(ids.size(), want.size() + 1);
  ASSERT_EQ(mask.size(), ids.size());
  EXPECT_TRUE(std::equal(want.begin(), want.end(), ids.begin() + 1)) << "the whole text's ids";
  EXPECT_EQ(std::count(want.begin(), want.end(), *tok.token_to_id("<|im_end|>")), 5);
  // Token by token: its byte range, and whether it starts inside a reply's span.
  size_t at = 0;
  std::string trained, rest;
  for (size_t k = 0; k < want.size(); k++) {
    std::string b;
    tok.decode(&want[k], 1, b);
    bool inside = false;
    for (const auto& [s, e] : r.trained) inside = inside || (at >= s && at < e);
    EXPECT_EQ(mask[k + 1], inside ? 1 : 0) << "token " << k << " '" << b << "' at byte " << at;
    (inside ? trained : rest) += b;
    at += b.size();
  }
  EXPECT_EQ(at, r.text.size());
  EXPECT_EQ(trained, kConversation[2].content + "<|im_end|>\n" + kConversation[4].content + "<|im_end|>\n");
  EXPECT_EQ(mask[0], 1) << "what was there is left alone";
}

// The families' own templates (tests/reference/hf_family.py's, rendered by tokenizer/jinja): every
// assistant reply gets a span that holds it, no span holds a user's or the system's words, and the
// spans end where the next turn's marker begins. Mistral's needs strict user/assistant
// alternation, so its conversation has no system turn.
TEST(Chat, TheFamiliesTemplatesGiveEachReplyItsSpan) {
  const nlohmann::json tpl = family_templates();
  SMELT_REQUIRE_REFERENCE(!tpl.empty(), "/usr/bin/python3 with python3-torch (tests/reference/hf_family.py): "
                                        "scripts/install-deps");
  const nlohmann::ordered_json tokens = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
  const std::vector<ChatTurn> no_system(kConversation.begin() + 1, kConversation.end());
  for (const auto& [name, source] : tpl.items()) {
    SCOPED_TRACE(name);
    const auto& turns = name == "MISTRAL_CHAT" ? no_system : kConversation;
    ChatRendered r;
    ChatTemplateSource t;
    t.source = source.get<std::string>(), t.extra = tokens;
    ChatRenderer render;
    ASSERT_TRUE(chat_jinja_renderer(t, render).is_ok());
    Status s = chat_render(render, turns, r);
    ASSERT_TRUE(s.is_ok()) << s.message();
    ASSERT_EQ(r.trained.size(), 2u) << r.text;
    size_t reply = 0;
    for (const auto& t : turns) {
      const size_t at = r.text.find(t.content);
      ASSERT_NE(at, std::string::npos) << t.content;
      bool inside = false;
      for (const auto& [a, b] : r.trained) inside = inside || (at >= a && at + t.content.size() <= b);
      EXPECT_EQ(inside, t.role == "assistant") << t.role << ": " << t.content;
      if (t.role != "assistant") continue;
      const auto [a, b] = r.trained[reply++];
      std::printf("[%s] reply %zu: '%s'\n", name.c_str(), reply,
                  r.text.substr(a, std::min<size_t>(b - a, 24)).c_str());
      EXPECT_LE(b - (at + t.content.size()), 12u) << "the end-of-turn marker, not the next turn: "
                                                   << r.text.substr(at + t.content.size(), b - at - t.content.size());
    }
  }
}

// Id for id against Hugging Face: each family's template over multi-turn, system-less and
// single-exchange conversations (with and without the generation prompt), rendered by
// @huggingface/jinja and tokenized by Hugging Face tokenizers (tests/reference/chat_ids.mjs), equals
// Smelt's rendering (chat_render) and ids (chat_tokenize) on the same tokenizer.json, which holds
// every family's markers as special tokens.
TEST(Chat, RenderedIdsEqualHuggingFacesForEachFamily) {
  const nlohmann::json tpl = family_templates();
  SMELT_REQUIRE_REFERENCE(!tpl.empty(), "/usr/bin/python3 (tests/reference/hf_family.py): scripts/install-deps");
  const fs::path dir = fs::temp_directory_path() / ("smelt_chat_ids_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string tok_path = (dir / "tokenizer.json").string();
  write_marked_tokenizer(tok_path, {"<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>",
                                    "<|end_header_id|>", "<|eot_id|>", "<s>", "</s>", "<think>", "</think>"});
  Tokenizer tok;
  ASSERT_TRUE(Tokenizer::load(tok_path, tok).is_ok());
  const nlohmann::ordered_json extra = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
  const std::vector<ChatTurn> no_system(kConversation.begin() + 1, kConversation.end());
  const std::vector<ChatTurn> one(kConversation.begin() + 1, kConversation.begin() + 3);
  struct Case { std::string family; std::vector<ChatTurn> turns; bool gen; };
  std::vector<Case> cases;
  for (const auto& [name, source] : tpl.items()) {
    if (name != "MISTRAL_CHAT") cases.push_back({name, kConversation, false});  // (Mistral: user/assistant only)
    cases.push_back({name, no_system, false});
    cases.push_back({name, one, false});
    cases.push_back({name, std::vector<ChatTurn>(one.begin(), one.begin() + 1), true});
  }
  nlohmann::ordered_json in = {{"tokenizer", tok_path}, {"cases", nlohmann::ordered_json::array()}};
  for (const auto& c : cases) {
    nlohmann::ordered_json ctx = extra, msgs = nlohmann::ordered_json::array();
    for (const auto& t : c.turns) msgs.push_back({{"role", t.role}, {"content", t.content}});
    ctx["messages"] = msgs;
    ctx["add_generation_prompt"] = c.gen;
    in["cases"].push_back({{"template", tpl[c.family]}, {"context", ctx}});
  }
  test::write_file((dir / "in.json").string(), in.dump());
  const std::string cmd = "cd '" + std::string(SMELT_SOURCE_DIR) + "' && node tests/reference/chat_ids.mjs '" +
                          (dir / "in.json").string() + "' > '" + (dir / "out.json").string() + "' 2> /dev/null";
  const bool ran = std::system(cmd.c_str()) == 0;
  SMELT_REQUIRE_REFERENCE(ran, "node with @huggingface/jinja and tokenizers (tests/reference: npm ci)");
  const nlohmann::json ref = nlohmann::json::parse(test::read_file((dir / "out.json").string()));
  ASSERT_EQ(ref.size(), cases.size());
  for (size_t i = 0; i < cases.size(); i++) {
    SCOPED_TRACE(cases[i].family + " case " + std::to_string(i));
    ASSERT_FALSE(ref[i].contains("error")) << ref[i]["error"];
    ChatTemplateSource t;
    t.source = tpl[cases[i].family].get<std::string>(), t.extra = extra;
    ChatRenderer render;
    ASSERT_TRUE(chat_jinja_renderer(t, render).is_ok());
    ChatRendered r;
    if (cases[i].gen) {
      ASSERT_TRUE(render(cases[i].turns, true, r.text).is_ok());
    } else {
      Status s = chat_render(render, cases[i].turns, r);
      ASSERT_TRUE(s.is_ok()) << s.message();
    }
    EXPECT_EQ(r.text, ref[i]["text"].get<std::string>());
    std::vector<uint32_t> ids;
    std::vector<uint8_t> mask;
    chat_tokenize(tok, r, ids, mask);
    EXPECT_EQ(ids, ref[i]["ids"].get<std::vector<uint32_t>>());
  }
  fs::remove_all(dir);
}

// Where a run's template comes from (chat_template_resolve): a .jinja file; a tokenizer_config.json
// (its chat_template as a string or as the list's "default", bos/eos as strings or {content}); a
// chat run's checkpoint state; an imported model's; else Smelt's own with the tokenizer's
// end-of-document token. A construct the renderer lacks is refused when the template is resolved.
TEST(Chat, TheTemplateComesFromThePathTheCheckpointOrSmelt) {
  const fs::path dir = fs::temp_directory_path() / ("smelt_chat_resolve_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const Tokenizer& tok = chatml_tokenizer();
  ChatTemplateSource t;
  test::write_file((dir / "t.jinja").string(), "{% for m in messages %}{{ m.content }}{% endfor %}");
  ASSERT_TRUE(chat_template_resolve((dir / "t.jinja").string(), nullptr, tok, t).is_ok());
  EXPECT_EQ(t.source, "{% for m in messages %}{{ m.content }}{% endfor %}");
  EXPECT_EQ(t.origin, (dir / "t.jinja").string());

  const nlohmann::json config = {{"chat_template", {{{"name", "tool_use"}, {"template", "T"}}, {{"name", "default"}, {"template", "D{{ eos_token }}"}}}},
                                 {"bos_token", {{"content", "<s>"}, {"special", true}}}, {"eos_token", "</s>"}};
  test::write_file((dir / "tokenizer_config.json").string(), config.dump());
  ASSERT_TRUE(chat_template_resolve((dir / "tokenizer_config.json").string(), nullptr, tok, t).is_ok());
  EXPECT_EQ(t.source, "D{{ eos_token }}");
  EXPECT_EQ(t.extra["bos_token"], "<s>");
  EXPECT_EQ(t.extra["eos_token"], "</s>");

  const nlohmann::json run_state = {{"chat", {{"template", "R"}, {"eos_token", "<|im_end|>"}, {"origin", "x"}}},
                                    {"import", {{"chat_template", "I"}}}};
  ASSERT_TRUE(chat_template_resolve("", &run_state, tok, t).is_ok());
  EXPECT_EQ(t.source, "R");
  EXPECT_EQ(t.extra["eos_token"], "<|im_end|>");
  const nlohmann::json imported = {{"import", {{"chat_template", "I"}, {"bos_token", "<s>"}, {"eos_token", nullptr}}}};
  ASSERT_TRUE(chat_template_resolve("", &imported, tok, t).is_ok());
  EXPECT_EQ(t.source, "I");
  EXPECT_EQ(t.extra["bos_token"], "<s>");
  EXPECT_FALSE(t.extra.contains("eos_token"));

  ASSERT_TRUE(chat_template_resolve("", nullptr, tok, t).is_ok());
  EXPECT_EQ(t.source, kSmeltChatTemplate);
  std::string eod;
  const uint32_t eod_id = tok.eod_id().value_or(0);
  tok.decode(&eod_id, 1, eod);
  EXPECT_FALSE(eod.empty());
  EXPECT_EQ(t.extra["eos_token"], eod);

  test::write_file((dir / "m.jinja").string(), "{% macro f() %}x{% endmacro %}{{ f() }}");
  Status s = chat_template_resolve((dir / "m.jinja").string(), nullptr, tok, t);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("'macro' is not supported"), std::string::npos) << s.message();
  s = chat_template_resolve((dir / "none.jinja").string(), nullptr, tok, t);
  EXPECT_NE(s.message().find("none.jinja"), std::string::npos) << s.message();
  test::write_file((dir / "empty.json").string(), "{}");
  s = chat_template_resolve((dir / "empty.json").string(), nullptr, tok, t);
  EXPECT_NE(s.message().find("no chat_template"), std::string::npos) << s.message();
  fs::remove_all(dir);
}
