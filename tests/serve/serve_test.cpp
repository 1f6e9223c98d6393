// `smelt serve` as clients see it: the binary started on port 0 over a tiny random checkpoint,
// driven by the official OpenAI npm client (tests/reference/openai_check.mjs: completions and
// chat, streamed and not, usage against /tokenize and `smelt tokenizer encode`, greedy text
// against `smelt generate`) and by raw HTTP for the rest: every 4xx names its field and the server
// keeps serving; 404/405/413/401; batch invariance (a greedy request alone and among 8 released at
// once: the same ids and log probabilities, in shared steps); overload (1 slot, 1 queued: 429 with
// Retry-After, every accepted request complete); a streaming client that leaves frees its slot;
// SIGTERM ends the streams in flight with [DONE] and exits 0; lm-evaluation-harness's log-likelihood
// request (token-array prompts sharing a context, echo, logprobs 1, max_tokens 1) gives per prompt
// what the prompt alone gives.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/tiny_checkpoint.hpp"
#include "serve/raw_http.hpp"
#include "serve/serve_process.hpp"
#include "smelt/tokenizer/tokenizer.hpp"
#include "test_references.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace smelt;
using namespace smelt::test;

namespace {

// A value of a metric line ("smelt_busy_slots 0" or "name{label} 3"); -1 when absent.
double metric(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (l.rfind(name + " ", 0) == 0) return std::stod(l.substr(name.size() + 1));
  return -1;
}

const char* kKey = "sk-test-0123456789";

class Serve : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("smelt_serve_" + std::to_string(getpid())));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    tok_path_ = new std::string((*dir_ / "tokenizer.json").string());
    ASSERT_TRUE(test::train_tiny_tokenizer(*tok_path_, 400));
    ModelConfig c;
    c.vocab_size = 416;
    c.d_model = 32;
    c.n_layers = 2;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.ffn_hidden = 64;
    c.max_seq_len = 1024;  // long completions (hundreds of steps) for overload, disconnect and SIGTERM
    c.tie_embeddings = false;
    c.init_std = 0.25;     // spread-out logits: greedy does not hinge on rounding
    Model m;
    ASSERT_TRUE(m.init(c, 1, 64, 1, 77));
    run_ = new std::string((*dir_ / "tinyrun").string());
    ASSERT_TRUE(test::save_tiny_checkpoint(m, *run_, 10, *tok_path_));
    std::ofstream(*dir_ / "key.txt") << kKey << "\n";
    // the step directory: the model is still named after the run
    server_ = new ServeProcess("--checkpoint " + ckpt_step_dir(*run_, 10) + " --slots 8 --max-queue 8 --api-key-file " +
                                   (*dir_ / "key.txt").string() + " --max-body-bytes 65536 --log-level debug",
                               *dir_ / "serve.log");
    ASSERT_GT(server_->port(), 0) << server_->log();
  }
  static void TearDownTestSuite() {
    delete server_;
    fs::remove_all(*dir_);
    delete dir_;
    delete tok_path_;
    delete run_;
  }
  static int port() { return server_->port(); }
  static Reply post(const std::string& path, const json& body) { return http(port(), "POST", path, body.dump(), kKey); }
  static int count_tokens(const std::string& text) {
    Reply r = post("/tokenize", {{"content", text}});
    EXPECT_EQ(r.status, 200) << r.body;
    return (int)r.js()["tokens"].size();
  }

  static fs::path* dir_;
  static std::string *tok_path_, *run_;
  static ServeProcess* server_;
};
fs::path* Serve::dir_ = nullptr;
std::string* Serve::tok_path_ = nullptr;
std::string* Serve::run_ = nullptr;
ServeProcess* Serve::server_ = nullptr;

const std::string kPrompt = "The kernel coding style is";

