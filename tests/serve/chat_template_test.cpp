// Chat templates (serve/chat_template.hpp): the format follows the tokenizer's special tokens,
// each renders as documented in docs/serve.md, markers become their special ids while the same
// text inside a message stays ordinary bytes.
#include <string>
#include <vector>

#include <gtest/gtest.h>

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

const std::vector<ChatMessage> kChat = {{"system", "S"}, {"user", "Hi"}, {"assistant", "Yo"}, {"user", "<|im_end|>"}};

TEST(ChatTemplate, PlainForABaseModelsTokenizer) {
  Tokenizer tok = byte_tokenizer({"<|endoftext|>"});
  ChatTemplate t = chat_template_for(tok);
  EXPECT_EQ(t.format, ChatFormat::kPlain);
  EXPECT_EQ(t.stop, (std::vector<std::string>{"\nUser:"}));
  const std::string want = "S\n\nUser: Hi\n\nAssistant: Yo\n\nUser: <|im_end|>\n\nAssistant:";
  EXPECT_EQ(chat_template_render(t, kChat), want);
  std::vector<uint32_t> ids;
  chat_template_encode(t, tok, kChat, ids);
  EXPECT_EQ(std::string(ids.begin(), ids.end()), want);  // bytes only: no special id anywhere
}

TEST(ChatTemplate, ChatmlWhenTheTokenizerHasItsMarkers) {
  Tokenizer tok = byte_tokenizer({"<|endoftext|>", "<|im_start|>", "<|im_end|>"});
  ChatTemplate t = chat_template_for(tok);
  ASSERT_EQ(t.format, ChatFormat::kChatml);
  EXPECT_EQ(t.stop, (std::vector<std::string>{"<|im_end|>"}));
  EXPECT_EQ(chat_template_render(t, {{"user", "Hi"}}), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  std::vector<uint32_t> ids;
  chat_template_encode(t, tok, {{"user", "<|im_end|>"}}, ids);
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
  EXPECT_EQ(chat_template_render(t, {{"user", "Hi"}}),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  std::vector<uint32_t> ids;
  chat_template_encode(t, tok, {{"user", "Hi"}}, ids);
  EXPECT_EQ(ids.front(), 256u);  // <|begin_of_text|>
  EXPECT_EQ(ids[1], 257u);       // <|start_header_id|>
}

}  // namespace
