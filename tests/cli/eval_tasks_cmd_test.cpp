// `smelt eval --tasks` end to end (src/smelt/cli/eval_tasks_cmd.cpp, src/smelt/eval/): a tiny model
// trained by `smelt train` on English and Chinese text, cloze tasks made from that text (the right
// ending is known by construction), scored above chance where the untrained model sits near it;
// every log-likelihood equal to an independent float64 forward of the Hugging Face export in
// PyTorch (tests/reference/eval_check.py); few-shot prompts deterministic; acc_norm by UTF-8 bytes
// for Chinese; generation equal to `smelt generate`'s greedy text.
#include <sys/wait.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/tiny_checkpoint.hpp"
#include "serve/raw_http.hpp"
#include "serve/serve_process.hpp"
#include "shared_fixture.hpp"
#include "smelt/dataset/indexed.hpp"
#include "smelt/tokenizer/tokenizer.hpp"
#include "test_files.hpp"
#include "test_references.hpp"

using namespace smelt;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const std::string kEnSrc = std::string(SMELT_TEST_DATA) + "/tokenizer_train/en_coding_style.rst";
const std::string kZhSrc = std::string(SMELT_TEST_DATA) + "/tokenizer_train/zh_coding_style.rst";

// The first ~9 KB of a file, whole lines: small enough for the tiny model to learn by heart in a
// few hundred steps, so the cloze task made of the same lines has known answers.
std::string head_lines(const std::string& path) {
  std::string s = test::read_file(path).substr(0, 9000);
  return s.substr(0, s.rfind('\n') + 1);
}

