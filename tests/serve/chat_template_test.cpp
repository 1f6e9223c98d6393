// Chat templates (serve/chat_template.hpp): the format follows the tokenizer's special tokens,
// each renders as documented in docs/serve.md, markers become their special ids while the same
// text inside a message stays ordinary bytes; a checkpoint's own template (a chat run's, an imported
// model's) renders the prompt exactly as the fine-tuning rendered the conversation up to a reply.
#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "smelt/dataset/chat.hpp"
#include "smelt/serve/chat_template.hpp"

using namespace smelt;

namespace {

Tokenizer byte_tokenizer(const std::vector<std::string>& specials) {
  BpeModel m;
  for (int b = 0; b < 256; b++) m.vocab.push_back(std::string(1, (char)b));
  for (const auto& s : specials) {
    m.specials.push_back({s, (uint32_t)m.vocab.size(), true});
    m.vocab.push_back(s);
  }
  Tokenizer t;
  Status s = Tokenizer::from_model(m, t);
  EXPECT_TRUE(s) << s.message();
  return t;
}

std::string rendered(const ChatTemplate& t, const std::vector<ChatMessage>& msgs) {
  std::string s;
  EXPECT_TRUE(chat_template_render(t, msgs, s).is_ok());
  return s;
}

const std::vector<ChatMessage> kChat = {{"system", "S"}, {"user", "Hi"}, {"assistant", "Yo"}, {"user", "<|im_end|>"}};

TEST(ChatTemplate, PlainForABaseModelsTokenizer) {
  Tokenizer tok = byte_tokenizer({"<|endoftext|>"});
  ChatTemplate t = chat_template_for(tok);
  EXPECT_EQ(t.format, ChatFormat::kPlain);
  EXPECT_EQ(t.stop, (std::vector<std::string>{"\nUser:"}));
  const std::string want = "S\n\nUser: Hi\n\nAssistant: Yo\n\nUser: <|im_end|>\n\nAssistant:";
  EXPECT_EQ(rendered(t, kChat), want);
  std::vector<uint32_t> ids;
  ASSERT_TRUE(chat_template_encode(t, tok, kChat, ids).is_ok());
  EXPECT_EQ(std::string(ids.begin(), ids.end()), want);  // bytes only: no special id anywhere
}

TEST(ChatTemplate, ChatmlWhenTheTokenizerHasItsMarkers) {
  Tokenizer tok = byte_tokenizer({"<|endoftext|>", "<|im_start|>", "<|im_end|>"});
  ChatTemplate t = chat_template_for(tok);
  ASSERT_EQ(t.format, ChatFormat::kChatml);
  EXPECT_EQ(t.stop, (std::vector<std::string>{"<|im_end|>"}));
  EXPECT_EQ(rendered(t, {{"user", "Hi"}}), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  std::vector<uint32_t> ids;
  ASSERT_TRUE(chat_template_encode(t, tok, {{"user", "<|im_end|>"}}, ids).is_ok());
  const uint32_t start = 257, end = 258;
  std::vector<uint32_t> want = {start, 'u', 's', 'e', 'r', '\n'};
  for (char c : std::string("<|im_end|>")) want.push_back((unsigned char)c);  // the user's text: bytes
  want.insert(want.end(), {end, '\n', start, 'a', 's', 's', 'i', 's', 't', 'a', 'n', 't', '\n'});
  EXPECT_EQ(ids, want);
}

TEST(ChatTemplate, Llama3WhenTheTokenizerHasItsMarkers) {
  Tokenizer tok = byte_tokenizer({"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"});
  ChatTemplate t = chat_template_for(tok);
  ASSERT_EQ(t.format, ChatFormat::kLlama3);
  EXPECT_EQ(rendered(t, {{"user", "Hi"}}),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  std::vector<uint32_t> ids;
  ASSERT_TRUE(chat_template_encode(t, tok, {{"user", "Hi"}}, ids).is_ok());
  EXPECT_EQ(ids.front(), 256u);  // <|begin_of_text|>
  EXPECT_EQ(ids[1], 257u);       // <|start_header_id|>
}

TEST(ChatTemplate, TheCheckpointsOwnTemplateRendersAsTheFineTuningDid) {
  Tokenizer tok = byte_tokenizer({"<|endoftext|>"});
  ChatTemplateSource src;  // what a chat run with Smelt's template records in its state
  ASSERT_TRUE(chat_template_resolve("", nullptr, tok, src).is_ok());
  ChatTemplate t;
  bool found = false;
  ASSERT_TRUE(chat_template_from_state({{"step", 3}, {"chat", src.to_json()}}, t, found).is_ok());
  ASSERT_TRUE(found);
  EXPECT_EQ(t.format, ChatFormat::kJinja);
  EXPECT_EQ(t.stop, (std::vector<std::string>{"<|endoftext|>"}));
  const std::vector<ChatMessage> msgs = {{"system", "S"}, {"user", "Hi"}, {"assistant", "Yo"}, {"user", "Again?"}};
  std::vector<ChatTurn> turns;
  for (const auto& m : msgs) turns.push_back({m.role, m.content});
  ChatRenderer train;
  ASSERT_TRUE(chat_jinja_renderer(src, train).is_ok());
  std::string want;
  ASSERT_TRUE(train(turns, true, want).is_ok());
  EXPECT_EQ(want, "S\n\nUser: Hi\n\nAssistant: Yo<|endoftext|>User: Again?\n\nAssistant:");
  EXPECT_EQ(rendered(t, msgs), want);
  std::vector<uint32_t> ids, want_ids;
  ASSERT_TRUE(chat_template_encode(t, tok, msgs, ids).is_ok());
  tok.encode(want, want_ids, true);
  EXPECT_EQ(ids, want_ids);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 256u), 1);  // the end of the first reply: its special id

  // A message holding a marker's text is refused, naming it: a user cannot end a turn.
  Status s = chat_template_encode(t, tok, {{"user", "a <|endoftext|> b"}}, ids);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("messages[0].content holds the special token '<|endoftext|>'"), std::string::npos);

  // An imported model's tokenizer_config.json template, with its eos_token.
  const nlohmann::json imported = {{"import", {{"chat_template", "{% for m in messages %}<{{ m.role }}>{{ m.content }}"
                                                                 "{{ eos_token }}{% endfor %}{% if add_generation_prompt "
                                                                 "%}<assistant>{% endif %}"},
                                               {"eos_token", "</s>"}}}};
  ASSERT_TRUE(chat_template_from_state(imported, t, found).is_ok());
  ASSERT_TRUE(found);
  EXPECT_EQ(rendered(t, {{"user", "Hi"}}), "<user>Hi</s><assistant>");
  EXPECT_EQ(t.stop, (std::vector<std::string>{"</s>"}));

  // None: the tokenizer's format stays; a template that does not parse is an error at load.
  ASSERT_TRUE(chat_template_from_state({{"step", 1}}, t, found).is_ok());
  EXPECT_FALSE(found);
  s = chat_template_from_state({{"chat", {{"template", "{% for m in messages %}"}}}}, t, found);
  EXPECT_FALSE(s.is_ok());
}

}  // namespace
