// `[lora]` runs of the trainer on a trained base (--init-from a short full run of the byte model):
// the held-out loss falls while the base stays as it was; the checkpoint holds the adapters alone
// (PEFT's names) with their AdamW moments and the state names the base; an interrupted run resumed
// from its checkpoint (dropout on: the masks continue) equals the straight run step for step; and
// the adapters exported in PEFT's layout (checked by a spec-written reader) start another run; the
// refusals (no base, tensor parallel, a LoRA checkpoint where a whole model is needed); merged into
// the base for Hugging Face and GGUF (checked by a float64 merge over the spec-written reader) and
// served unmerged (`smelt serve --lora`) with the merged file's outputs; the run's own checkpoint
// served, generated from and scored (eval --tasks) as its base with its adapters.
#include <sys/wait.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "serve/raw_http.hpp"
#include "serve/serve_process.hpp"
#include "smelt/ckpt/peft.hpp"
#include "smelt/tokenizer/tokenizer.hpp"
#include "test_references.hpp"
#include "trainer_fixture.hpp"

namespace smelt::test {
namespace {

namespace fs = std::filesystem;

class LoraTrainTest : public TrainerTest {
 protected:
  // The base the adapters train on: a short full run, saved at its end.
  std::string base() {
    if (!base_.empty()) return base_;
    TrainConfig c = config(fmt::format("train.steps=30 train.run_dir=\"{}\" eval.data=\"\"", (dir_ / "base").string()));
    TrainSummary s;
    EXPECT_TRUE(train_run(c, s).is_ok());
    base_ = (dir_ / "base").string();
    return base_;
  }
  TrainConfig lora(const std::string& run, const std::string& extra = "") {
    return config(fmt::format("train.init_from=\"{}\" train.run_dir=\"{}\" lora.rank=4 lora.alpha=8 optim.lr=2e-2 "
                              "optim.warmup_steps=2 {}", base(), (dir_ / run).string(), extra));
  }
  std::string base_;
};

std::vector<char> file_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_F(LoraTrainTest, AdaptersLearnOnAFrozenBaseAndTheCheckpointHoldsThemAlone) {
  const std::string b = base();
  std::string base_ckpt;
  ASSERT_TRUE(ckpt_find_latest(b, base_ckpt).is_ok());
  std::map<std::string, std::vector<char>> before;
  for (const auto& e : fs::directory_iterator(base_ckpt)) before[e.path().filename().string()] = file_bytes(e.path());

  // (evaluated on the English the run trains on: 60 steps move it by ~0.07 nats, the base's 0.13 when it trains whole)
  TrainConfig c = lora("lora", fmt::format("train.steps=60 eval.every=30 eval.data=\"{}\"", (dir_ / "en").string()));
  TrainSummary s;
  ASSERT_TRUE(train_run(c, s).is_ok());
  ASSERT_GT(s.eval_first, 0);
  EXPECT_LT(s.eval_last, s.eval_first - 0.03) << "the adapters learn: held-out loss " << s.eval_first << " -> " << s.eval_last;
  // The base's checkpoint is untouched.
  for (const auto& [name, bytes] : before) EXPECT_EQ(file_bytes(fs::path(base_ckpt) / name), bytes) << name;
  // The run's checkpoint: the adapters (2 per target per layer) and their moments, nothing of the base.
  CkptManifest m;
  ASSERT_TRUE(ckpt_read_manifest(s.checkpoint, m).is_ok());
  int adapters = 0;
  for (const auto& t : m.tensors) {
    EXPECT_EQ(t.name.find("embed_tokens"), std::string::npos) << t.name;
    if (t.name.rfind("base_model.model.model.layers.", 0) == 0) adapters++;
    EXPECT_NE(t.name.find("lora_"), std::string::npos) << t.name << ": a base tensor in a LoRA checkpoint";
  }
  EXPECT_EQ(adapters, 2 * kLoraTargets * c.model.n_layers);
  ASSERT_TRUE(m.state.contains("lora"));
  EXPECT_EQ(m.state["lora"]["rank"], 4);
  EXPECT_EQ(m.state["lora"]["base"], base_ckpt) << "the base's checkpoint, as init_from resolved it";
  // Where a whole model is needed, the adapters alone are refused, naming the base.
  ModelConfig mc;
  std::vector<float> params;
  const Status st = ckpt_load_model(s.checkpoint, mc, params);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("LoRA"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(base_ckpt), std::string::npos) << st.message();
}

// A base held in bf16 trains the adapters exactly as a bf16 run on an fp32 base does (the same
// bf16 copy feeds the same GEMMs); one held in q8_0 trains them too (the loss falls), and its
// summary's memory plan holds the q8_0 base in place of the fp32 one. (The refusal of a bf16 base
// in an fp32 run: RefusesARunWithoutABaseAndTensorParallel.)
TEST_F(LoraTrainTest, CompactBasesTrainTheAdapters) {
  const std::string en = fmt::format("eval.data=\"{}\"", (dir_ / "en").string());
  TrainSummary f32, b16, q8;
  TrainConfig a = lora("f32", "train.steps=20 eval.every=20 train.precision=\"bf16\" " + en);
  ASSERT_TRUE(train_run(a, f32).is_ok());
  TrainConfig b = lora("b16", "train.steps=20 eval.every=20 train.precision=\"bf16\" lora.base_dtype=\"bf16\" " + en);
  ASSERT_TRUE(train_run(b, b16).is_ok());
  EXPECT_EQ(b16.eval_first, f32.eval_first);
  EXPECT_EQ(b16.eval_last, f32.eval_last);
  EXPECT_EQ(b16.last_loss, f32.last_loss);
  TrainConfig c = lora("q8", "train.steps=40 eval.every=40 lora.base_dtype=\"q8_0\" " + en);
  ASSERT_TRUE(train_run(c, q8).is_ok());
  EXPECT_LT(q8.eval_last, q8.eval_first - 0.02) << q8.eval_first << " -> " << q8.eval_last;
  const auto plan_f32 = f32.json["timing"]["memory_plan"], plan_q8 = q8.json["timing"]["memory_plan"];
  EXPECT_EQ(plan_q8["lora_base_dtype"], "q8_0");
  EXPECT_LT(plan_q8["param_bytes"].get<double>(), plan_f32["param_bytes"].get<double>()) << q8.json.dump();
}

TEST_F(LoraTrainTest, AResumedRunEqualsTheStraightRun) {
  const std::string extra = "train.steps=16 ckpt.save_every=4 ckpt.keep_last=10 eval.every=8 lora.dropout=0.1";
  TrainConfig full = lora("full", extra);
  TrainSummary a;
  ASSERT_TRUE(train_run(full, a).is_ok());
  const auto want = metrics(full.train.run_dir);
  const std::string cut = (dir_ / "cut").string();
  fs::copy(full.train.run_dir, cut, fs::copy_options::recursive);
  for (const char* step : {"step_00000008", "step_00000012", "step_00000016"}) fs::remove_all(cut + "/checkpoints/" + step);
  TrainConfig resumed = full;
  resumed.train.run_dir = cut;
  resumed.resume = true;
  TrainSummary b;
  ASSERT_TRUE(train_run(resumed, b).is_ok());
  EXPECT_EQ(b.start_step, 4);
  const auto got = metrics(cut);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); i++)
    EXPECT_EQ(deterministic(got[i]).dump(), deterministic(want[i]).dump()) << "line " << i;
  expect_same_tensors(a.checkpoint, b.checkpoint);
  // The base run goes on (a newer checkpoint where init_from points): a resume refuses to put the
  // adapters on another base than they trained on.
  TrainConfig more = config(fmt::format("train.steps=32 train.run_dir=\"{}\" eval.data=\"\"", base()));
  more.resume = true;
  TrainSummary sm;
  ASSERT_TRUE(train_run(more, sm).is_ok());
  TrainConfig again = full;
  again.resume = true;
  const Status st = train_run(again, sm);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("the adapters being resumed trained on"), std::string::npos) << st.message();
}