std::vector<json> read_jsonl(const std::string& path) {
  std::vector<json> out;
  std::istringstream in(test::read_file(path));
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

const json& task_of(const json& result, const std::string& name) {
  for (const auto& t : result["tasks"])
    if (t["task"] == name) return t;
  static const json none;
  ADD_FAILURE() << "no task " << name << " in " << result.dump();
  return none;
}

class EvalTasksCmdTest : public ::testing::Test {
 protected:
  // The trained model, its tokenizer, text and tasks: made once for all of this file's test
  // processes (tests/shared_fixture.hpp); each process writes its own outputs in dir_.
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / fmt::format("smelt_eval_tasks_{}", ::getpid()));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    fixture_ = new fs::path(test::shared_fixture("eval-tasks-model", {SMELT_BINARY}, make_fixture));
    ASSERT_FALSE(fixture_->empty()) << "the shared fixture could not be made";
  }
  static bool make_fixture(const fs::path& d) {
    fs::create_directories(d / "tasks");
    const std::string tok = (d / "tok.json").string();
    if (!test::train_tiny_tokenizer(tok, 512)) return fail("tokenizer");
    test::write_file((d / "en.txt").string(), head_lines(kEnSrc));
    test::write_file((d / "zh.txt").string(), head_lines(kZhSrc));
    if (!write_shard(d, tok)) return false;
    test::CmdResult r;
    for (const auto& [src, name] : {std::pair{"en.txt", "cloze-en"}, std::pair{"zh.txt", "cloze-zh"}}) {
      r = test::run_smelt(fmt::format("eval --make-cloze {} --task-out {} --items 80", (d / src).string(),
                                      (d / "tasks" / name).string()), d);
      if (r.rc != 0) return fail(r.err);
    }
    test::write_file((d / "run.toml").string(), fmt::format(R"([model]
vocab_size = 512
d_model = 64
n_layers = 2
n_heads = 4
n_kv_heads = 2
ffn_hidden = 176
max_seq_len = 128
[data]
seq_len = 64
batch_size = 8
[train]
steps = 800
threads = 2
tokenizer = "{}"
[optim]
lr = 3e-3
warmup_steps = 20
[eval]
every = 400
tasks = ["{}"]
task_limit = 0
)", tok, (d / "tasks").string()));
    r = test::run_smelt(fmt::format("train --config {} --data {} --run-dir {} --log-level warn",
                                    (d / "run.toml").string(), (d / "train").string(), (d / "run").string()), d);
    if (r.rc != 0) return fail(r.err);
    // The same shape untrained (init_std 0.02), saved with the same tokenizer.
    ModelConfig c;
    c.vocab_size = 512, c.d_model = 64, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.ffn_hidden = 176;
    c.max_seq_len = 128;
    Model m;
    if (!m.init(c, 1, 64, 1, 11).is_ok()) return fail("model init");
    if (!test::save_tiny_checkpoint(m, (d / "untrained").string(), 0, tok).is_ok())
      return fail("untrained checkpoint");
    return true;
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    delete fixture_;
  }
  // Every line of 8 bytes or more of both files a document, tokenized with the test's tokenizer.
  static bool write_shard(const fs::path& d, const std::string& tok_path) {
    Tokenizer tok;
    IndexedWriter w;
    if (!Tokenizer::load(tok_path, tok).is_ok() || !w.open((d / "train").string(), IndexedDType::kUInt16).is_ok())
      return fail("tokenizer or shard");
    for (const char* f : {"en.txt", "zh.txt"}) {
      std::istringstream in(test::read_file((d / f).string()));
      std::string line;
      while (std::getline(in, line)) {
        if (line.size() < 8) continue;
        std::vector<uint32_t> ids;
        tok.encode(line, ids, false);
        if (!w.add_document(ids).is_ok()) return fail("shard document");
      }
    }
    return w.finish().is_ok() || fail("shard finish");
  }
  static bool fail(const std::string& why) {
    ADD_FAILURE() << why;
    return false;
  }
  // `smelt eval --tasks ARGS` on a model; the JSON it prints.
  static json eval(const std::string& model, const std::string& args) {
    test::CmdResult r = test::run_smelt(fmt::format("eval --checkpoint {} {} --threads 2", model, args), *dir_);
    EXPECT_EQ(r.rc, 0) << r.err;
    return r.rc == 0 ? json::parse(r.out) : json();
  }
  static std::string run() { return (*fixture_ / "run").string(); }
  static std::string untrained_dir() { return (*fixture_ / "untrained").string(); }
  static std::string en() { return (*fixture_ / "en.txt").string(); }
  static std::string zh() { return (*fixture_ / "zh.txt").string(); }
  // Items of a task file.
  static size_t lines_of(const std::string& name) { return read_jsonl(tasks() + "/" + name + ".jsonl").size(); }
  static std::string tasks() { return (*fixture_ / "tasks").string(); }
  static fs::path* dir_;      // this process's outputs
  static fs::path* fixture_;  // shared, read only
};
fs::path* EvalTasksCmdTest::dir_ = nullptr;
fs::path* EvalTasksCmdTest::fixture_ = nullptr;

TEST_F(EvalTasksCmdTest, ATrainedModelScoresAboveChanceAndAnUntrainedOneNearIt) {
  const json trained = eval(run(), "--tasks " + tasks());
  const json untrained = eval(untrained_dir(), "--tasks " + tasks());
  for (const char* name : {"cloze-en", "cloze-zh"}) {
    const json& t = task_of(trained, name);
    const json& u = task_of(untrained, name);
    ASSERT_GE(t["items"].get<int>(), 60) << t.dump();
    EXPECT_EQ(t["items"].get<size_t>() + t["skipped"].get<size_t>(), lines_of(name));
    EXPECT_EQ(t["metric"], "acc_norm");
    EXPECT_DOUBLE_EQ(t["chance"].get<double>(), 0.25);
    const double acc = t["metrics"]["acc_norm"], se = t["metrics"]["acc_norm_stderr"];
    const double n = t["items"].get<double>();
    EXPECT_NEAR(se, std::sqrt(acc * (1 - acc) / (n - 1)), 1e-9);  // the sample standard error of a 0/1 mean
    EXPECT_GT(acc, 0.25 + 4 * std::max(se, 0.03)) << name << ": " << t.dump();
    const double uacc = u["metrics"]["acc_norm"];
    EXPECT_NEAR(uacc, 0.25, 0.2) << name << ": " << u.dump();  // 80 items: a binomial sd of 0.048
    EXPECT_GT(acc, uacc + 0.2) << name;
  }
}

