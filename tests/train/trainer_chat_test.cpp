// Supervised fine-tuning through `smelt train` ([data] format = "chat", docs/finetune.md): chat
// JSONL made from real text (each question asks for the sentence after one of the English test
// text, the reply is that sentence) trains a model whose held-out chat loss, over exactly the
// held-out replies' tokens, falls; the summary counts the bad records with file and line; the
// checkpoint records the template, which `smelt serve` then renders the OpenAI client's
// conversations with (the prompt's ids are the training renderer's), from the checkpoint and from
// its GGUF export, and both exports carry (tokenizer_config.json chat_template, GGUF
// tokenizer.chat_template); the shards
// are the same bytes on every start, so a resumed run equals a straight one; and the same run on 2
// data-parallel ranks under mpirun (rank 0 writes the shards, the others wait for them) trains the
// same data.
#include <sys/wait.h>

#include <filesystem>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/ckpt/gguf.hpp"
#include "smelt/dataset/chat.hpp"
#include "smelt/dataset/chat_shard.hpp"
#include "serve/serve_process.hpp"
#include "test_references.hpp"
#include "tokenizer/tok_test_util.hpp"
#include "train_test_util.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace smelt;

namespace {

// The English test text's sentences, in order.
std::vector<std::string> sentences() {
  std::string text = test::read_file(std::string(SMELT_TEST_DATA) + "/tokenizer/english.txt");
  for (char& c : text)
    if (c == '\n') c = ' ';
  std::vector<std::string> out;
  size_t at = 0;
  for (size_t i = 0; i < text.size(); i++)
    if ((text[i] == '.' || text[i] == '?' || text[i] == '!') && (i + 1 == text.size() || text[i + 1] == ' ')) {
      std::string s = text.substr(at, i + 1 - at);
      s.erase(0, s.find_first_not_of(' '));
      if (s.size() > 12 && s.size() < 300) out.push_back(s);
      at = i + 1;
    }
  return out;
}

std::string record(const std::string& q, const std::string& a, bool system) {
  json m = json::array();
  if (system) m.push_back({{"role", "system"}, {"content", "You continue texts."}});
  m.push_back({{"role", "user"}, {"content", "What comes after: " + q}});
  m.push_back({{"role", "assistant"}, {"content", a}});
  return json{{"messages", m}}.dump() + "\n";
}

class TrainerChatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::fresh_test_dir("smelt_trainer_chat");
    const auto s = sentences();
    ASSERT_GT(s.size(), 40u);
    std::string train, held;
    for (size_t i = 0; i + 1 < s.size(); i++) (i % 8 == 5 ? held : train) += record(s[i], s[i + 1], i % 4 == 0);
    train.insert(train.find('\n', train.size() / 2) + 1, "{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}\n");
    train += "{\"messages\": [{\"role\": \"user\", \"content\": \"\"}, {\"role\": \"assistant\", \"content\": \"a\"}]}\n";
    test::write_file((dir_ / "train.jsonl").string(), train);
    test::write_file((dir_ / "held.jsonl").string(), held);
    bad_line_ = 0;
    std::istringstream in(train);
    std::string line;
    for (int n = 1; std::getline(in, line); n++)
      if (line.find("\"tool\"") != std::string::npos) bad_line_ = n;
    test::write_file((dir_ / "run.toml").string(), fmt::format(R"(
[model]
vocab_size = 50304
d_model = 64
n_layers = 2
n_heads = 4
n_kv_heads = 2
ffn_hidden = 176
max_seq_len = 128
[data]
format = "chat"
sources = "faq={}"
seq_len = 128
batch_size = 4
[train]
tokenizer = "{}"
steps = 40
threads = 1
peak_gflops = 50
[optim]
lr = 3e-3
warmup_steps = 4
[eval]
data = "held={}"
every = 20
tokens = 100000
[ckpt]
save_every = 0
)", (dir_ / "train.jsonl").string(), test::fixtures() + "/gpt2.json", (dir_ / "held.jsonl").string()));
  }
  void TearDown() override { fs::remove_all(dir_); }
  int train(const std::string& run, const std::string& extra = "", int ranks = 0) {
    std::string cmd = fmt::format("{} train --config {} --run-dir {} {} > {}.log 2>&1", SMELT_BINARY,
                                  (dir_ / "run.toml").string(), (dir_ / run).string(), extra, (dir_ / run).string());
    if (ranks > 0) cmd = fmt::format("{} -np {} {}", test::kMpirun, ranks, cmd);
    const int st = std::system(cmd.c_str());
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }
  std::string log(const std::string& run) { return test::read_file((dir_ / (run + ".log")).string()); }
  // Serves with `args`, asks the held-out questions through the OpenAI client, checks the prompts.
  void check_served(const std::string& args, const std::string& model, const std::string& logged) {
    SCOPED_TRACE(args);
    const fs::path log = dir_ / ("serve-" + model + ".log");
    test::ServeProcess server(args + " --slots 2 --model-name " + model, log);
    ASSERT_GT(server.port(), 0) << test::read_file(log.string());
    const std::string cmd = fmt::format("cd {} && node tests/reference/chat_ask.mjs http://127.0.0.1:{} {} {} 8 > {} 2>&1",
                                        SMELT_SOURCE_DIR, server.port(), model, (dir_ / "held.jsonl").string(),
                                        (dir_ / "answers.json").string());
    const bool ran = std::system(cmd.c_str()) == 0;
    SMELT_REQUIRE_REFERENCE(ran, "node with the openai package (tests/reference: npm ci)");
    const json answers = json::parse(test::read_file((dir_ / "answers.json").string()));
    Tokenizer tok;
    ASSERT_TRUE(Tokenizer::load(test::fixtures() + "/gpt2.json", tok).is_ok());
    ChatTemplateSource src;
    ASSERT_TRUE(chat_template_resolve("", nullptr, tok, src).is_ok());
    ChatRenderer render;
    ASSERT_TRUE(chat_jinja_renderer(src, render).is_ok());
    std::istringstream held(test::read_file((dir_ / "held.jsonl").string()));
    std::string line;
    size_t i = 0;
    for (; std::getline(held, line); i++) {
      ASSERT_LT(i, answers.size());
      std::vector<ChatTurn> turns;
      std::string reason, why;
      ASSERT_TRUE(chat_parse_record(line, turns, reason, why)) << why;
      turns.pop_back();  // the reply: what the server is asked for
      std::string prompt;
      ASSERT_TRUE(render(turns, true, prompt).is_ok());
      std::vector<uint32_t> ids;
      tok.encode(prompt, ids, true);
      EXPECT_EQ(answers[i]["prompt_tokens"], ids.size()) << prompt;
      EXPECT_TRUE(answers[i]["finish_reason"] == "stop" || answers[i]["finish_reason"] == "length");
    }
    EXPECT_EQ(i, answers.size());
    EXPECT_NE(test::read_file(log.string()).find(logged), std::string::npos) << test::read_file(log.string());
  }
  fs::path dir_;
  int bad_line_ = 0;
};

}  // namespace