TEST_F(Serve, OfficialOpenAiClient) {
  const fs::path ref = fs::path(SMELT_SOURCE_DIR) / "tests/reference";
  SMELT_REQUIRE_REFERENCE(fs::exists(ref / "node_modules/openai/package.json"),
                          "tests/reference/node_modules has no `openai` (run scripts/install-deps)");
  const std::string cmd = "node " + (ref / "openai_check.mjs").string() + " http://127.0.0.1:" + std::to_string(port()) +
                          " " + kKey + " tinyrun '" + kPrompt + "' 2>&1";
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  ASSERT_NE(f, nullptr);
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  ASSERT_EQ(pclose(f), 0) << out;
  json j = json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;

  // completions: prompt_tokens as /tokenize and `smelt tokenizer encode` count them
  const int n_prompt = count_tokens(kPrompt);
  std::ofstream(*dir_ / "prompt.txt") << kPrompt;
  test::CmdResult enc = test::run_smelt("tokenizer encode -t " + *tok_path_ + " -i " + (*dir_ / "prompt.txt").string() +
                                            " -o - --format text --whole", *dir_);
  ASSERT_EQ(enc.rc, 0) << enc.err;
  std::istringstream ids(enc.out);
  int n_encoded = 0;
  for (std::string id; ids >> id;) n_encoded++;
  EXPECT_EQ(n_encoded, n_prompt);
  const json& c = j["completion"];
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["model"], "tinyrun");
  EXPECT_EQ(c["usage"]["prompt_tokens"], n_prompt);
  const int n_done = c["usage"]["completion_tokens"];
  EXPECT_GE(n_done, 1);
  EXPECT_LE(n_done, 12);
  EXPECT_EQ(c["usage"]["total_tokens"], n_prompt + n_done);
  EXPECT_EQ(c["finish"], n_done == 12 ? "length" : "stop");
  // streamed: the same text at temperature 0, one logprobs entry per completion token
  const json& cs = j["completion_stream"];
  EXPECT_EQ(cs["text"], c["text"]);
  EXPECT_EQ(cs["tokens"], n_done);
  EXPECT_EQ(cs["usage"], c["usage"]);
  EXPECT_EQ(cs["finish"], c["finish"]);
  EXPECT_EQ(cs["ids"], 1);  // one id across the chunks
  EXPECT_EQ(cs["objects"], json::array({"text_completion"}));
  // the same greedy continuation as `smelt generate`
  test::CmdResult gen = test::run_smelt("generate --checkpoint " + *run_ + " --prompt '" + kPrompt +
                                            "' --temperature 0 --max-new-tokens 12", *dir_);
  ASSERT_EQ(gen.rc, 0) << gen.err;
  EXPECT_EQ(gen.out, c["text"].get<std::string>() + "\n");
  test::CmdResult pen = test::run_smelt("generate --checkpoint " + *run_ + " --prompt '" + kPrompt +
                                            "' --temperature 0 --max-new-tokens 12 --frequency-penalty 1.5 "
                                            "--presence-penalty 0.5", *dir_);
  ASSERT_EQ(pen.rc, 0) << pen.err;
  EXPECT_EQ(pen.out, j["penalized"].get<std::string>() + "\n");
  EXPECT_NE(pen.out, gen.out) << "the penalties change this model's greedy text (else the check above proves nothing)";

  // chat: the plain template's prompt, streamed = not streamed
  const int n_chat = count_tokens("You are terse.\n\nUser: Name a colour.\n\nAssistant:");
  const json& h = j["chat"];
  EXPECT_EQ(h["object"], "chat.completion");
  EXPECT_EQ(h["role"], "assistant");
  EXPECT_EQ(h["usage"]["prompt_tokens"], n_chat);
  const json& hs = j["chat_stream"];
  EXPECT_EQ(hs["roles"], json::array({"assistant"}));
  EXPECT_EQ(hs["text"], h["text"]);
  EXPECT_EQ(hs["tokens"], h["usage"]["completion_tokens"]);
  EXPECT_EQ(hs["usage"], h["usage"]);
  EXPECT_EQ(hs["objects"], json::array({"chat.completion.chunk"}));

  // a list of two prompts, echo, logprobs 1, max_tokens 0: each prompt's tokens scored, in order
  const json& sc = j["scored"];
  const int n_too = count_tokens(kPrompt + " too");
  ASSERT_EQ(sc["choices"].size(), 2u) << sc;
  for (int i = 0; i < 2; i++) {
    const json& ch = sc["choices"][i];
    EXPECT_EQ(ch["index"], i);
    EXPECT_EQ(ch["text"], i == 0 ? kPrompt : kPrompt + " too");
    EXPECT_EQ(ch["finish"], "length");
    EXPECT_EQ(ch["tokens"], i == 0 ? n_prompt : n_too);
    EXPECT_TRUE(ch["first"].is_null());
    EXPECT_EQ(ch["rest"], true);
    EXPECT_EQ(ch["tops"], json(std::vector<int>((i == 0 ? n_prompt : n_too) - 1, 1)));
  }
  EXPECT_EQ(sc["usage"], (json{{"prompt_tokens", n_prompt + n_too}, {"completion_tokens", 0},
                               {"total_tokens", n_prompt + n_too}}));

  EXPECT_EQ(j["seeded"][0], j["seeded"][1]);
  EXPECT_EQ(j["models"], json::array({"tinyrun"}));
  EXPECT_EQ(j["model"], "tinyrun");
  // errors as the client raises them
  EXPECT_EQ(j["errors"]["max_tokens"]["status"], 400);
  EXPECT_EQ(j["errors"]["max_tokens"]["param"], "max_tokens");
  EXPECT_EQ(j["errors"]["top_p"]["status"], 400);
  EXPECT_EQ(j["errors"]["top_p"]["param"], "top_p");
  EXPECT_EQ(j["errors"]["frequency_penalty"]["status"], 400);
  EXPECT_EQ(j["errors"]["frequency_penalty"]["param"], "frequency_penalty");
  EXPECT_EQ(j["errors"]["model"]["status"], 404);
  EXPECT_EQ(j["errors"]["model"]["code"], "model_not_found");
  EXPECT_EQ(j["errors"]["key"]["status"], 401);
  EXPECT_EQ(j["errors"]["key"]["kind"], "AuthenticationError");
}