// `smelt export --format peft`: PEFT's two files, read by the spec-written safetensors reader
// (tests/reference/safetensors_read.py) with every adapter's name, shape and values the
// checkpoint's; read back by Smelt; and a run started from them ([lora] init) evaluates at step 0
// exactly as the exporting run did at its end.
TEST_F(LoraTrainTest, PeftExportIsReadByTheSpecReaderAndStartsAnotherRun) {
  TrainConfig c = lora("a", "train.steps=12 eval.every=12");
  TrainSummary a;
  ASSERT_TRUE(train_run(c, a).is_ok());
  const std::string peft = (dir_ / "peft").string();
  int rc = 0;
  const std::string out = test::run_command(fmt::format("{} export --format peft --checkpoint {} -o {} --json 2>&1",
                                                        SMELT_BINARY, c.train.run_dir, peft), rc);
  ASSERT_EQ(rc, 0) << out;
  const auto cfg = nlohmann::json::parse(test::read_file(peft + "/adapter_config.json"));
  EXPECT_EQ(cfg["peft_type"], "LORA");
  EXPECT_EQ(cfg["r"], 4);
  EXPECT_EQ(cfg["lora_alpha"], 8.0);
  EXPECT_EQ(cfg["target_modules"], nlohmann::json({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}));
  std::string base_ckpt;
  ASSERT_TRUE(ckpt_find_latest(base(), base_ckpt).is_ok());
  EXPECT_EQ(cfg["base_model_name_or_path"], base_ckpt);
  const std::string py = (dir_ / "py.json").string();
  const std::string cmd = "/usr/bin/python3 " + std::string(SMELT_SOURCE_DIR) + "/tests/reference/safetensors_read.py " +
                          peft + "/adapter_model.safetensors > " + py;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const auto j = nlohmann::json::parse(test::read_file(py));
  CkptManifest m;
  ASSERT_TRUE(ckpt_read_manifest(a.checkpoint, m).is_ok());
  const LoraLayout lay = lora_layout(c.model, c.lora);
  ASSERT_EQ(j["tensors"].size(), lay.params.tensors.size());
  std::vector<float> back((size_t)lay.params.total);
  ASSERT_TRUE(peft_read_adapters(peft, lay, back.data()).is_ok());
  for (const auto& t : lay.params.tensors) {
    std::vector<float> want((size_t)t.size());
    ASSERT_TRUE(ckpt_load_tensor(a.checkpoint, m, t.name, want.data(), want.size()).is_ok()) << t.name;
    const auto& e = j["tensors"][t.name];
    EXPECT_EQ(e["dtype"], "F32") << t.name;
    EXPECT_EQ(e["shape"].get<std::vector<int64_t>>(), (std::vector<int64_t>{t.rows, t.cols})) << t.name;
    std::vector<float> got;
    for (double v : e["values"].get<std::vector<double>>()) got.push_back((float)v);
    EXPECT_EQ(got, want) << t.name;
    EXPECT_EQ(std::vector<float>(back.begin() + t.offset, back.begin() + t.offset + t.size()), want) << t.name;
  }
  LoraConfig read;
  ASSERT_TRUE(peft_read_config(peft, read).is_ok());
  EXPECT_EQ(read.rank, 4);
  EXPECT_EQ(read.targets, c.lora.targets);
  // Another run starts from the file: its step-0 evaluation is the first run's last. Its targets,
  // written in another order than the file's (the model's), are the same targets.
  TrainConfig b = lora("b", fmt::format("train.steps=2 eval.every=2 lora.init=\"{}\"", peft));
  b.lora.targets = {"down", "up", "gate", "o", "v", "k", "q"};
  TrainSummary sb;
  ASSERT_TRUE(train_run(b, sb).is_ok());
  EXPECT_EQ(sb.eval_first, a.eval_last);
  // Adapters of another shape are refused, naming both.
  TrainConfig bad = lora("bad", fmt::format("train.steps=2 lora.rank=8 lora.init=\"{}\"", peft));
  const Status st = train_run(bad, sb);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("rank 4"), std::string::npos) << st.message();
  // A whole model's checkpoint is not adapters.
  EXPECT_FALSE(peft_export(base_ckpt, (dir_ / "nope").string()).is_ok());
}

