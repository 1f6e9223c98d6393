// `[lora]` runs of the trainer on a trained base (--init-from a short full run of the byte model):
// the held-out loss falls while the base stays as it was; the checkpoint holds the adapters alone
// (PEFT's names) with their AdamW moments and the state names the base; an interrupted run resumed
// from its checkpoint (dropout on: the masks continue) equals the straight run step for step; and
// the adapters exported in PEFT's layout (checked by a spec-written reader) start another run; the
// refusals (no base, tensor parallel, a LoRA checkpoint where a whole model is needed).
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "smelt/ckpt/peft.hpp"
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
  // Another run starts from the file: its step-0 evaluation is the first run's last.
  TrainConfig b = lora("b", fmt::format("train.steps=2 eval.every=2 lora.init=\"{}\"", peft));
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
}

}  // namespace smelt::test