void expect_error(const Reply& r, int status, const std::string& param, const std::string& what) {
  EXPECT_EQ(r.status, status) << what << ": " << r.raw;
  json j = r.js();
  ASSERT_TRUE(j.is_object() && j["error"].is_object()) << what << ": " << r.raw;
  for (const char* k : {"message", "type", "param", "code"}) EXPECT_TRUE(j["error"].contains(k)) << what << " " << k;
  EXPECT_FALSE(j["error"]["message"].get<std::string>().empty()) << what;
  if (param.empty())
    EXPECT_TRUE(j["error"]["param"].is_null()) << what << ": " << r.body;
  else
    EXPECT_EQ(j["error"]["param"], param) << what << ": " << r.body;
  EXPECT_EQ(r.headers.at("content-type"), "application/json") << what;
}

TEST_F(Serve, ErrorsNameTheFieldAndTheServerKeepsServing) {
  const json msgs = json::array({{{"role", "user"}, {"content", "hi"}}});
  struct Case {
    std::string path, body, param;
    int status;
  };
  const std::vector<Case> cases = {
      {"/v1/completions", "{\"prompt\": ", "", 400},
      {"/v1/completions", "[1]", "", 400},
      {"/v1/completions", R"({"max_tokens": 4})", "prompt", 400},
      {"/v1/completions", R"({"prompt": 7})", "prompt", 400},
      {"/v1/completions", R"({"prompt": [1, 999]})", "prompt", 400},
      {"/v1/completions", R"({"prompt": "a", "model": "gpt-4"})", "model", 404},
      {"/v1/completions", R"({"prompt": "a", "max_tokens": -1})", "max_tokens", 400},
      {"/v1/completions", R"({"prompt": "a", "max_tokens": 1000000})", "max_tokens", 400},
      {"/v1/completions", R"({"prompt": "a", "max_tokens": "many"})", "max_tokens", 400},
      {"/v1/completions", R"({"prompt": "a", "top_p": 0})", "top_p", 400},
      {"/v1/completions", R"({"prompt": "a", "temperature": 3})", "temperature", 400},
      {"/v1/completions", R"({"prompt": "a", "logprobs": 50})", "logprobs", 400},
      {"/v1/completions", R"({"prompt": "a", "stop": ["1", "2", "3", "4", "5"]})", "stop", 400},
      {"/v1/completions", R"({"prompt": "a", "n": 3})", "n", 400},
      {"/v1/completions", json{{"prompt", std::string(5000, 'x') + " y"}}.dump(), "prompt", 400},
      {"/v1/chat/completions", R"({"messages": []})", "messages", 400},
      {"/v1/chat/completions", R"({"messages": [{"role": "robot", "content": "x"}]})", "messages", 400},
      {"/v1/chat/completions", json{{"messages", msgs}, {"stream", "yes"}}.dump(), "stream", 400},
      {"/v1/chat/completions", json{{"messages", msgs}, {"top_logprobs", 2}}.dump(), "top_logprobs", 400},
      {"/v1/chat/completions", json{{"messages", msgs}, {"max_completion_tokens", 0}}.dump(), "max_completion_tokens", 400},
      {"/tokenize", R"({"content": 5})", "content", 400},
      {"/detokenize", R"({"tokens": [1, -2]})", "tokens", 400},
  };
  for (const auto& c : cases) {
    expect_error(http(port(), "POST", c.path, c.body, kKey), c.status, c.param, c.path + " " + c.body.substr(0, 80));
    EXPECT_EQ(http(port(), "GET", "/health").status, 200) << "after " << c.body.substr(0, 80);
  }
  // the prompt that fills the context says so
  Reply longp = http(port(), "POST", "/v1/completions", json{{"prompt", std::string(5000, 'x') + " y"}}.dump(), kKey);
  EXPECT_EQ(longp.js()["error"]["code"], "context_length_exceeded");

  // routes, methods, size, keys
  expect_error(http(port(), "GET", "/nope", "", kKey), 404, "", "unknown route");
  expect_error(http(port(), "POST", "/v1/nope", "{}", kKey), 404, "", "unknown POST route");
  Reply r405 = http(port(), "GET", "/v1/completions", "", kKey);
  expect_error(r405, 405, "", "GET on a POST route");
  EXPECT_EQ(r405.headers["allow"], "POST");
  Reply r405b = http(port(), "DELETE", "/health");
  expect_error(r405b, 405, "", "DELETE /health");
  EXPECT_EQ(r405b.headers["allow"], "GET, HEAD");
  expect_error(http(port(), "POST", "/v1/completions", json{{"prompt", std::string(70000, 'a')}}.dump(), kKey), 413, "",
               "body over --max-body-bytes");
  expect_error(http(port(), "GET", "/v1/models"), 401, "", "no key");
  expect_error(http(port(), "GET", "/v1/models", "", "sk-wrong"), 401, "", "wrong key");
  expect_error(http(port(), "GET", "/metrics"), 401, "", "metrics without a key");
  expect_error(http(port(), "POST", "/v1/completions", R"({"prompt": "a"})", "sk-test-012345678"), 401, "", "key prefix");
  EXPECT_EQ(http(port(), "GET", "/v1/models", "", kKey).status, 200);
  Reply health = http(port(), "GET", "/health");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.js(), (json{{"status", "ok"}}));
  // not HTTP at all
  int fd = connect_port(port());
  send_all(fd, "GARBAGE\r\n\r\n");
  // no Connection: close was read, so the connection stays open: read one reply's bytes
  std::string raw;
  char buf[4096];
  while (true) {
    const size_t h = raw.find("\r\n\r\n");
    if (h != std::string::npos) {
      const Reply head = parse_reply(raw);
      if (raw.size() >= h + 4 + std::stoul(head.headers.count("content-length") ? head.headers.at("content-length") : "0"))
        break;
    }
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    raw.append(buf, (size_t)n);
  }
  Reply g = parse_reply(raw);
  close(fd);
  EXPECT_EQ(g.status, 400) << g.raw;

  // still serving: a completion, tokenize / detokenize round trip, the metrics counted the errors
  Reply ok = post("/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 3}, {"temperature", 0}});
  ASSERT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(ok.js()["choices"][0]["text"].is_string(), true);
  Reply t = post("/tokenize", {{"content", "static int x;"}});
  Reply d = post("/detokenize", {{"tokens", t.js()["tokens"]}});
  EXPECT_EQ(d.js()["content"], "static int x;");
  Reply m = http(port(), "GET", "/metrics", "", kKey);
  EXPECT_EQ(m.status, 200);
  EXPECT_NE(m.headers["content-type"].find("text/plain"), std::string::npos);
  EXPECT_GE(metric(m.body, "smelt_http_responses_total{code=\"400\"}"), 20);
  EXPECT_GE(metric(m.body, "smelt_http_responses_total{code=\"413\"}"), 1);
  EXPECT_EQ(metric(m.body, "smelt_slots"), 8);
}