namespace {
// A completion at temperature 0 with each token's log-probability.
nlohmann::json complete(int port, const std::string& prompt) {
  const test::Reply r = test::http(port, "POST", "/v1/completions",
                                   nlohmann::json{{"prompt", prompt}, {"max_tokens", 12}, {"temperature", 0},
                                                  {"logprobs", 1}}.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  const auto j = nlohmann::json::parse(r.body, nullptr, false);
  return j.is_discarded() ? nlohmann::json() : j["choices"][0]["logprobs"];
}
double logprob_gap(const nlohmann::json& a, const nlohmann::json& b) {
  double d = 0;
  const auto& x = a["token_logprobs"];
  const auto& y = b["token_logprobs"];
  for (size_t i = 0; i < std::min(x.size(), y.size()); i++) d = std::max(d, std::fabs(x[i].get<double>() - y[i].get<double>()));
  return d;
}
}  // namespace

// The adapters merged into the base (W + alpha/r B A) for Hugging Face and GGUF, each export's
// --check against the unmerged model; the merged weights against a float64 merge of the base's and
// the adapters' files read by the spec-written reader; and the base served with the adapters
// unmerged (`smelt serve --lora`) answering as the merged GGUF does, where the base alone does not.
TEST_F(LoraTrainTest, MergedExportsAndUnmergedServingGiveTheAdaptedModel) {
  TrainConfig c = lora("a", "train.steps=20 eval.every=20");
  TrainSummary a;
  ASSERT_TRUE(train_run(c, a).is_ok());
  std::string base_ckpt;
  ASSERT_TRUE(ckpt_find_latest(base(), base_ckpt).is_ok());
  // The byte model's tokenizer (256 bytes and the end-of-document token 256) for GGUF and serve.
  BpeModel bm;
  for (int b = 0; b < 256; b++) bm.vocab.push_back(std::string(1, (char)b));
  bm.specials.push_back({"<|endoftext|>", 256, true});
  bm.vocab.push_back("<|endoftext|>");
  Tokenizer tok;
  ASSERT_TRUE(Tokenizer::from_model(bm, tok).is_ok());
  const std::string tok_path = (dir_ / "byte.json").string();
  ASSERT_TRUE(tok.save_hf(tok_path).is_ok());
  const std::string peft = (dir_ / "peft").string(), merged = (dir_ / "merged").string(),
                    base_hf = (dir_ / "base_hf").string(), gguf = (dir_ / "merged.gguf").string();
  auto smelt = [&](const std::string& args, int want) {
    int rc = 0;
    const std::string out = test::run_command(fmt::format("{} {} 2>&1", SMELT_BINARY, args), rc);
    EXPECT_EQ(WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, want) << args << "\n" << out;
    return out;
  };
  smelt(fmt::format("export --format peft --checkpoint {} -o {}", c.train.run_dir, peft), 0);
  smelt(fmt::format("export --format hf --checkpoint {} -o {}", base_ckpt, base_hf), 0);
  const std::string hf = smelt(fmt::format("export --merge-lora --check --json --checkpoint {} -o {}", c.train.run_dir, merged), 0);
  EXPECT_NE(hf.find("\"check\":\"passed\""), std::string::npos) << hf;
  EXPECT_NE(hf.find("\"merge_lora\":true"), std::string::npos) << hf;
  const std::string py = (dir_ / "merge.json").string();
  const std::string cmd = fmt::format("/usr/bin/python3 {}/tests/reference/peft_merge_check.py {}/model.safetensors {} "
                                      "{}/model.safetensors > {}", SMELT_SOURCE_DIR, base_hf, peft, merged, py);
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const auto j = nlohmann::json::parse(test::read_file(py));
  EXPECT_EQ(j["targets"], kLoraTargets * c.model.n_layers) << j.dump();
  EXPECT_TRUE(j["names_match"].get<bool>()) << j.dump();
  EXPECT_TRUE(j["others_identical"].get<bool>()) << "embeddings, norms and head are the base's: " << j.dump();
  EXPECT_LT(j["worst_rel"].get<double>(), 1e-6) << j.dump();
  EXPECT_GT(j["adapter_norm"].get<double>(), 0.0) << "the adapters trained: B A is not zero";
  const std::string gg = smelt(fmt::format("export --format gguf --merge-lora --check --checkpoint {} --tokenizer {} -o {}",
                                           c.train.run_dir, tok_path, gguf), 0);
  EXPECT_NE(gg.find("LoRA merged into its base"), std::string::npos) << gg;
  // Refusals: a LoRA checkpoint without --merge-lora names both ways; --merge-lora of a whole model; peft + merge.
  const std::string no = smelt(fmt::format("export --format hf --checkpoint {} -o {}", c.train.run_dir, (dir_ / "x").string()), 1);
  EXPECT_NE(no.find("--merge-lora"), std::string::npos) << no;
  EXPECT_NE(no.find(base_ckpt), std::string::npos) << no;
  smelt(fmt::format("export --merge-lora --checkpoint {} -o {}", base_ckpt, (dir_ / "y").string()), 1);
  smelt(fmt::format("export --format peft --merge-lora --checkpoint {} -o {}", c.train.run_dir, (dir_ / "z").string()), 2);
  EXPECT_FALSE(fs::exists(dir_ / "y" / "model.safetensors"));

  // Served: the base with the adapters unmerged against the merged file, and the base alone.
  nlohmann::json with, as_merged, without;
  const std::string prompt = "The patch ";
  {
    test::ServeProcess s(fmt::format("--checkpoint {} --tokenizer {} --lora {}", base_ckpt, tok_path, peft),
                         dir_ / "serve-lora.log");
    ASSERT_GT(s.port(), 0) << s.log();
    with = complete(s.port(), prompt);
    EXPECT_NE(s.log().find("LoRA rank 4"), std::string::npos) << s.log();
    EXPECT_EQ(s.stop(), 0);
  }
  {
    test::ServeProcess s("--gguf " + gguf, dir_ / "serve-merged.log");
    ASSERT_GT(s.port(), 0) << s.log();
    as_merged = complete(s.port(), prompt);
  }
  {
    test::ServeProcess s(fmt::format("--checkpoint {} --tokenizer {}", base_ckpt, tok_path), dir_ / "serve-base.log");
    ASSERT_GT(s.port(), 0) << s.log();
    without = complete(s.port(), prompt);
  }
  ASSERT_EQ(with["token_logprobs"].size(), 12u) << with.dump();
  EXPECT_EQ(with["tokens"], as_merged["tokens"]);
  EXPECT_LT(logprob_gap(with, as_merged), 1e-3) << with.dump() << "\n" << as_merged.dump();
  EXPECT_GT(logprob_gap(with, without), 1e-2) << "the adapters change the model's answers";
  std::printf("[merge] float64 merge vs export: worst relative %.2e over %d targets; served unmerged vs merged GGUF: "
              "log-probabilities within %.2e (the base alone: %.2e away)\n", j["worst_rel"].get<double>(),
              j["targets"].get<int>(), logprob_gap(with, as_merged), logprob_gap(with, without));
  // A folder of adapters for another model is refused at start.
  test::ServeProcess bad(fmt::format("--checkpoint {} --tokenizer {} --lora {}", base_ckpt, tok_path, base_hf),
                         dir_ / "serve-bad.log");
  EXPECT_EQ(bad.port(), 0);

  // The LoRA run itself: served, it is its base with its adapters (the same bits as --lora of their
  // PEFT export); `generate` runs it, and --lora, as the merged file; `eval --tasks` scores it as the
  // merged file does; adapters given twice are refused.
  {
    test::ServeProcess s(fmt::format("--checkpoint {} --tokenizer {}", c.train.run_dir, tok_path),
                         dir_ / "serve-run.log");
    ASSERT_GT(s.port(), 0) << s.log();
    EXPECT_EQ(complete(s.port(), prompt), with);
    EXPECT_NE(s.log().find("LoRA rank 4"), std::string::npos) << s.log();
    EXPECT_EQ(s.stop(), 0);
  }
  auto stdout_of = [&](const std::string& args) {  // (stderr to a file, shown on failure)
    int rc = 0;
    const std::string err = (dir_ / "cmd.err").string();
    const std::string out = test::run_command(fmt::format("{} {} 2> {}", SMELT_BINARY, args, err), rc);
    EXPECT_EQ(WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, 0) << args << "\n" << test::read_file(err);
    return out;
  };
  auto ids = [&](const std::string& model) {
    const std::string out = stdout_of(fmt::format("generate {} --prompt '{}' --temperature 0 --max-new-tokens 12 "
                                                  "--ignore-eos --json", model, prompt));
    const auto j = nlohmann::json::parse(out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << out;
    return j.is_discarded() ? nlohmann::json() : j;
  };
  const auto run_gen = ids(fmt::format("--checkpoint {} --tokenizer {}", c.train.run_dir, tok_path));
  const auto peft_gen = ids(fmt::format("--checkpoint {} --tokenizer {} --lora {}", base_ckpt, tok_path, peft));
  const auto merged_gen = ids("--gguf " + gguf);
  ASSERT_EQ(run_gen["ids"].size(), 12u) << run_gen.dump();
  EXPECT_EQ(run_gen["ids"], peft_gen["ids"]);
  EXPECT_EQ(run_gen["ids"], merged_gen["ids"]);
  EXPECT_EQ(run_gen["lora"], run_gen["checkpoint"]) << run_gen.dump();
  EXPECT_EQ(peft_gen["lora"], peft) << peft_gen.dump();
  const std::string twice = smelt(fmt::format("generate --checkpoint {} --tokenizer {} --lora {} --prompt x",
                                              c.train.run_dir, tok_path, peft), 1);
  EXPECT_NE(twice.find("runs its own adapters"), std::string::npos) << twice;
  // A multiple-choice task short enough for the byte model's 64 positions.
  const std::string task = (dir_ / "choice").string();
  std::string items;
  for (const char* context : {"The patch ", "A file is ", "It runs on ", "We have a ", "This is the ", "Read from "})
    items += nlohmann::json{{"context", context}, {"choices", {"fixed", "a long line", "the test", "made"}}, {"gold", 0}}
                 .dump() + "\n";
  test::write_file(task + ".jsonl", items);
  test::write_file(task + ".toml", "[task]\nkind = \"multiple_choice\"\ntarget_delimiter = \"\"\n");
  auto logliks = [&](const std::string& model, const std::string& name) {
    const std::string samples = (dir_ / (name + ".jsonl")).string();
    const std::string out = stdout_of(fmt::format("eval --tasks {}.toml {} --samples {}", task, model, samples));
    std::vector<double> lp;
    std::istringstream in(test::read_file(samples));
    for (std::string line; std::getline(in, line);) {
      if (line.empty()) continue;
      const nlohmann::json item = nlohmann::json::parse(line);
      for (const auto& r : item["requests"]) lp.push_back(r["logprob"].get<double>());
    }
    return std::pair{nlohmann::json::parse(out, nullptr, false), lp};
  };
  const auto [run_eval, run_lp] = logliks(fmt::format("--checkpoint {} --tokenizer {}", c.train.run_dir, tok_path), "run");
  const auto [merged_eval, merged_lp] = logliks("--gguf " + gguf, "merged");
  const auto [base_eval, base_lp] = logliks(fmt::format("--checkpoint {} --tokenizer {}", base_ckpt, tok_path), "base");
  EXPECT_EQ(run_eval["lora"], run_eval["model"]) << run_eval.dump();
  ASSERT_FALSE(run_lp.empty()) << run_eval.dump();
  ASSERT_EQ(run_lp.size(), merged_lp.size());
  ASSERT_EQ(run_lp.size(), base_lp.size());
  double to_merged = 0, to_base = 0;
  for (size_t i = 0; i < run_lp.size(); i++) {
    to_merged = std::max(to_merged, std::fabs(run_lp[i] - merged_lp[i]));
    to_base = std::max(to_base, std::fabs(run_lp[i] - base_lp[i]));
  }
  EXPECT_EQ(run_lp.size(), 24u);
  EXPECT_LT(to_merged, 1e-3);
  EXPECT_GT(to_base, 1e-2) << "the adapters change the scores";
  std::printf("[lora run] served as --lora of its PEFT export; generate equal to the merged GGUF; eval --tasks: %zu "
              "log-likelihoods within %.2e of the merged file's (the base alone: %.2e away)\n", run_lp.size(),
              to_merged, to_base);
}

// Two data-parallel ranks under mpirun, the optimizer sharded (ZeRO-1 over the adapters' range):
// the same target tokens each step as one rank, the losses and the final adapters to what the
// reduction order leaves.
TEST_F(LoraTrainTest, TwoDataParallelRanksTrainTheAdaptersAsOneDoes) {
  ASSERT_EQ(std::system("command -v mpirun > /dev/null 2>&1"), 0) << "mpirun: scripts/install-deps installs openmpi-bin";
  const std::string toml = (dir_ / "lora.toml").string();
  test::write_file(toml, train_config_to_string(lora("unused", "train.steps=8 eval.every=0 train.threads=1 dist.zero=1")));
  auto run = [&](const std::string& name, int ranks) {
    const std::string cmd = fmt::format("{} train --config {} --run-dir {} > {}.log 2>&1", SMELT_BINARY, toml,
                                        (dir_ / name).string(), (dir_ / name).string());
    return std::system((ranks > 1 ? fmt::format("{} -np {} {}", test::kMpirun, ranks, cmd) : cmd).c_str());
  };
  ASSERT_EQ(run("dp2", 2), 0) << test::read_file((dir_ / "dp2.log").string());
  ASSERT_EQ(run("dp1", 1), 0) << test::read_file((dir_ / "dp1.log").string());
  const auto a = test::read_metrics(dir_ / "dp2"), b = test::read_metrics(dir_ / "dp1");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); i++) {
    if (!a[i].contains("loss")) continue;
    EXPECT_EQ(a[i]["tokens"], b[i]["tokens"]) << i;
    EXPECT_NEAR(a[i]["loss"].get<double>(), b[i]["loss"].get<double>(), 1e-3 * b[i]["loss"].get<double>()) << i;
  }
  std::string ca, cb;
  ASSERT_TRUE(ckpt_find_latest((dir_ / "dp2").string(), ca).is_ok());
  ASSERT_TRUE(ckpt_find_latest((dir_ / "dp1").string(), cb).is_ok());
  CkptManifest ma, mb;
  ASSERT_TRUE(ckpt_read_manifest(ca, ma).is_ok());
  ASSERT_TRUE(ckpt_read_manifest(cb, mb).is_ok());
  const std::string name = "base_model.model.model.layers.1.mlp.down_proj.lora_B.weight";
  const CkptTensorInfo* t = mb.find(name);
  ASSERT_NE(t, nullptr);
  std::vector<float> x(t->bytes / 4), y(t->bytes / 4);
  ASSERT_TRUE(ckpt_load_tensor(ca, ma, name, x.data(), x.size()).is_ok());
  ASSERT_TRUE(ckpt_load_tensor(cb, mb, name, y.data(), y.size()).is_ok());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < x.size(); i++) diff = std::max(diff, (double)std::fabs(x[i] - y[i])), norm = std::max(norm, (double)std::fabs(y[i]));
  EXPECT_GT(norm, 0.0) << "B moved from zero";
  EXPECT_LT(diff, 1e-2 * norm);
}

