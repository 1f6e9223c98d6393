// The OpenAI JSON layer (serve/openai_api.hpp): every bad field gives a 400 (404 for an unknown
// model) whose error object names that field; good bodies become the generation request the
// fields say; responses and chunks have the shapes the OpenAI clients read; prompt lists give one
// generation and one choice per prompt; echo with logprobs puts the prompt's tokens first.
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "smelt/serve/openai_api.hpp"

using namespace smelt;
using json = nlohmann::json;

namespace {

// 256 single-byte tokens, then <|endoftext|> (256): ids of ASCII text are its bytes.
Tokenizer byte_tokenizer(std::vector<std::string> specials = {"<|endoftext|>"}) {
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

const ApiContext kCtx{"tiny", 64, 257};

ApiError parse_err(ApiRoute route, const std::string& body) {
  ApiRequest r;
  ApiError e;
  EXPECT_FALSE(api_parse_request(route, body, kCtx, r, e)) << body;
  return e;
}

void expect_bad(ApiRoute route, const std::string& body, const std::string& param, int status = 400) {
  ApiError e = parse_err(route, body);
  EXPECT_EQ(e.status, status) << body << ": " << e.message;
  EXPECT_EQ(e.param, param) << body << ": " << e.message;
  EXPECT_FALSE(e.message.empty());
  json j = api_error_body(e);
  ASSERT_TRUE(j["error"].is_object());
  for (const char* k : {"message", "type", "param", "code"}) EXPECT_TRUE(j["error"].contains(k)) << k;
  if (param.empty()) {
    EXPECT_TRUE(j["error"]["param"].is_null());
  } else {
    EXPECT_EQ(j["error"]["param"], param);
  }
}

const ApiRoute C = ApiRoute::kCompletions, H = ApiRoute::kChat;

TEST(OpenaiApi, MalformedBodiesAreRefusedWithoutAField) {
  expect_bad(C, "", "");
  expect_bad(C, "{\"prompt\": ", "");
  expect_bad(C, "[1, 2]", "");
  expect_bad(C, R"({"prompt": "a", "max_tokens": 1e400})", "");  // beyond double: found by the fuzzer
  expect_bad(C, "\"text\"", "");
  EXPECT_EQ(parse_err(C, "{").code, "invalid_json");
}

TEST(OpenaiApi, EachBadCompletionFieldIsNamed) {
  expect_bad(C, R"({})", "prompt");
  expect_bad(C, R"({"prompt": 5})", "prompt");
  expect_bad(C, R"({"prompt": []})", "prompt");
  expect_bad(C, R"({"prompt": [1, 300]})", "prompt");
  expect_bad(C, R"({"prompt": [1, -1]})", "prompt");
  expect_bad(C, R"({"prompt": [1, "x"]})", "prompt");
  expect_bad(C, R"({"prompt": "a", "model": "gpt-4"})", "model", 404);
  expect_bad(C, R"({"prompt": "a", "model": 3})", "model");
  expect_bad(C, R"({"prompt": "a", "max_tokens": 0})", "max_tokens");
  expect_bad(C, R"({"prompt": "a", "max_tokens": -5})", "max_tokens");
  expect_bad(C, R"({"prompt": "a", "max_tokens": 65})", "max_tokens");
  expect_bad(C, R"({"prompt": "a", "max_tokens": 1e30})", "max_tokens");
  expect_bad(C, R"({"prompt": "a", "max_tokens": 99999999999999999999})", "max_tokens");
  expect_bad(C, R"({"prompt": "a", "max_tokens": "16"})", "max_tokens");
  expect_bad(C, R"({"prompt": "a", "max_tokens": 2.5})", "max_tokens");
  expect_bad(C, R"({"prompt": "a", "temperature": -0.1})", "temperature");
  expect_bad(C, R"({"prompt": "a", "temperature": 2.01})", "temperature");
  expect_bad(C, R"({"prompt": "a", "temperature": "hot"})", "temperature");
  expect_bad(C, R"({"prompt": "a", "top_p": 0})", "top_p");
  expect_bad(C, R"({"prompt": "a", "top_p": 1.5})", "top_p");
  expect_bad(C, R"({"prompt": "a", "top_k": -1})", "top_k");
  expect_bad(C, R"({"prompt": "a", "top_k": 1000})", "top_k");
  expect_bad(C, R"({"prompt": "a", "seed": "x"})", "seed");
  expect_bad(C, R"({"prompt": "a", "stop": 3})", "stop");
  expect_bad(C, R"({"prompt": "a", "stop": ["a", "b", "c", "d", "e"]})", "stop");
  expect_bad(C, R"({"prompt": "a", "stop": ["a", 1]})", "stop");
  expect_bad(C, R"({"prompt": "a", "stream": "yes"})", "stream");
  expect_bad(C, R"({"prompt": "a", "stream_options": {"include_usage": true}})", "stream_options");
  expect_bad(C, R"({"prompt": "a", "stream": true, "stream_options": {"include_usage": 1}})", "stream_options");
  expect_bad(C, R"({"prompt": "a", "logprobs": -1})", "logprobs");
  expect_bad(C, R"({"prompt": "a", "logprobs": 21})", "logprobs");
  expect_bad(C, R"({"prompt": "a", "logprobs": true})", "logprobs");
  expect_bad(C, R"({"prompt": "a", "echo": 1})", "echo");
  expect_bad(C, R"({"prompt": "a", "max_tokens": 0, "echo": false})", "max_tokens");
  expect_bad(C, R"({"prompt": ["a", "b"], "stream": true})", "stream");
  expect_bad(C, R"({"prompt": "a", "stream": true, "echo": true, "logprobs": 1})", "stream");
  expect_bad(C, R"({"prompt": "a", "n": 2})", "n");
  expect_bad(C, R"({"prompt": "a", "best_of": 3})", "best_of");
  expect_bad(C, R"({"prompt": "a", "presence_penalty": 2.5})", "presence_penalty");
  expect_bad(C, R"({"prompt": "a", "frequency_penalty": -2.01})", "frequency_penalty");
  expect_bad(C, R"({"prompt": "a", "frequency_penalty": "high"})", "frequency_penalty");
  expect_bad(C, R"({"prompt": "a", "logit_bias": {"5": 1}})", "logit_bias");
}

TEST(OpenaiApi, PromptListErrorsNameTheElement) {
  struct Case {
    const char* body;
    const char* names;
  };
  for (const Case& c : {Case{R"({"prompt": ["a", 5]})", "prompt[1]"}, Case{R"({"prompt": [[1, 2], []]})", "prompt[1]"},
                        Case{R"({"prompt": [[1], [2], [3, 300]]})", "prompt[2][1]"},
                        Case{R"({"prompt": [[1], ["x"]]})", "prompt[1][0]"}, Case{R"({"prompt": ["a", null]})", "prompt[1]"}}) {
    ApiError e = parse_err(C, c.body);
    EXPECT_EQ(e.param, "prompt") << c.body;
    EXPECT_NE(e.message.find(c.names), std::string::npos) << c.body << ": " << e.message;
  }
  // the list's length is capped (ApiContext::max_prompts: the server's slots + queue)
  ApiContext small = kCtx;
  small.max_prompts = 2;
  ApiRequest r;
  ApiError e;
  EXPECT_FALSE(api_parse_request(C, R"({"prompt": ["a", "b", "c"]})", small, r, e));
  EXPECT_EQ(e.param, "prompt");
  EXPECT_NE(e.message.find("3 prompts; at most 2"), std::string::npos) << e.message;
  EXPECT_TRUE(api_parse_request(C, R"({"prompt": ["a", "b"]})", small, r, e)) << e.message;
  // an element too long for the context is named too
  Tokenizer tok = byte_tokenizer();
  ChatTemplate tmpl = chat_template_for(tok);
  ASSERT_TRUE(api_parse_request(C, json{{"prompt", {"a", "b", std::string(64, 'c')}}}.dump(), kCtx, r, e));
  std::vector<GenRequest> gens;
  EXPECT_FALSE(api_build_generations(r, tok, tmpl, kCtx, gens, e));
  EXPECT_EQ(e.param, "prompt");
  EXPECT_EQ(e.code, "context_length_exceeded");
  EXPECT_NE(e.message.find("prompt[2] is 64 tokens"), std::string::npos) << e.message;
}

TEST(OpenaiApi, PromptListsGiveOneGenerationPerPrompt) {
  Tokenizer tok = byte_tokenizer();
  ChatTemplate tmpl = chat_template_for(tok);
  ApiRequest r;
  ApiError e;
  std::vector<GenRequest> gens;
  // the harness's log-likelihood request: token arrays, echo, logprobs 1, max_tokens 1
  ASSERT_TRUE(api_parse_request(C, R"({"model": "tiny", "prompt": [[5, 6, 7], [5, 6, 8, 9], [5]], "temperature": 0,
      "max_tokens": 1, "logprobs": 1, "seed": 1234, "echo": true})", kCtx, r, e)) << e.message;
  ASSERT_TRUE(api_build_generations(r, tok, tmpl, kCtx, gens, e)) << e.message;
  ASSERT_EQ(gens.size(), 3u);
  EXPECT_EQ(gens[1].prompt, (std::vector<int32_t>{5, 6, 8, 9}));
  for (const GenRequest& g : gens) {
    EXPECT_EQ(g.max_tokens, 1);
    EXPECT_EQ(g.prompt_logprobs, 1);
    EXPECT_EQ(g.logprobs, 1);
    EXPECT_EQ(g.sampling.seed, 1234u);
  }
  // strings, one of them empty (the end-of-document token); echo with max_tokens 0 scores only
  ASSERT_TRUE(api_parse_request(C, R"({"prompt": ["ab", "", "c"], "max_tokens": 0, "echo": true, "logprobs": 0})",
                                kCtx, r, e)) << e.message;
  EXPECT_TRUE(r.score_only);
  ASSERT_TRUE(api_build_generations(r, tok, tmpl, kCtx, gens, e)) << e.message;
  ASSERT_EQ(gens.size(), 3u);
  EXPECT_EQ(gens[0].prompt, (std::vector<int32_t>{'a', 'b'}));
  EXPECT_EQ(gens[1].prompt, (std::vector<int32_t>{256}));
  EXPECT_EQ(gens[2].max_tokens, 0);
  EXPECT_EQ(gens[2].prompt_logprobs, 0);
  // scoring only, a prompt may fill the context; generating, it may not
  ASSERT_TRUE(api_parse_request(C, json{{"prompt", std::string(64, 'a')}, {"max_tokens", 0}, {"echo", true}}.dump(),
                                kCtx, r, e));
  EXPECT_TRUE(api_build_generations(r, tok, tmpl, kCtx, gens, e)) << e.message;
  // no echo: no prompt scoring
  ASSERT_TRUE(api_parse_request(C, R"({"prompt": "a", "logprobs": 2})", kCtx, r, e));
  ASSERT_TRUE(api_build_generations(r, tok, tmpl, kCtx, gens, e));
  EXPECT_EQ(gens[0].prompt_logprobs, -1);
}

TEST(OpenaiApi, EachBadChatFieldIsNamed) {
  expect_bad(H, R"({})", "messages");
  expect_bad(H, R"({"messages": "hi"})", "messages");
  expect_bad(H, R"({"messages": []})", "messages");
  expect_bad(H, R"({"messages": [5]})", "messages");
  expect_bad(H, R"({"messages": [{"content": "hi"}]})", "messages");
  expect_bad(H, R"({"messages": [{"role": "tool", "content": "hi"}]})", "messages");
  expect_bad(H, R"({"messages": [{"role": "user"}]})", "messages");
  expect_bad(H, R"({"messages": [{"role": "user", "content": 5}]})", "messages");
  expect_bad(H, R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "messages");
  const std::string m = R"("messages": [{"role": "user", "content": "hi"}])";
  expect_bad(H, "{" + m + R"(, "max_completion_tokens": 0})", "max_completion_tokens");
  expect_bad(H, "{" + m + R"(, "max_tokens": 100})", "max_tokens");
  expect_bad(H, "{" + m + R"(, "logprobs": 3})", "logprobs");
  expect_bad(H, "{" + m + R"(, "top_logprobs": 2})", "top_logprobs");
  expect_bad(H, "{" + m + R"(, "logprobs": true, "top_logprobs": 21})", "top_logprobs");
  expect_bad(H, "{" + m + R"(, "tools": [{"type": "function"}]})", "tools");
  expect_bad(H, "{" + m + R"(, "model": "other"})", "model", 404);
}

TEST(OpenaiApi, GoodCompletionBodiesBecomeTheirGeneration) {
  Tokenizer tok = byte_tokenizer();
  ChatTemplate tmpl = chat_template_for(tok);
  ApiRequest r;
  ApiError e;
  ASSERT_TRUE(api_parse_request(C, R"({"model": "tiny", "prompt": "hi", "max_tokens": 5, "temperature": 0,
      "top_p": 0.5, "top_k": 3, "seed": 7, "stop": "\n", "stream": true, "stream_options": {"include_usage": true},
      "logprobs": 2, "user": "ignored", "n": 1, "presence_penalty": 0.5, "frequency_penalty": -1})", kCtx, r, e))
      << e.message;
  EXPECT_EQ(r.max_tokens, 5);
  EXPECT_TRUE(r.stream && r.include_usage && r.logprobs);
  EXPECT_EQ(r.top_logprobs, 2);
  GenRequest g;
  ASSERT_TRUE(api_build_generation(r, tok, tmpl, kCtx, g, e)) << e.message;
  EXPECT_EQ(g.prompt, (std::vector<int32_t>{'h', 'i'}));
  EXPECT_EQ(g.max_tokens, 5);
  EXPECT_EQ(g.sampling.temperature, 0.0f);
  EXPECT_EQ(g.sampling.top_p, 0.5f);
  EXPECT_EQ(g.sampling.top_k, 3);
  EXPECT_EQ(g.sampling.seed, 7u);
  EXPECT_EQ(g.sampling.presence_penalty, 0.5f);
  EXPECT_EQ(g.sampling.frequency_penalty, -1.0f);
  EXPECT_EQ(g.stop, (std::vector<std::string>{"\n"}));
  EXPECT_EQ(g.logprobs, 2);

  // token arrays, an array of one string, the special token written in the text, defaults
  ASSERT_TRUE(api_parse_request(C, R"({"prompt": [[5, 6, 7]]})", kCtx, r, e));
  ASSERT_TRUE(api_build_generation(r, tok, tmpl, kCtx, g, e));
  EXPECT_EQ(g.prompt, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(g.max_tokens, kApiDefaultCompletionTokens);
  EXPECT_EQ(g.sampling.temperature, 1.0f);
  ASSERT_TRUE(api_parse_request(C, R"({"prompt": ["a<|endoftext|>"], "max_tokens": 16.0, "stop": ["x", ""]})", kCtx, r, e));
  ASSERT_TRUE(api_build_generation(r, tok, tmpl, kCtx, g, e));
  EXPECT_EQ(g.prompt, (std::vector<int32_t>{'a', 256}));
  EXPECT_EQ(g.stop, (std::vector<std::string>{"x"}));
  // an empty prompt starts from the end-of-document token
  ASSERT_TRUE(api_parse_request(C, R"({"prompt": ""})", kCtx, r, e));
  ASSERT_TRUE(api_build_generation(r, tok, tmpl, kCtx, g, e));
  EXPECT_EQ(g.prompt, (std::vector<int32_t>{256}));
  // logprobs 0: the chosen token's log probability, no top entries (the engine is asked for one)
  ASSERT_TRUE(api_parse_request(C, R"({"prompt": "a", "logprobs": 0})", kCtx, r, e));
  ASSERT_TRUE(api_build_generation(r, tok, tmpl, kCtx, g, e));
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 0);
  EXPECT_EQ(g.logprobs, 1);
  // null means "not given"
  ASSERT_TRUE(api_parse_request(C, R"({"prompt": "a", "max_tokens": null, "stop": null, "logprobs": null})", kCtx, r, e));
  EXPECT_FALSE(r.logprobs);
}

TEST(OpenaiApi, PromptLengthIsCheckedAgainstTheContext) {
  Tokenizer tok = byte_tokenizer();
  ChatTemplate tmpl = chat_template_for(tok);
  ApiRequest r;
  ApiError e;
  GenRequest g;
  // 64 tokens fill the context: refused, naming the prompt
  ASSERT_TRUE(api_parse_request(C, json{{"prompt", std::string(64, 'a')}}.dump(), kCtx, r, e));
  ASSERT_FALSE(api_build_generation(r, tok, tmpl, kCtx, g, e));
  EXPECT_EQ(e.param, "prompt");
  EXPECT_EQ(e.code, "context_length_exceeded");
  // 60 tokens and max_tokens 10: the completion is cut to the 4 the context leaves
  ASSERT_TRUE(api_parse_request(C, json{{"prompt", std::string(60, 'a')}, {"max_tokens", 10}}.dump(), kCtx, r, e));
  ASSERT_TRUE(api_build_generation(r, tok, tmpl, kCtx, g, e));
  EXPECT_EQ(g.max_tokens, 4);
  // chat: the rendered conversation counts, and the error names messages
  json body = {{"messages", {{{"role", "user"}, {"content", std::string(60, 'a')}}}}};
  ASSERT_TRUE(api_parse_request(H, body.dump(), kCtx, r, e));
  ASSERT_FALSE(api_build_generation(r, tok, tmpl, kCtx, g, e));
  EXPECT_EQ(e.param, "messages");
}

TEST(OpenaiApi, ChatGetsTheTemplateAndItsStop) {
  Tokenizer tok = byte_tokenizer();
  ChatTemplate tmpl = chat_template_for(tok);
  ApiRequest r;
  ApiError e;
  GenRequest g;
  ASSERT_TRUE(api_parse_request(H, R"({"messages": [{"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hi"}]}], "stop": "."})", kCtx, r, e)) << e.message;
  ASSERT_TRUE(api_build_generation(r, tok, tmpl, kCtx, g, e));
  std::string text(g.prompt.begin(), g.prompt.end());
  EXPECT_EQ(text, "Be brief.\n\nUser: Hi\n\nAssistant:");
  EXPECT_EQ(g.stop, (std::vector<std::string>{".", "\nUser:"}));
  EXPECT_EQ(g.max_tokens, kCtx.ctx - (int)g.prompt.size());  // chat default: the rest of the context
}

TEST(OpenaiApi, TokenizeAndDetokenizeBodies) {
  std::string content;
  bool pieces;
  ApiError e;
  ASSERT_TRUE(api_parse_tokenize(R"({"content": "abc"})", content, pieces, e));
  EXPECT_EQ(content, "abc");
  EXPECT_FALSE(api_parse_tokenize(R"({"content": 1})", content, pieces, e));
  EXPECT_EQ(e.param, "content");
  EXPECT_FALSE(api_parse_tokenize(R"({})", content, pieces, e));
  EXPECT_EQ(e.param, "content");
  std::vector<int32_t> ids;
  ASSERT_TRUE(api_parse_detokenize(R"({"tokens": [1, 2]})", 257, ids, e));
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 2}));
  EXPECT_FALSE(api_parse_detokenize(R"({"tokens": [1, 257]})", 257, ids, e));
  EXPECT_EQ(e.param, "tokens");
  EXPECT_FALSE(api_parse_detokenize(R"({"tokens": "ab"})", 257, ids, e));
  EXPECT_EQ(e.param, "tokens");
}