TEST_F(TrainerChatTest, FineTuningLowersTheHeldOutChatLossAndRecordsTheTemplate) {
  ASSERT_EQ(train("run"), 0) << log("run");
  const json sum = json::parse(test::read_file((dir_ / "run" / "summary.json").string()));
  const json& faq = sum["chat_data"]["data"]["faq"];
  EXPECT_EQ(faq["skipped"], 2);
  EXPECT_EQ(faq["skipped_by_reason"]["unknown role"], 1);
  EXPECT_EQ(faq["skipped_by_reason"]["empty content"], 1);
  EXPECT_EQ(faq["skipped_examples"][0], fmt::format("{} line {}: message 0: role 'tool' (expected system, user or "
                                                    "assistant)", (dir_ / "train.jsonl").string(), bad_line_));
  EXPECT_GT(faq["conversations"].get<int>(), 30);

  // The evaluation scores exactly the held-out replies' tokens (end-of-turn marker included).
  const json held = json::parse(test::read_file((dir_ / "run" / "chat" / "eval-0.stats.json").string()));
  double first = -1, last = -1;
  for (const json& m : test::read_metrics(dir_ / "run"))
    if (m.contains("eval_loss")) {
      EXPECT_EQ(m["eval_tokens"], held["trained_tokens"]);
      (first < 0 ? first : last) = m["eval_loss"].get<double>();
    }
  ASSERT_GT(first, 0);
  EXPECT_LT(last, first - 1.0) << "held-out chat loss " << first << " -> " << last;

  // The template the run trained with is in the checkpoint, for `smelt serve`.
  CkptManifest m;
  ASSERT_TRUE(ckpt_read_manifest(ckpt_step_dir((dir_ / "run").string(), 40), m).is_ok());
  EXPECT_EQ(m.state["chat"]["template"], kSmeltChatTemplate);
  EXPECT_EQ(m.state["chat"]["eos_token"], "<|endoftext|>");

  // The exports carry the template: tokenizer_config.json's chat_template (transformers) and the
  // GGUF file's tokenizer.chat_template (llama.cpp), with the reply's end as EOS.
  const std::string step = ckpt_step_dir((dir_ / "run").string(), 40);
  ASSERT_EQ(std::system(fmt::format("{} export --format hf --checkpoint {} --output {} > {} 2>&1", SMELT_BINARY, step,
                                    (dir_ / "hf").string(), (dir_ / "export.log").string()).c_str()), 0)
      << test::read_file((dir_ / "export.log").string());
  const json tc = json::parse(test::read_file((dir_ / "hf" / "tokenizer_config.json").string()));
  EXPECT_EQ(tc["chat_template"], kSmeltChatTemplate);
  EXPECT_EQ(tc["eos_token"], "<|endoftext|>");
  ASSERT_EQ(std::system(fmt::format("{} export --format gguf --checkpoint {} --output {} > {} 2>&1", SMELT_BINARY, step,
                                    (dir_ / "m.gguf").string(), (dir_ / "export.log").string()).c_str()), 0)
      << test::read_file((dir_ / "export.log").string());
  GgufReader g;
  ASSERT_TRUE(g.open((dir_ / "m.gguf").string()).is_ok());
  std::string gguf_template;
  ASSERT_TRUE(g.get_string("tokenizer.chat_template", gguf_template).is_ok());
  EXPECT_EQ(gguf_template, kSmeltChatTemplate);

  // `smelt serve` renders each conversation with that template, from the checkpoint and from the
  // GGUF file: the official OpenAI client's requests are the held-out conversations up to their
  // reply, and each prompt's ids are the training renderer's with the generation prompt.
  check_served("--checkpoint " + (dir_ / "run").string(), "run", "the template the model was fine-tuned with");
  check_served("--gguf " + (dir_ / "m.gguf").string(), "m", "the file's tokenizer.chat_template");

  // A second start renders the same shards, byte for byte.
  ASSERT_EQ(train("again", "--set train.steps=1"), 0) << log("again");
  for (const char* f : {"data-0.bin", "data-0.idx", "eval-0.bin", "data-0.stats.json"})
    EXPECT_EQ(test::read_file((dir_ / "run" / "chat" / f).string()), test::read_file((dir_ / "again" / "chat" / f).string()))
        << f;
}