TEST_F(LoraTrainTest, RefusesARunWithoutABaseAndTensorParallel) {
  toml::table root = toml::parse(test::byte_model_toml(64, false) + R"([data]
sources = "x"
seq_len = 64
batch_size = 4
eod_id = 256
[train]
run_dir = "r"
steps = 4
[lora]
rank = 4
)");
  TrainConfig c;
  Status s = train_config_read(root, c);  // (each read below into a fresh TrainConfig)
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("--init-from"), std::string::npos) << s.message();
  root.insert_or_assign("parallel", toml::table{{"tp", 2}});
  root["train"].as_table()->insert_or_assign("init_from", "somewhere");
  s = train_config_read(root, c = TrainConfig{});
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("data-parallel only"), std::string::npos) << s.message();
  root.insert_or_assign("parallel", toml::table{{"tp", 1}});
  root.insert_or_assign("eval", toml::table{{"tasks", toml::array{"somewhere.jsonl"}}});
  s = train_config_read(root, c = TrainConfig{});
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("[lora] with [eval] tasks"), std::string::npos) << s.message();
  root.erase("eval");
  root["lora"].as_table()->insert_or_assign("targets", toml::array{"q", "w"});
  s = train_config_read(root, c = TrainConfig{});
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("unknown target \"w\""), std::string::npos) << s.message();
  // A bf16 base in an fp32 run: refused, naming the fix.
  root["lora"].as_table()->insert_or_assign("targets", toml::array{"q"});
  root["lora"].as_table()->insert_or_assign("base_dtype", "bf16");
  root["train"].as_table()->insert_or_assign("precision", "fp32");
  s = train_config_read(root, c = TrainConfig{});
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("precision = \"bf16\""), std::string::npos) << s.message();
  root["lora"].as_table()->insert_or_assign("base_dtype", "int4");
  s = train_config_read(root, c = TrainConfig{});
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("base_dtype = \"int4\""), std::string::npos) << s.message();
}

}  // namespace smelt::test