TokenEvent event(int32_t id, float lp, std::string text) {
  TokenEvent ev;
  ev.id = id;
  ev.logprob = lp;
  ev.text = std::move(text);
  ev.top = {{id, lp}, {'z', -3.0f}};
  return ev;
}

TEST(OpenaiApi, ResponsesHaveTheOpenAiShape) {
  Tokenizer tok = byte_tokenizer();
  ApiRequest r;
  ApiError e;
  ASSERT_TRUE(api_parse_request(C, R"({"prompt": "ab", "logprobs": 1, "return_token_ids": true})", kCtx, r, e));
  ApiMeta m = api_meta_new(C, "tiny");
  EXPECT_EQ(m.id.rfind("cmpl-", 0), 0u);
  GenResult res;
  res.ids = {'x', 'y'};
  res.text = "xy";
  res.finish = FinishReason::kLength;
  res.prompt_tokens = 2;
  res.completion_tokens = 2;
  std::vector<TokenEvent> evs = {event('x', -0.5f, "x"), event('y', -0.25f, "y")};
  json j = api_response(r, m, res, evs, {'a', 'b'}, tok);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["choices"][0]["text"], "xy");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["choices"][0]["token_ids"], (std::vector<int>{'x', 'y'}));
  EXPECT_EQ(j["prompt_token_ids"], (std::vector<int>{'a', 'b'}));
  EXPECT_EQ(j["choices"][0]["logprobs"]["tokens"], (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(j["choices"][0]["logprobs"]["token_logprobs"][1], -0.25);
  EXPECT_EQ(j["choices"][0]["logprobs"]["text_offset"], (std::vector<int>{0, 1}));
  EXPECT_EQ(j["choices"][0]["logprobs"]["top_logprobs"][0].size(), 1u);
  EXPECT_EQ(j["usage"], (json{{"prompt_tokens", 2}, {"completion_tokens", 2}, {"total_tokens", 4}}));

  ASSERT_TRUE(api_parse_request(C, R"({"prompt": "ab", "echo": true})", kCtx, r, e));
  j = api_response(r, m, res, evs, {'a', 'b'}, tok);
  EXPECT_EQ(j["choices"][0]["text"], "abxy");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());

  ASSERT_TRUE(api_parse_request(H, R"({"messages": [{"role": "user", "content": "q"}], "logprobs": true,
      "top_logprobs": 2})", kCtx, r, e));
  res.finish = FinishReason::kStop;
  j = api_response(r, api_meta_new(H, "tiny"), res, evs, {'q'}, tok);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(j["choices"][0]["message"], (json{{"role", "assistant"}, {"content", "xy"}}));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  const json& c0 = j["choices"][0]["logprobs"]["content"][0];
  EXPECT_EQ(c0["token"], "x");
  EXPECT_EQ(c0["bytes"], (std::vector<int>{'x'}));
  EXPECT_EQ(c0["top_logprobs"].size(), 2u);
  EXPECT_EQ(c0["top_logprobs"][1]["token"], "z");
}