std::string completion_request(const json& body) { return request_text("POST", "/v1/completions", body.dump(), kKey); }

TEST_F(Serve, BatchInvariance) {
  const json greedy = {{"prompt", kPrompt}, {"max_tokens", 40}, {"temperature", 0}, {"logprobs", 3},
                       {"return_token_ids", true}, {"ignore_eos", true}};
  Reply alone = post("/v1/completions", greedy);
  ASSERT_EQ(alone.status, 200) << alone.body;
  const json want = alone.js()["choices"][0];
  ASSERT_EQ(want["token_ids"].size(), 40u);

  // the same request among 7 others released at once: other prompts (one given as ids), lengths,
  // temperatures, a chat, a stream
  const double steps0 = metric(http(port(), "GET", "/metrics", "", kKey).body, "smelt_decode_steps_total");
  const int stream_tokens = 70;  // request 6 streams; its tokens are counted apart
  std::vector<std::string> reqs = {
      completion_request({{"prompt", "static int"}, {"max_tokens", 60}, {"temperature", 1}, {"seed", 1}, {"ignore_eos", true}}),
      completion_request({{"prompt", "The"}, {"max_tokens", 30}, {"temperature", 0.7}, {"top_k", 20}, {"ignore_eos", true}}),
      completion_request({{"prompt", json::array({5, 6, 7, 8, 9, 10, 11, 12})}, {"max_tokens", 50}, {"ignore_eos", true}}),
      completion_request(greedy),
      request_text("POST", "/v1/chat/completions",
                   json{{"messages", {{{"role", "user"}, {"content", "Write a kernel comment."}}}}, {"max_tokens", 45},
                        {"ignore_eos", true}}.dump(), kKey),
      completion_request({{"prompt", std::string(300, 'a')}, {"max_tokens", 20}, {"ignore_eos", true}}),
      completion_request({{"prompt", "int main"}, {"max_tokens", stream_tokens}, {"stream", true}, {"ignore_eos", true}}),
      completion_request({{"prompt", "Chinese"}, {"max_tokens", 35}, {"top_p", 0.9}, {"ignore_eos", true}}),
  };
  std::vector<Reply> got = burst(port(), reqs);
  int generated = 0;
  for (size_t i = 0; i < got.size(); i++) {
    ASSERT_EQ(got[i].status, 200) << i << ": " << got[i].raw.substr(0, 400);
    if (i != 6) generated += got[i].js()["usage"]["completion_tokens"].get<int>();
  }
  const json mine = got[3].js()["choices"][0];
  EXPECT_EQ(mine["token_ids"], want["token_ids"]);
  EXPECT_EQ(mine["logprobs"], want["logprobs"]);  // the same bits: JSON floats round-trip
  EXPECT_EQ(mine["text"], want["text"]);
  // they ran in shared steps: far fewer steps than tokens
  const double steps = metric(http(port(), "GET", "/metrics", "", kKey).body, "smelt_decode_steps_total") - steps0;
  std::printf("8 requests, %d tokens (with the stream's %d) in %.0f steps\n", generated + stream_tokens, stream_tokens,
              steps);
  // One after another: a step per token, the stream's 70 included (350 in all); in shared steps
  // far fewer. The bound counts the stream's steps too: on a loaded machine the requests arrive
  // spread out and share fewer steps (285 of 350 seen in CI, against a bound of 0.9 x 280 then).
  EXPECT_LT(steps, (generated + stream_tokens) * 0.9);
}

