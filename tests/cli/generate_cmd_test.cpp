// `smelt generate` as a user runs it: a random tiny model saved through ckpt_save (tokenizer copy
// inside), greedy decoding from the run directory and from the step directory prints exactly the
// continuation computed in-process by full recomputation through Model::forward, --json carries
// the same ids, a seed reproduces sampled text, --trace writes the request's timeline, and usage
// errors exit 2, failures 1.
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/tiny_checkpoint.hpp"
#include "obs/trace_validator.hpp"
#include "smelt/serve/sampling.hpp"
#include "smelt/serve/text_stream.hpp"
#include "smelt/tokenizer/tokenizer.hpp"

namespace fs = std::filesystem;
using namespace smelt;

namespace {

class GenerateCmd : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("smelt_generate_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    tok_path_ = (dir_ / "tokenizer.json").string();
    ASSERT_TRUE(test::train_tiny_tokenizer(tok_path_, 400));
    ASSERT_TRUE(Tokenizer::load(tok_path_, tok_));
    cfg_.vocab_size = 416;  // padded beyond the tokenizer's 400: ids >= 400 must never be sampled
    cfg_.d_model = 32;
    cfg_.n_layers = 2;
    cfg_.n_heads = 4;
    cfg_.n_kv_heads = 2;
    cfg_.ffn_hidden = 64;
    cfg_.max_seq_len = 64;
    cfg_.tie_embeddings = false;
    cfg_.init_std = 0.25;  // spread-out logits: greedy does not hinge on rounding
    ASSERT_TRUE(model_.init(cfg_, 1, cfg_.max_seq_len, 1, 77));
    run_ = (dir_ / "run").string();
    Status s = test::save_tiny_checkpoint(model_, run_, 10, tok_path_);
    ASSERT_TRUE(s) << s.message();
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Greedy continuation by full recomputation (the training forward over the whole sequence).
  std::vector<int32_t> greedy(const std::string& prompt, int n_new) {
    std::vector<uint32_t> p;
    tok_.encode(prompt, p);
    std::vector<int32_t> seq(p.begin(), p.end()), out;
    const int V = cfg_.vocab_size;
    for (int i = 0; i < n_new; i++) {
      Batch b;
      b.B = 1;
      b.T = (int)seq.size();
      b.inputs = seq;
      b.targets.assign(seq.size(), -1);
      float loss;
      EXPECT_TRUE(model_.forward(b, loss));
      std::vector<float> z(model_.acts().logits + (size_t)(b.T - 1) * V, model_.acts().logits + (size_t)b.T * V);
      for (int j = (int)tok_.vocab_size(); j < V; j++) z[j] = -1e30f;
      int32_t next = sampling_argmax(z.data(), V);
      out.push_back(next);
      if (next == (int32_t)*tok_.eod_id()) break;
      seq.push_back(next);
    }
    return out;
  }
  std::string text_of(const std::vector<int32_t>& ids) {
    TextStream ts(tok_);
    for (int32_t id : ids)
      if (id != (int32_t)*tok_.eod_id()) ts.push((uint32_t)id);
    ts.finish();
    return ts.text();
  }

  fs::path dir_;
  std::string tok_path_, run_;
  Tokenizer tok_;
  ModelConfig cfg_;
  Model model_;
};

TEST_F(GenerateCmd, GreedyPrintsTheInProcessContinuation) {
  const std::string prompt = "The kernel coding style is";
  std::vector<int32_t> want = greedy(prompt, 30);
  ASSERT_FALSE(want.empty());
  test::CmdResult r = test::run_smelt("generate --checkpoint " + run_ + " --prompt '" + prompt +
                                          "' --temperature 0 --max-new-tokens 30 --threads 2", dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, text_of(want) + "\n");
  EXPECT_NE(r.err.find("[generate]"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tokens/s"), std::string::npos) << r.err;

  // The step directory, --json, an explicit --tokenizer: the same ids.
  r = test::run_smelt("generate --checkpoint " + ckpt_step_dir(run_, 10) + " --prompt '" + prompt +
                          "' --temperature 0 --max-new-tokens 30 --json --threads 1 --tokenizer " + tok_path_, dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["ids"].get<std::vector<int32_t>>(), want);
  EXPECT_EQ(j["new_tokens"].get<int>(), (int)want.size());
  EXPECT_EQ(j["text"].get<std::string>(), text_of(want));
  EXPECT_EQ(j["stop"], want.back() == (int32_t)*tok_.eod_id() ? "eos" : "max_new_tokens");
  EXPECT_GT(j["tokens_per_second"].get<double>(), 0.0);
}

// --dtype bf16 / f16: the linear layers on a bf16 (an IEEE half) copy of the weights. Greedy
// decoding follows the fp32 continuation while the top-2 margins stay above the rounding; this
// trained model's first ten tokens do (measured: all 30 agree in both), and the run says which
// dtype it used.
TEST_F(GenerateCmd, Bf16AndF16FollowTheFp32Continuation) {
  const std::string prompt = "The kernel coding style is";
  std::vector<int32_t> want = greedy(prompt, 30);
  for (const std::string dtype : {"bf16", "f16"}) {
    test::CmdResult r = test::run_smelt("generate --checkpoint " + run_ + " --prompt '" + prompt +
                                            "' --temperature 0 --max-new-tokens 30 --json --dtype " + dtype, dir_);
    ASSERT_EQ(r.rc, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["dtype"], dtype);
    auto got = j["ids"].get<std::vector<int32_t>>();
    ASSERT_GE(got.size(), 10u);
    ASSERT_GE(want.size(), 10u);
    EXPECT_EQ(std::vector<int32_t>(got.begin(), got.begin() + 10), std::vector<int32_t>(want.begin(), want.begin() + 10))
        << dtype;
    size_t same = 0;
    for (size_t i = 0; i < std::min(got.size(), want.size()) && got[i] == want[i]; i++) same++;
    std::printf("%s greedy agrees with fp32 on the first %zu of %zu tokens\n", dtype.c_str(), same, want.size());
  }
  EXPECT_EQ(test::run_smelt("generate --checkpoint " + run_ + " --prompt hi --dtype q4_0", dir_).rc, 2);
}

TEST_F(GenerateCmd, SeededSamplingIsReproducibleAndStaysInTheTokenizerVocabulary) {
  std::string args = "generate --checkpoint " + run_ + " --prompt 'static int' --temperature 1.5 "
                     "--top-k 50 --top-p 0.95 --max-new-tokens 40 --ignore-eos --json --threads 1 --seed ";
  test::CmdResult a = test::run_smelt(args + "5", dir_);
  ASSERT_EQ(a.rc, 0) << a.err;
  test::CmdResult b = test::run_smelt(args + "5", dir_);
  test::CmdResult c = test::run_smelt(args + "6", dir_);
  auto ja = nlohmann::json::parse(a.out), jb = nlohmann::json::parse(b.out), jc = nlohmann::json::parse(c.out);
  EXPECT_EQ(ja["ids"], jb["ids"]);
  EXPECT_NE(ja["ids"], jc["ids"]);
  EXPECT_EQ(ja["new_tokens"].get<int>(), 40);
  for (int id : ja["ids"]) EXPECT_LT(id, 400) << "sampled an id the tokenizer cannot decode";
}

// --trace FILE: one request's timeline passes the trace checker: the request, its prefill, one
// span per new token with its sampling and (but the last) its decoder step by layer; the text is
// the untraced run's.
TEST_F(GenerateCmd, TraceOfOneRequest) {
  const std::string args = "generate --checkpoint " + run_ + " --prompt 'static int' --temperature 0 "
                           "--max-new-tokens 12 --ignore-eos --json --threads 1";
  test::CmdResult plain = test::run_smelt(args, dir_);
  ASSERT_EQ(plain.rc, 0) << plain.err;
  const fs::path trace = dir_ / "req.json";
  test::CmdResult r = test::run_smelt(args + " --trace " + trace.string(), dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["ids"], nlohmann::json::parse(plain.out)["ids"]);
  std::ifstream in(trace);
  const nlohmann::json doc = nlohmann::json::parse(in);
  const test::TraceCheck c = test::trace_validate(doc);
  EXPECT_TRUE(c.errors.empty()) << c.first_errors();
  EXPECT_EQ(doc["otherData"]["command"], "generate");
  EXPECT_EQ(doc["otherData"]["new_tokens"], 12);
  std::map<std::string, int> count;
  std::set<int> layers;
  for (const auto& sp : c.spans) {
    count[sp.name]++;
    if (sp.name == "decoder.layer") layers.insert(sp.args["layer"].get<int>());
  }
  EXPECT_EQ(count["request"], 1);
  EXPECT_EQ(count["prefill"], 1);
  EXPECT_EQ(count["token"], 12);
  EXPECT_EQ(count["sample"], 12);
  EXPECT_EQ(count["decoder.step"], 1 + 11);  // the prompt in one step (it fits the decoder's rows), then 11
  EXPECT_EQ(count["decoder.layer"], 2 * count["decoder.step"]);
  EXPECT_EQ(layers, (std::set<int>{0, 1}));
}

TEST_F(GenerateCmd, UsageErrorsExitTwoFailuresExitOne) {
  EXPECT_EQ(test::run_smelt("generate --prompt hi", dir_).rc, 2);  // no --checkpoint
  EXPECT_EQ(test::run_smelt("generate --checkpoint " + run_ + " --prompt hi --top-p 0", dir_).rc, 2);
  EXPECT_EQ(test::run_smelt("generate --checkpoint " + run_ + " --prompt hi --temperature -1", dir_).rc, 2);
  test::CmdResult r = test::run_smelt("generate --checkpoint " + (dir_ / "nowhere").string() + " --prompt hi", dir_);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("nowhere"), std::string::npos) << r.err;
  fs::create_directories(dir_ / "empty_run");
  r = test::run_smelt("generate --checkpoint " + (dir_ / "empty_run").string() + " --prompt hi", dir_);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("no valid checkpoint"), std::string::npos) << r.err;
  // A prompt longer than max_seq_len (64) leaves no room.
  std::string long_prompt;
  for (int i = 0; i < 80; i++) long_prompt += "word" + std::to_string(i) + " ";
  r = test::run_smelt("generate --checkpoint " + run_ + " --prompt '" + long_prompt + "'", dir_);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("max_seq_len 64"), std::string::npos) << r.err;
}

}  // namespace