// A prompt's scored events as the engine gives them: [0] without a log probability.
std::vector<TokenEvent> scored_prompt(const std::string& p) {
  std::vector<TokenEvent> evs;
  for (size_t i = 0; i < p.size(); i++) {
    TokenEvent ev = event((unsigned char)p[i], -1.0f - (float)i, "");
    if (i == 0) {
      ev.logprob = std::nanf("");
      ev.top.clear();
    }
    evs.push_back(ev);
  }
  return evs;
}

ApiChoice choice_of(const std::string& prompt, const std::string& gen, FinishReason finish) {
  ApiChoice c;
  for (unsigned char ch : prompt) c.prompt.push_back(ch);
  c.result.prompt_events = scored_prompt(prompt);
  c.result.prompt_tokens = (int)prompt.size();
  for (char ch : gen) {
    c.events.push_back(event(ch, -0.5f, std::string(1, ch)));
    c.result.ids.push_back(ch);
  }
  c.result.text = gen;
  c.result.completion_tokens = (int)gen.size();
  c.result.finish = finish;
  return c;
}

TEST(OpenaiApi, EchoWithLogprobsPutsThePromptTokensFirst) {
  Tokenizer tok = byte_tokenizer();
  ApiRequest r;
  ApiError e;
  ASSERT_TRUE(api_parse_request(C, R"({"prompt": [[97, 98, 99], [100, 101]], "echo": true, "logprobs": 1,
      "max_tokens": 1})", kCtx, r, e)) << e.message;
  std::vector<ApiChoice> cs = {choice_of("abc", "x", FinishReason::kLength), choice_of("de", "y", FinishReason::kStop)};
  json j = api_response(r, api_meta_new(C, "tiny"), cs, tok);
  ASSERT_EQ(j["choices"].size(), 2u);
  for (int i = 0; i < 2; i++) EXPECT_EQ(j["choices"][i]["index"], i);
  const json& c0 = j["choices"][0];
  EXPECT_EQ(c0["text"], "abcx");
  EXPECT_EQ(c0["finish_reason"], "length");
  EXPECT_EQ(j["choices"][1]["text"], "dey");
  EXPECT_EQ(j["choices"][1]["finish_reason"], "stop");
  const json& lp = c0["logprobs"];
  EXPECT_EQ(lp["tokens"], (std::vector<std::string>{"a", "b", "c", "x"}));
  ASSERT_EQ(lp["token_logprobs"].size(), 4u);
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_EQ(lp["token_logprobs"][1], -2.0);
  EXPECT_EQ(lp["token_logprobs"][2], -3.0);
  EXPECT_EQ(lp["token_logprobs"][3], -0.5);
  ASSERT_EQ(lp["top_logprobs"].size(), 4u);
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  for (int i = 1; i < 4; i++) EXPECT_EQ(lp["top_logprobs"][i].size(), 1u) << i;  // logprobs 1
  EXPECT_EQ(lp["top_logprobs"][1], (json{{"b", -2.0}}));
  EXPECT_EQ(lp["text_offset"], (std::vector<int>{0, 1, 2, 3}));
  // the harness's reading: sum(token_logprobs[ctxlen:-1]), greedy when each equals its top's max
  double sum = 0;
  for (int i = 1; i < 3; i++) sum += lp["token_logprobs"][i].get<double>();
  EXPECT_EQ(sum, -5.0);
  EXPECT_EQ(j["usage"], (json{{"prompt_tokens", 5}, {"completion_tokens", 2}, {"total_tokens", 7}}));

  // logprobs 2: two top entries per prompt token; max_tokens 0: the prompt alone
  ASSERT_TRUE(api_parse_request(C, R"({"prompt": "abc", "echo": true, "logprobs": 2, "max_tokens": 0,
      "return_token_ids": true})", kCtx, r, e)) << e.message;
  j = api_response(r, api_meta_new(C, "tiny"), {choice_of("abc", "", FinishReason::kLength)}, tok);
  const json& only = j["choices"][0];
  EXPECT_EQ(only["text"], "abc");
  EXPECT_EQ(only["finish_reason"], "length");
  EXPECT_EQ(only["logprobs"]["tokens"].size(), 3u);
  EXPECT_EQ(only["logprobs"]["top_logprobs"][2].size(), 2u);
  EXPECT_EQ(only["token_ids"], json::array());
  EXPECT_EQ(only["prompt_token_ids"], (std::vector<int>{'a', 'b', 'c'}));
  EXPECT_EQ(j["prompt_token_ids"], (std::vector<int>{'a', 'b', 'c'}));
  EXPECT_EQ(j["usage"]["completion_tokens"], 0);
  EXPECT_TRUE(json::accept(api_dump(j)));

  // a character over three byte tokens: offsets count the bytes made final before each token
  ASSERT_TRUE(api_parse_request(C, R"({"prompt": "a", "echo": true, "logprobs": 0})", kCtx, r, e));
  ApiChoice split = choice_of("\xE4\xB8\xADz", "", FinishReason::kLength);
  j = api_response(r, api_meta_new(C, "tiny"), {split}, tok);
  EXPECT_EQ(j["choices"][0]["logprobs"]["text_offset"], (std::vector<int>{0, 0, 0, 3}));
  EXPECT_EQ(j["choices"][0]["logprobs"]["top_logprobs"][1], json::object()) << "logprobs 0: no top entries";
}