// What lm-evaluation-harness's local-completions model reads of a choice: the continuation's
// log-likelihood sum(token_logprobs[ctxlen:-1]) and whether each of its tokens was the top one.
std::pair<double, bool> harness_reading(const json& choice, size_t ctxlen) {
  const json& lp = choice["logprobs"];
  const json& lps = lp["token_logprobs"];
  const json& tops = lp["top_logprobs"];
  double sum = 0;
  bool greedy = true;
  for (size_t i = ctxlen; i + 1 < lps.size(); i++) {
    sum += lps[i].get<double>();
    double best = -1e30;
    for (const auto& [tok, v] : tops[i].items()) best = std::max(best, v.get<double>());
    greedy = greedy && lps[i].get<double>() == best;
  }
  return {sum, greedy};
}

TEST_F(Serve, LmEvalHarnessLoglikelihoodRequest) {
  const std::string context = "The kernel coding style is";
  std::vector<int> ctx_ids = post("/tokenize", {{"content", context}}).js()["tokens"];
  const size_t ctxlen = ctx_ids.size();
  // three continuations: two texts, and the model's own greedy tokens (whose greedy flag must hold)
  std::vector<std::vector<int>> prompts;
  for (const char* cont : {" simple", " about tabs and braces"}) {
    std::vector<int> ids = ctx_ids, more = post("/tokenize", {{"content", cont}}).js()["tokens"];
    ids.insert(ids.end(), more.begin(), more.end());
    prompts.push_back(ids);
  }
  Reply g = post("/v1/completions", {{"prompt", ctx_ids}, {"max_tokens", 3}, {"temperature", 0},
                                     {"return_token_ids", true}, {"ignore_eos", true}});
  ASSERT_EQ(g.status, 200) << g.body;
  std::vector<int> greedy_ids = ctx_ids, gen = g.js()["choices"][0]["token_ids"];
  greedy_ids.insert(greedy_ids.end(), gen.begin(), gen.end());
  prompts.push_back(greedy_ids);

  const json body = {{"model", "tinyrun"}, {"prompt", prompts}, {"temperature", 0}, {"max_tokens", 1},
                     {"logprobs", 1}, {"seed", 1234}, {"echo", true}};
  Reply all = post("/v1/completions", body);
  ASSERT_EQ(all.status, 200) << all.body;
  json choices = all.js()["choices"];
  ASSERT_EQ(choices.size(), 3u);
  int prompt_tokens = 0;
  for (size_t i = 0; i < 3; i++) {
    const json& c = choices[i];
    EXPECT_EQ(c["index"], i);
    const json& lp = c["logprobs"];
    ASSERT_EQ(lp["tokens"].size(), prompts[i].size() + 1) << "the prompt's tokens, then the one generated";
    EXPECT_EQ(lp["token_logprobs"].size(), prompts[i].size() + 1);
    EXPECT_EQ(lp["top_logprobs"].size(), prompts[i].size() + 1);
    EXPECT_EQ(lp["text_offset"].size(), prompts[i].size() + 1);
    EXPECT_TRUE(lp["token_logprobs"][0].is_null());
    EXPECT_TRUE(lp["top_logprobs"][0].is_null());
    for (size_t k = 1; k < lp["top_logprobs"].size(); k++) EXPECT_EQ(lp["top_logprobs"][k].size(), 1u) << k;
    prompt_tokens += (int)prompts[i].size();
    // the same prompt alone, one per request: the same numbers, bit for bit
    json one = body;
    one["prompt"] = json::array({prompts[i]});
    Reply alone = post("/v1/completions", one);
    ASSERT_EQ(alone.status, 200) << alone.body;
    const json want = alone.js()["choices"][0];
    EXPECT_EQ(lp, want["logprobs"]) << "prompt " << i << " scored differently beside the others";
    const auto [sum, greedy] = harness_reading(c, ctxlen);
    const auto [want_sum, want_greedy] = harness_reading(want, ctxlen);
    EXPECT_EQ(sum, want_sum) << i;
    EXPECT_EQ(greedy, want_greedy) << i;
    EXPECT_LT(sum, 0) << i;
    if (i == 2) {
      EXPECT_TRUE(greedy) << "the model's own greedy continuation must read as greedy";
    }
  }
  EXPECT_EQ(all.js()["usage"], (json{{"prompt_tokens", prompt_tokens}, {"completion_tokens", 3},
                                     {"total_tokens", prompt_tokens + 3}}));
  // the harness's generation request: a list of strings, one choice each, in order
  const json gen_body = {{"max_tokens", 5}, {"temperature", 0}, {"stop", json::array({"\n\n"})}, {"seed", 1234}};
  json listed = gen_body;
  listed["prompt"] = json::array({context, "static int"});
  Reply gen2 = post("/v1/completions", listed);
  ASSERT_EQ(gen2.status, 200) << gen2.body;
  ASSERT_EQ(gen2.js()["choices"].size(), 2u);
  for (int i = 0; i < 2; i++) {
    json one = gen_body;
    one["prompt"] = listed["prompt"][i];
    Reply r = post("/v1/completions", one);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(gen2.js()["choices"][i]["index"], i);
    EXPECT_EQ(gen2.js()["choices"][i]["text"], r.js()["choices"][0]["text"]) << i;
  }
  // scoring only: max_tokens 0
  Reply score = post("/v1/completions", {{"prompt", prompts}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 1}});
  ASSERT_EQ(score.status, 200) << score.body;
  const json scored = score.js();
  for (size_t i = 0; i < 3; i++) {
    const json& c = scored["choices"][i];
    EXPECT_EQ(c["finish_reason"], "length");
    ASSERT_EQ(c["logprobs"]["token_logprobs"].size(), prompts[i].size());
    EXPECT_EQ(c["logprobs"]["token_logprobs"], json(std::vector<json>(choices[i]["logprobs"]["token_logprobs"].begin(),
                                                                      choices[i]["logprobs"]["token_logprobs"].end() - 1)));
  }
  EXPECT_EQ(scored["usage"]["completion_tokens"], 0);
  // refusals: a list longer than slots + queue (16), a stream of several, a bad element
  expect_error(post("/v1/completions", {{"prompt", std::vector<std::string>(17, "a")}}), 400, "prompt", "17 prompts");
  expect_error(post("/v1/completions", {{"prompt", json::array({"a", "b"})}, {"stream", true}}), 400, "stream",
               "stream of 2");
  Reply bad = post("/v1/completions", {{"prompt", json::array({json::array({1, 2}), json::array({999})})}});
  expect_error(bad, 400, "prompt", "a bad id in prompt[1]");
  EXPECT_NE(bad.js()["error"]["message"].get<std::string>().find("prompt[1][0]"), std::string::npos) << bad.body;
}