TEST_F(EvalTasksCmdTest, TrainingScoresTheTasksAtEachEvaluationAndTheFinalScoreIsTheCheckpoints) {
  const std::vector<json> lines = read_jsonl((*fixture_ / "run" / "metrics.jsonl").string());
  std::vector<json> evals;
  for (const auto& l : lines)
    if (l.contains("tasks")) evals.push_back(l);
  ASSERT_EQ(evals.size(), 3u);  // steps 0, 400, 800
  EXPECT_EQ(evals.front()["step"], 0);
  EXPECT_EQ(evals.back()["step"], 800);
  for (const char* name : {"cloze-en", "cloze-zh"}) {
    const json& first = evals.front()["tasks"][name];
    const json& last = evals.back()["tasks"][name];
    EXPECT_EQ(last["metric"], "acc_norm");
    EXPECT_DOUBLE_EQ(last["chance"].get<double>(), 0.25);
    EXPECT_GE(last["items"].get<int>(), 60);
    EXPECT_GT(last["value"].get<double>(), first["value"].get<double>() + 0.15) << name;
    // The final evaluation's weights are the final checkpoint's: `smelt eval --tasks` agrees.
    const json res = eval(run(), "--tasks " + tasks() + "/" + std::string(name) + ".toml");
    const json& t = task_of(res, name);
    EXPECT_DOUBLE_EQ(t["value"].get<double>(), last["value"].get<double>()) << name;
    EXPECT_DOUBLE_EQ(t["metrics"]["acc_norm_stderr"].get<double>(), last["stderr"].get<double>()) << name;
  }
}