TEST(OpenaiApi, StreamingChunks) {
  Tokenizer tok = byte_tokenizer();
  ApiRequest r;
  ApiError e;
  ASSERT_TRUE(api_parse_request(H, R"({"messages": [{"role": "user", "content": "q"}], "stream": true,
      "stream_options": {"include_usage": true}})", kCtx, r, e));
  ApiMeta m = api_meta_new(H, "tiny");
  json first = api_chunk_first(r, m, "");
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["usage"].is_null());
  json tokc = api_chunk_token(r, m, event('x', -1, "x"), tok, 0);
  EXPECT_EQ(tokc["choices"][0]["delta"], (json{{"content", "x"}}));
  EXPECT_TRUE(tokc["choices"][0]["finish_reason"].is_null());
  json last = api_chunk_last(r, m, "", FinishReason::kLength);
  EXPECT_EQ(last["choices"][0]["delta"], json::object());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  json usage = api_chunk_usage(r, m, 3, 1);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 4);
  EXPECT_EQ(usage["id"], first["id"]);
  EXPECT_EQ(api_sse(json{{"a", 1}}), "data: {\"a\":1}\n\n");

  ASSERT_TRUE(api_parse_request(C, R"({"prompt": "q", "stream": true, "logprobs": 0})", kCtx, r, e));
  m = api_meta_new(C, "tiny");
  tokc = api_chunk_token(r, m, event('x', -1, "x"), tok, 5);
  EXPECT_EQ(tokc["object"], "text_completion");
  EXPECT_EQ(tokc["choices"][0]["text"], "x");
  EXPECT_EQ(tokc["choices"][0]["logprobs"]["tokens"], (std::vector<std::string>{"x"}));
  EXPECT_EQ(tokc["choices"][0]["logprobs"]["text_offset"][0], 5);
  EXPECT_FALSE(tokc.contains("usage"));
  last = api_chunk_last(r, m, "tail", FinishReason::kStop);
  EXPECT_EQ(last["choices"][0]["text"], "tail");
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
}

TEST(OpenaiApi, InvalidUtf8InATokenNeverBreaksTheJson) {
  Tokenizer tok = byte_tokenizer();
  ApiRequest r;
  ApiError e;
  ASSERT_TRUE(api_parse_request(C, R"({"prompt": "q", "logprobs": 1})", kCtx, r, e));
  json j = api_chunk_token(r, api_meta_new(C, "tiny"), event(0xE4, -1, ""), tok, 0);  // half a character
  std::string s = api_dump(j);
  EXPECT_NE(s.find("\xEF\xBF\xBD"), std::string::npos);
  EXPECT_TRUE(json::accept(s));
}

}  // namespace