TEST_F(TrainerChatTest, TwoDataParallelRanksShareRankZerosShards) {
  ASSERT_EQ(std::system("command -v mpirun > /dev/null 2>&1"), 0) << "mpirun: scripts/install-deps installs openmpi-bin";
  ASSERT_EQ(train("dp2", "--set train.steps=6 --set eval.every=0", 2), 0) << log("dp2");
  ASSERT_EQ(train("dp1", "--set train.steps=6 --set eval.every=0"), 0) << log("dp1");
  // The same rows in the same steps: the target tokens of each step agree, the step-0 evaluation (same
  // weights) too, and the last one to what the reduction order leaves (Adam amplifies its last bits).
  const auto a = test::read_metrics(dir_ / "dp2"), b = test::read_metrics(dir_ / "dp1");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); i++) {
    if (a[i].contains("tokens")) {
      EXPECT_EQ(a[i]["tokens"], b[i]["tokens"]) << i;
    }
    if (a[i].contains("eval_loss")) {
      EXPECT_NEAR(a[i]["eval_loss"].get<double>(), b[i]["eval_loss"].get<double>(), a[i]["step"] == 0 ? 1e-6 : 1e-2);
    }
  }
  EXPECT_EQ(test::read_file((dir_ / "dp2" / "chat" / "data-0.bin").string()),
            test::read_file((dir_ / "dp1" / "chat" / "data-0.bin").string()));
}

TEST_F(TrainerChatTest, AResumedRunEqualsAStraightOne) {
  // 12 steps with checkpoints at 6 and 12; a copy without step 12's checkpoint and without its chat
  // shards resumes from step 6: the shards are rebuilt and the loader takes up its position in
  // them, so every step's loss is the same.
  ASSERT_EQ(train("straight", "--set eval.every=0 --set ckpt.save_every=6 --set ckpt.keep_last=5 --set train.steps=12"), 0)
      << log("straight");
  fs::copy(dir_ / "straight", dir_ / "cut", fs::copy_options::recursive);
  fs::remove_all(dir_ / "cut" / "checkpoints" / "step_00000012");
  fs::remove_all(dir_ / "cut" / "chat");
  ASSERT_EQ(train("cut", "--set eval.every=0 --set ckpt.save_every=6 --set ckpt.keep_last=5 --set train.steps=12 --resume"), 0)
      << log("cut");
  EXPECT_NE(log("cut").find("resuming from " + (dir_ / "cut" / "checkpoints" / "step_00000006").string()), std::string::npos)
      << log("cut");
  std::vector<double> a, b;
  for (const json& m : test::read_metrics(dir_ / "straight"))
    if (m.contains("loss")) a.push_back(m["loss"].get<double>());
  for (const json& m : test::read_metrics(dir_ / "cut"))
    if (m.contains("loss")) b.push_back(m["loss"].get<double>());
  ASSERT_EQ(a.size(), 12u);
  EXPECT_EQ(a, b);
}