TEST_F(EvalTasksCmdTest, LogLikelihoodsEqualAFloat64ForwardOfTheHuggingFaceExportInPyTorch) {
  int rc = 0;
  test::run_command("/usr/bin/python3 -c 'import torch' 2> /dev/null", rc);
  SMELT_REQUIRE_REFERENCE(rc == 0, "python3-torch (apt)");
  const std::string samples = (*dir_ / "samples.jsonl").string(), hf = (*dir_ / "hf").string();
  eval(run(), fmt::format("--tasks {} --limit 12 --fewshot 1 --samples {}", tasks(), samples));
  test::CmdResult r = test::run_smelt(fmt::format("export --checkpoint {} --format hf --output {}", run(), hf), *dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string out = (*dir_ / "torch.json").string();
  const std::string cmd = fmt::format("/usr/bin/python3 {}/tests/reference/eval_check.py {} {} {} {}", SMELT_SOURCE_DIR,
                                      hf, samples, 512, out);
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const std::vector<json> recs = read_jsonl(samples);
  const json ref = json::parse(test::read_file(out));
  ASSERT_EQ(recs.size(), 24u);
  ASSERT_EQ(ref.size(), recs.size());
  size_t n = 0;
  for (size_t i = 0; i < recs.size(); i++) {
    const json& reqs = recs[i]["requests"];
    ASSERT_EQ(reqs.size(), ref[i].size());
    std::vector<double> lp;
    for (size_t j = 0; j < reqs.size(); j++, n++) {
      EXPECT_NEAR(reqs[j]["logprob"].get<double>(), ref[i][j].get<double>(), 1e-4) << "item " << i << " choice " << j;
      lp.push_back(ref[i][j]);
    }
    // The prediction follows from the reference's numbers too (ties aside).
    const size_t pred = (size_t)(std::max_element(lp.begin(), lp.end()) - lp.begin());
    EXPECT_EQ(recs[i]["pred"].get<size_t>(), pred) << "item " << i;
  }
  EXPECT_EQ(n, 24u * 4);
}

TEST_F(EvalTasksCmdTest, AccNormDividesByUtf8BytesAndChineseCountsTheSame) {
  const std::string samples = (*dir_ / "zh.jsonl").string();
  eval(run(), fmt::format("--tasks {}/cloze-zh.toml --samples {}", tasks(), samples));
  std::vector<json> items = read_jsonl(tasks() + "/cloze-zh.jsonl");
  const std::vector<json> recs = read_jsonl(samples);
  ASSERT_GE(recs.size(), 60u);
  int differ = 0;
  for (size_t i = 0; i < recs.size(); i++) {
    std::vector<double> norm;
    const json& item = items[recs[i]["index"].get<size_t>()];
    for (size_t j = 0; j < item["choices"].size(); j++) {
      const std::string choice = item["choices"][j];
      norm.push_back(recs[i]["requests"][j]["logprob"].get<double>() / (double)choice.size());  // bytes, not characters
    }
    const size_t want = (size_t)(std::max_element(norm.begin(), norm.end()) - norm.begin());
    EXPECT_EQ(recs[i]["pred_norm"].get<size_t>(), want) << "item " << i;
    EXPECT_EQ(recs[i]["gold"], item["gold"]);
    differ += recs[i]["pred_norm"] != recs[i]["pred"];
  }
  EXPECT_GT(differ, 0) << "length normalisation changed no prediction: the test cannot tell acc_norm from acc";
}

TEST_F(EvalTasksCmdTest, FewShotPromptsAreDeterministicAndDoNotDependOnTheLimit) {
  auto contexts = [&](const std::string& args) {
    const std::string samples = (*dir_ / "fs.jsonl").string();
    eval(run(), fmt::format("--tasks {}/cloze-en.toml --samples {} {}", tasks(), samples, args));
    std::vector<json> ctx;
    for (const auto& r : read_jsonl(samples)) ctx.push_back(r["context_ids"]);
    return ctx;
  };
  const auto a = contexts("--fewshot 3 --seed 7 --limit 10"), b = contexts("--fewshot 3 --seed 7 --limit 10");
  const auto c = contexts("--fewshot 3 --seed 8 --limit 10"), d = contexts("--fewshot 3 --seed 7 --limit 4");
  ASSERT_EQ(a.size(), 10u);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  ASSERT_EQ(d.size(), 4u);
  for (size_t i = 0; i < d.size(); i++) EXPECT_EQ(d[i], a[i]) << "item " << i;
  EXPECT_GT(a[0].size(), contexts("--seed 7 --limit 1 --fewshot 0")[0].size() + 20);  // the examples are in the prompt
}

TEST_F(EvalTasksCmdTest, GenerationEqualsSmeltGenerateAndPerplexityFollowsItsDefinition) {
  // A generate task and a documents task from the training text.
  std::istringstream in(test::read_file(en()));
  std::string line, gen, docs;
  int n = 0;
  while (std::getline(in, line) && n < 6)
    if (line.size() > 40) {
      const std::string prompt = line.substr(0, 20);
      gen += json{{"context", prompt}, {"answer", line.substr(20)}, {"until", {"\n"}}}.dump() + "\n";
      docs += json{{"text", line}}.dump() + "\n";
      n++;
    }
  const fs::path d = *dir_ / "more";
  fs::create_directories(d);
  test::write_file((d / "gen.toml").string(), "[task]\nkind = \"generate\"\nmax_gen_tokens = 12\ntarget_delimiter = \"\"\n");
  test::write_file((d / "gen.jsonl").string(), gen);
  test::write_file((d / "docs.jsonl").string(), docs);
  const std::string samples = (d / "s.jsonl").string();
  const json res = eval(run(), fmt::format("--tasks {} --samples {}", d.string(), samples));
  const std::vector<json> recs = read_jsonl(samples);
  ASSERT_EQ(recs.size(), 12u);
  int hits = 0;
  double nats = 0, bytes = 0, words = 0;
  for (const auto& r : recs) {
    if (r["task"] == "gen") {
      // smelt generate, greedy, from the same tokens (the end-of-document token, then the prompt).
      const std::vector<json> items = read_jsonl((d / "gen.jsonl").string());
      std::string prompt = items[r["index"].get<size_t>()]["context"], quoted;
      for (char ch : prompt) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
      test::CmdResult g = test::run_smelt(fmt::format("generate --checkpoint {} --prompt '<|endoftext|>{}' --temperature 0 "
                                                      "--max-new-tokens 12 --threads 2 --json", run(), quoted), *dir_);
      ASSERT_EQ(g.rc, 0) << g.err;
      std::string text = json::parse(g.out)["text"];
      text = text.substr(0, text.find('\n'));
      EXPECT_EQ(r["generation"].get<std::string>(), text);
      hits += r["exact_match"].get<bool>();
    } else {
      nats -= r["loglikelihood"].get<double>();
      bytes += r["bytes"].get<double>();
      words += r["words"].get<double>();
    }
  }
  EXPECT_DOUBLE_EQ(task_of(res, "gen")["metrics"]["exact_match"].get<double>(), hits / 6.0);
  const json& m = task_of(res, "docs")["metrics"];
  EXPECT_NEAR(m["bits_per_byte"].get<double>(), nats / bytes / std::log(2.0), 1e-9);
  EXPECT_NEAR(m["word_perplexity"].get<double>(), std::exp(nats / words), 1e-6 * std::exp(nats / words));
  EXPECT_GT(m["bits_per_byte_stderr"].get<double>(), 0);
}

TEST_F(EvalTasksCmdTest, TheServersEchoedLogprobsAreSmeltEvalsLogLikelihoods) {
  // smelt eval's records, then the same token ids sent as lm-evaluation-harness's local-completions
  // sends them: one request per item, a prompt per choice (context + continuation), echo,
  // logprobs 1, max_tokens 1; read back as the harness reads them (token_logprobs[ctxlen:-1]).
  const std::string samples = (*dir_ / "srv.jsonl").string();
  eval(run(), fmt::format("--tasks {}/cloze-en.toml {}/cloze-zh.toml --limit 6 --fewshot 0 --samples {}", tasks(),
                          tasks(), samples));
  const std::vector<json> recs = read_jsonl(samples);
  ASSERT_EQ(recs.size(), 12u);
  test::ServeProcess srv(fmt::format("--checkpoint {} --slots 4 --threads 2", run()), *dir_ / "serve.log");
  ASSERT_GT(srv.port(), 0) << test::read_file((*dir_ / "serve.log").string());
  for (const auto& rec : recs) {
    const std::vector<int32_t> ctx = rec["context_ids"];
    json prompts = json::array();
    for (const auto& q : rec["requests"]) {
      std::vector<int32_t> ids = ctx;
      for (int32_t t : q["continuation_ids"]) ids.push_back(t);
      prompts.push_back(ids);
    }
    const json body = {{"prompt", prompts}, {"temperature", 0}, {"max_tokens", 1}, {"logprobs", 1},
                       {"seed", 1234}, {"echo", true}};
    test::Reply r = test::http(srv.port(), "POST", "/v1/completions", body.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    const json j = r.js();
    ASSERT_EQ(j["choices"].size(), rec["requests"].size());
    for (size_t c = 0; c < j["choices"].size(); c++) {
      const json& ch = j["choices"][c];
      ASSERT_EQ(ch["index"], c);
      const json& lp = ch["logprobs"]["token_logprobs"];
      ASSERT_TRUE(lp[0].is_null());
      ASSERT_EQ(lp.size(), prompts[c].size() + 1) << ch.dump();
      double sum = 0;
      for (size_t k = ctx.size(); k + 1 < lp.size(); k++) sum += lp[k].get<double>();
      EXPECT_NEAR(sum, rec["requests"][c]["logprob"].get<double>(), 1e-4)
          << rec["task"] << " item " << rec["index"] << " choice " << c;
    }
  }
  EXPECT_EQ(srv.stop(), 0);
}

TEST_F(EvalTasksCmdTest, AGgufFileScoresAsItsCheckpoint) {
  // The f32 GGUF export (its own tokenizer) read back gives the checkpoint's log-likelihoods.
  const std::string gguf = (*dir_ / "m.gguf").string(), a = (*dir_ / "a.jsonl").string(), b = (*dir_ / "b.jsonl").string();
  test::CmdResult r = test::run_smelt(fmt::format("export --checkpoint {} --format gguf --dtype f32 --output {}", run(), gguf),
                                      *dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  eval(run(), fmt::format("--tasks {}/cloze-en.toml --limit 10 --samples {}", tasks(), a));
  r = test::run_smelt(fmt::format("eval --gguf {} --tasks {}/cloze-en.toml --limit 10 --samples {} --threads 2", gguf,
                                  tasks(), b), *dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["step"], nullptr);
  const std::vector<json> x = read_jsonl(a), y = read_jsonl(b);
  ASSERT_EQ(x.size(), 10u);
  ASSERT_EQ(y.size(), x.size());
  for (size_t i = 0; i < x.size(); i++) {
    EXPECT_EQ(x[i]["context_ids"], y[i]["context_ids"]) << "item " << i;  // the GGUF's tokenizer encodes alike
    for (size_t j = 0; j < x[i]["requests"].size(); j++)
      EXPECT_NEAR(x[i]["requests"][j]["logprob"].get<double>(), y[i]["requests"][j]["logprob"].get<double>(), 1e-4);
  }
}

TEST_F(EvalTasksCmdTest, AHarnessSamplesFileBecomesATaskThatScoresTheSameTexts) {
  // The cloze task's first items written as lm-evaluation-harness logs them (--log_samples), read
  // back by --from-harness: the same contexts and continuations, so the same log-likelihoods.
  const std::vector<json> items = read_jsonl(tasks() + "/cloze-en.jsonl");
  std::string lines;
  for (size_t i = 0; i < 10; i++) {
    json args = json::object();
    for (size_t j = 0; j < items[i]["choices"].size(); j++)
      args["gen_args_" + std::to_string(j)] = {{"arg_0", items[i]["context"]}, {"arg_1", items[i]["choices"][j]}};
    lines += json{{"doc_id", i}, {"target", items[i]["gold"]}, {"arguments", args}, {"resps", json::array()}}.dump() + "\n";
  }
  const fs::path d = *dir_ / "harness";
  fs::create_directories(d);
  test::write_file((d / "samples_cloze_x.jsonl").string(), lines);
  test::CmdResult r = test::run_smelt(fmt::format("eval --from-harness {} --task-out {}", (d / "samples_cloze_x.jsonl").string(),
                                                  (d / "tasks" / "from-harness").string()), *dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string a = (d / "a.jsonl").string(), b = (d / "b.jsonl").string();
  eval(run(), fmt::format("--tasks {}/cloze-en.toml --limit 10 --samples {}", tasks(), a));
  const json res = eval(run(), fmt::format("--tasks {} --samples {}", (d / "tasks").string(), b));
  EXPECT_EQ(task_of(res, "from-harness")["items"], 10);
  const std::vector<json> x = read_jsonl(a), y = read_jsonl(b);
  ASSERT_EQ(x.size(), 10u);
  ASSERT_EQ(y.size(), 10u);
  for (size_t i = 0; i < x.size(); i++) {
    EXPECT_EQ(x[i]["gold"], y[i]["gold"]);
    EXPECT_EQ(x[i]["context_ids"], y[i]["context_ids"]) << "item " << i;
    for (size_t j = 0; j < x[i]["requests"].size(); j++)
      EXPECT_EQ(x[i]["requests"][j]["continuation_ids"], y[i]["requests"][j]["continuation_ids"]) << "item " << i;
  }
}

TEST_F(EvalTasksCmdTest, ABadTaskFileFailsNamingTheFileAndLine) {
  const fs::path d = *dir_ / "bad";
  fs::create_directories(d);
  test::write_file((d / "t.jsonl").string(), "{\"context\":\"a\",\"choices\":[\"x\",\"y\"],\"gold\":0}\n"
                                             "{\"context\":\"a\",\"choices\":[\"x\",\"y\"],\"gold\":2}\n");
  test::CmdResult r = test::run_smelt(fmt::format("eval --checkpoint {} --tasks {}", run(), d.string()), *dir_);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("t.jsonl line 2: field \"gold\": 2 is outside the 2 choices"), std::string::npos) << r.err;
  r = test::run_smelt("eval --tasks " + d.string(), *dir_);
  EXPECT_EQ(r.rc, 2) << r.err;
}

}  // namespace