TEST_F(Serve, ADisconnectedStreamFreesItsSlot) {
  const std::string before = http(port(), "GET", "/metrics", "", kKey).body;
  const double cancelled0 = metric(before, "smelt_requests_total{finish=\"cancelled\"}");
  int fd = connect_port(port());
  send_all(fd, completion_request({{"prompt", kPrompt}, {"max_tokens", 990}, {"stream", true}, {"ignore_eos", true}}));
  std::string got;
  char buf[256];
  while (got.find("data: ") == std::string::npos) {
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    ASSERT_GT(n, 0);
    got.append(buf, (size_t)n);
  }
  close(fd);  // gone after the first token
  std::string m;
  for (int i = 0; i < 200; i++) {
    m = http(port(), "GET", "/metrics", "", kKey).body;
    if (metric(m, "smelt_busy_slots") == 0 && metric(m, "smelt_requests_total{finish=\"cancelled\"}") > cancelled0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(metric(m, "smelt_busy_slots"), 0) << m;
  EXPECT_EQ(metric(m, "smelt_requests_total{finish=\"cancelled\"}"), cancelled0 + 1) << m;
  Reply next = post("/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 4}});
  EXPECT_EQ(next.status, 200) << next.body;
}

TEST_F(Serve, OverloadGives429AndLosesNoAcceptedRequest) {
  ServeProcess one("--checkpoint " + *run_ + " --slots 1 --max-queue 1 --model-name one", *dir_ / "one.log");
  ASSERT_GT(one.port(), 0) << one.log();
  const json body = {{"model", "one"}, {"prompt", kPrompt}, {"max_tokens", 600}, {"ignore_eos", true}};
  std::vector<std::string> reqs(5, request_text("POST", "/v1/completions", body.dump(), ""));
  std::vector<Reply> got = burst(one.port(), reqs);
  int ok = 0, busy = 0;
  for (const auto& r : got) {
    if (r.status == 200) {
      ok++;
      EXPECT_EQ(r.js()["usage"]["completion_tokens"], 600) << r.body.substr(0, 300);
      EXPECT_EQ(r.js()["choices"][0]["finish_reason"], "length");
    } else {
      busy++;
      expect_error(r, 429, "", "over --slots + --max-queue");
      EXPECT_EQ(r.headers.count("retry-after"), 1u) << r.raw;
      EXPECT_EQ(r.js()["error"]["code"], "queue_full");
    }
  }
  EXPECT_GE(ok, 2);  // the slot and the queue
  EXPECT_GE(busy, 1);
  const std::string m = http(one.port(), "GET", "/metrics").body;
  EXPECT_EQ(metric(m, "smelt_requests_rejected_total{reason=\"queue_full\"}"), busy);
  EXPECT_EQ(metric(m, "smelt_requests_total{finish=\"length\"}"), ok);
  EXPECT_EQ(http(one.port(), "POST", "/v1/completions", body.dump()).status, 200);  // and it serves on
  EXPECT_EQ(one.stop(SIGTERM), 0) << one.log();
}

TEST_F(Serve, SigtermEndsTheStreamsInFlightAndExitsZero) {
  ServeProcess one("--checkpoint " + *run_ + " --slots 1 --max-queue 1 --shutdown-grace 0", *dir_ / "term.log");
  ASSERT_GT(one.port(), 0) << one.log();
  // one decoding, one queued; both have their first chunk (the chat role) before the signal
  std::vector<int> fds;
  for (int i = 0; i < 2; i++) {
    fds.push_back(connect_port(one.port()));
    send_all(fds.back(), request_text("POST", "/v1/chat/completions",
                                      json{{"messages", {{{"role", "user"}, {"content", "Go on."}}}}, {"max_tokens", 990},
                                           {"stream", true}, {"ignore_eos", true}}.dump(), ""));
  }
  std::vector<std::string> got(fds.size());
  for (size_t i = 0; i < fds.size(); i++) {
    char buf[256];
    while (got[i].find("data: ") == std::string::npos) {
      ssize_t n = recv(fds[i], buf, sizeof buf, 0);
      ASSERT_GT(n, 0);
      got[i].append(buf, (size_t)n);
    }
  }
  EXPECT_EQ(one.stop(SIGTERM), 0) << one.log();
  for (size_t i = 0; i < fds.size(); i++) {
    Reply r = parse_reply(got[i] + read_all(fds[i]));
    close(fds[i]);
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.headers["content-type"], "text/event-stream");
    std::vector<std::string> data = sse_data(r.body);
    ASSERT_GE(data.size(), 2u) << r.body.substr(0, 300);
    EXPECT_EQ(data.back(), "[DONE]");
    json last = json::parse(data[data.size() - 2]);
    const std::string finish = last["choices"][0]["finish_reason"];
    EXPECT_TRUE(finish == "aborted" || finish == "length") << finish;
  }
  EXPECT_EQ(connect_port(one.port()), -1);  // nothing listens any more
}

// --gguf: the checkpoint exported as an F32 GGUF file serves the same greedy ids (the same fp32
// weights through the same batch-invariant decoder).
TEST_F(Serve, GgufFileServesTheCheckpointsIds) {
  const std::string file = (*dir_ / "tiny.gguf").string();
  test::CmdResult ex = test::run_smelt("export --checkpoint " + *run_ + " --format gguf --dtype f32 -o " + file, *dir_);
  ASSERT_EQ(ex.rc, 0) << ex.err;
  ServeProcess g("--gguf " + file + " --model-name g", *dir_ / "gguf.log");
  ASSERT_GT(g.port(), 0) << g.log();
  json body = {{"prompt", kPrompt}, {"max_tokens", 24}, {"temperature", 0}, {"return_token_ids", true}, {"ignore_eos", true}};
  Reply want = post("/v1/completions", body);
  body["model"] = "g";
  Reply got = http(g.port(), "POST", "/v1/completions", body.dump());
  ASSERT_EQ(want.status, 200) << want.body;
  ASSERT_EQ(got.status, 200) << got.body;
  EXPECT_EQ(got.js()["choices"][0]["token_ids"], want.js()["choices"][0]["token_ids"]);
  EXPECT_EQ(got.js()["usage"], want.js()["usage"]);
  EXPECT_EQ(g.stop(SIGTERM), 0) << g.log();
}

// Usage errors exit 2, a model that cannot be loaded 1; --dtype q8_0 serves (int8 linear layers),
// here with a 16-bit KV cache (--kv-cache).
TEST_F(Serve, ExitCodesAndQ8) {
  EXPECT_EQ(test::run_smelt("serve --port 0", *dir_).rc, 2);  // neither --checkpoint nor --gguf
  EXPECT_EQ(test::run_smelt("serve --port 0 --checkpoint " + *run_ + " --gguf x.gguf", *dir_).rc, 2);
  EXPECT_EQ(test::run_smelt("serve --port 0 --checkpoint " + *run_ + " --dtype q4_0", *dir_).rc, 2);
  EXPECT_EQ(test::run_smelt("serve --port 0 --checkpoint " + *run_ + " --kv-cache q8_0", *dir_).rc, 2);
  std::ofstream(*dir_ / "empty_key.txt") << "\n";
  EXPECT_EQ(test::run_smelt("serve --port 0 --checkpoint " + *run_ + " --api-key-file " + (*dir_ / "empty_key.txt").string(),
                            *dir_).rc, 2);
  test::CmdResult missing = test::run_smelt("serve --port 0 --checkpoint " + (*dir_ / "no_such_run").string(), *dir_);
  EXPECT_EQ(missing.rc, 1);
  EXPECT_NE(missing.err.find("no_such_run"), std::string::npos) << missing.err;

  ServeProcess q("--checkpoint " + *run_ + " --dtype q8_0 --kv-cache f16", *dir_ / "q8.log");
  ASSERT_GT(q.port(), 0) << q.log();
  Reply r = http(q.port(), "POST", "/v1/completions", json{{"prompt", kPrompt}, {"max_tokens", 8}, {"ignore_eos", true}}.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.js()["usage"]["completion_tokens"], 8);
  EXPECT_NE(q.log().find("q8_0"), std::string::npos) << q.log();
  EXPECT_NE(q.log().find("f16 KV cache"), std::string::npos) << q.log();
  EXPECT_EQ(q.stop(SIGINT), 0) << q.log();
}

// --dtype bf16 serves on the bf16 decode kernel and a bf16 KV cache, batch invariant like the
// others: a greedy request gives the same ids and log-probs alone and among others released at once.
TEST_F(Serve, Bf16IsBatchInvariant) {
  ServeProcess b("--checkpoint " + *run_ + " --dtype bf16 --slots 4", *dir_ / "bf16.log");
  ASSERT_GT(b.port(), 0) << b.log();
  EXPECT_NE(b.log().find("bf16 decode_linear"), std::string::npos) << b.log();
  EXPECT_NE(b.log().find("bf16 KV cache"), std::string::npos) << b.log();
  const json greedy = {{"prompt", kPrompt}, {"max_tokens", 24}, {"temperature", 0}, {"logprobs", 3},
                       {"return_token_ids", true}, {"ignore_eos", true}};
  Reply alone = http(b.port(), "POST", "/v1/completions", greedy.dump());
  ASSERT_EQ(alone.status, 200) << alone.body;
  const json want = alone.js()["choices"][0];
  ASSERT_EQ(want["token_ids"].size(), 24u);
  auto req = [](const json& body) { return request_text("POST", "/v1/completions", body.dump(), ""); };
  std::vector<Reply> got = burst(b.port(), {req({{"prompt", "static int"}, {"max_tokens", 30}, {"ignore_eos", true}}),
                                            req(greedy),
                                            req({{"prompt", std::string(100, 'a')}, {"max_tokens", 12}, {"ignore_eos", true}}),
                                            req({{"prompt", "The"}, {"max_tokens", 20}, {"temperature", 0.8}, {"ignore_eos", true}})});
  for (size_t i = 0; i < got.size(); i++) ASSERT_EQ(got[i].status, 200) << i << ": " << got[i].raw.substr(0, 400);
  const json mine = got[1].js()["choices"][0];
  EXPECT_EQ(mine["token_ids"], want["token_ids"]);
  EXPECT_EQ(mine["logprobs"], want["logprobs"]);
  EXPECT_EQ(b.stop(SIGTERM), 0) << b.log();
}

}  // namespace