// Fine-tuning an open-weights model: --init-from a Hugging Face folder (tests/reference/hf_family.py's
// Qwen2.5 shape) renders the conversations with the folder's own tokenizer_config.json template and
// its eos_token (the shard's first conversation checked token by token), which the checkpoint then
// records for `smelt serve`.
TEST_F(TrainerChatTest, AnHfModelIsFineTunedWithItsOwnTemplate) {
  const bool torch = std::system("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1") == 0;
  SMELT_REQUIRE_REFERENCE(torch, "python3-torch for /usr/bin/python3 (tests/reference/hf_family.py): scripts/install-deps");
  const fs::path hf = dir_ / "hf-qwen";
  ASSERT_EQ(std::system(fmt::format("/usr/bin/python3 {}/tests/reference/hf_family.py write {} --family qwen2.5 --dtype fp32 "
                                    "--layers 2 --seed 5 --tokenizer {} > {} 2>&1", SMELT_SOURCE_DIR, hf.string(),
                                    test::fixtures() + "/qwen2.json", (dir_ / "hf.log").string()).c_str()), 0)
      << test::read_file((dir_ / "hf.log").string());
  test::write_file((dir_ / "sft.toml").string(), fmt::format(R"(
[data]
format = "chat"
sources = "faq={}"
seq_len = 128
batch_size = 2
[train]
init_from = "{}"
steps = 3
threads = 1
peak_gflops = 50
[eval]
data = "held={}"
tokens = 100000
[ckpt]
save_every = 0
)", (dir_ / "train.jsonl").string(), hf.string(), (dir_ / "held.jsonl").string()));
  const std::string cmd = fmt::format("{} train --config {} --run-dir {} > {} 2>&1", SMELT_BINARY, (dir_ / "sft.toml").string(),
                                      (dir_ / "qwen").string(), (dir_ / "qwen.log").string());
  ASSERT_EQ(std::system(cmd.c_str()), 0) << log("qwen");
  EXPECT_NE(log("qwen").find("chat data: rendered with " + (hf / "tokenizer_config.json").string()), std::string::npos)
      << log("qwen");
  const json tc = json::parse(test::read_file((hf / "tokenizer_config.json").string()));
  CkptManifest m;
  ASSERT_TRUE(ckpt_read_manifest(ckpt_step_dir((dir_ / "qwen").string(), 3), m).is_ok());
  EXPECT_EQ(m.state["chat"]["template"], tc["chat_template"]);
  EXPECT_EQ(m.state["chat"]["eos_token"], tc["eos_token"]);
  // The shard's first conversation is the folder's template and tokenizer at work, token by token:
  // Qwen2.5's rendering (its default system prompt when the record has none), replies flagged.
  Tokenizer tok;
  ASSERT_TRUE(Tokenizer::load((hf / "tokenizer.json").string(), tok).is_ok());
  ChatTemplateSource src;
  ASSERT_TRUE(chat_template_resolve((hf / "tokenizer_config.json").string(), nullptr, tok, src).is_ok());
  ChatRenderer render;
  ASSERT_TRUE(chat_jinja_renderer(src, render).is_ok());
  std::istringstream in(test::read_file((dir_ / "train.jsonl").string()));
  std::string line, reason, why;
  ASSERT_TRUE(std::getline(in, line));
  std::vector<ChatTurn> turns;
  ASSERT_TRUE(chat_parse_record(line, turns, reason, why)) << why;
  ChatRendered r;
  ASSERT_TRUE(chat_render(render, turns, r).is_ok());
  EXPECT_NE(r.text.find("<|im_start|>assistant\n" + turns.back().content + "<|im_end|>"), std::string::npos) << r.text;
  std::vector<uint32_t> ids;
  std::vector<uint8_t> mask;
  chat_tokenize(tok, r, ids, mask);
  for (size_t k = 0; k < ids.size(); k++)
    if (mask[k]) ids[k] |= kChatTrainedBit;
  IndexedDataset shard;
  ASSERT_TRUE(shard.open((dir_ / "qwen" / "chat" / "data-0").string()).is_ok());
  EXPECT_EQ(shard.sequence(0).to_vector(), ids);
}
