// `smelt train --init-from` as a user runs it (docs/import.md): a run starts from another run's
// weights (a model with the families' extras: q/k/v biases, QK-norm, an explicit head size, llama3
// RoPE scaling) with a fresh optimizer and schedule, alone and under tensor x pipeline parallelism
// through mpirun; its [model] and tokenizer come from the source; shards made with another
// tokenizer are refused, naming the shard; --resume wins over --init-from once the run has a
// checkpoint; a Hugging Face folder (Qwen3's layout, written by tests/reference/hf_family.py) starts
// the run with the weights `smelt import` reads from it.
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/ckpt/import_hf.hpp"
#include "smelt/model/params.hpp"
#include "test_files.hpp"
#include "test_references.hpp"
#include "tiny_checkpoint.hpp"
#include "tokenizer/tok_test_util.hpp"
#include "train_test_util.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace smelt;

namespace {

int sh(const std::string& cmd) {
  const int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

class InitFromTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::fresh_test_dir("smelt_init_from");
    const std::string data = std::string(SMELT_TEST_DATA) + "/tokenizer_train/";
    ASSERT_TRUE(test::train_tiny_tokenizer(tok("a"), 320));
    ASSERT_TRUE(test::train_tiny_tokenizer(tok("b"), 300));  // another vocabulary: another content hash
    for (const char* t : {"a", "b"})
      ASSERT_EQ(sh(fmt::format("{} tokenize --tokenizer {} -i {}en_coding_style.rst {}zh_coding_style.rst -o {} "
                               "--append-eod -t 1 --log-level error", SMELT_BINARY, tok(t), data, data,
                               (dir_ / (std::string("shard_") + t)).string())),
                0);
    // The source: a model with every family extra, trained a little so biases and norms move.
    test::write_file((dir_ / "source.toml").string(), R"([model]
vocab_size = 320
d_model = 64
n_layers = 2
n_heads = 4
n_kv_heads = 2
head_dim = 32
ffn_hidden = 128
max_seq_len = 64
qkv_bias = true
qk_norm = true
rope_scaling = "llama3"
rope_factor = 8.0
rope_original_max_seq_len = 16
tie_embeddings = false
[data]
seq_len = 32
batch_size = 2
[train]
steps = 12
threads = 1
peak_gflops = 50
[optim]
lr = 1e-2
warmup_steps = 2
)");
    ASSERT_EQ(sh(fmt::format("{} train --config {} --data text={} --set train.tokenizer=\\\"{}\\\" --run-dir {} > {} 2>&1",
                             SMELT_BINARY, (dir_ / "source.toml").string(), (dir_ / "shard_a").string(), tok("a"),
                             (dir_ / "source").string(), (dir_ / "source.log").string())),
              0)
        << test::read_file((dir_ / "source.log").string());
    // The continued run's own config: a [model] it does not keep, and a learning rate so small that
    // one step leaves every weight's bits as they were.
    test::write_file((dir_ / "continue.toml").string(), R"([model]
vocab_size = 512
d_model = 32
n_heads = 2
n_kv_heads = 2
ffn_hidden = 64
max_seq_len = 64
[data]
seq_len = 32
batch_size = 2
[train]
steps = 1
threads = 1
peak_gflops = 50
[optim]
lr = 1e-30
min_lr = 0
warmup_steps = 0
)");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string tok(const std::string& t) const { return (dir_ / ("tok_" + t + ".json")).string(); }
  // `smelt train --init-from source` on shard `shard`, under mpirun when ranks > 0.
  int cont(const std::string& run, const std::string& shard, int ranks = 0, const std::string& extra = "") {
    std::string cmd = fmt::format("{} train --config {} --data text={} --init-from {} --run-dir {} {} > {}.log 2>&1",
                                  SMELT_BINARY, (dir_ / "continue.toml").string(), (dir_ / shard).string(),
                                  (dir_ / "source").string(), (dir_ / run).string(), extra, (dir_ / run).string());
    if (ranks > 0) cmd = fmt::format("{} -np {} {}", test::kMpirun, ranks, cmd);
    return sh(cmd);
  }
  std::string log(const std::string& run) { return test::read_file((dir_ / (run + ".log")).string()); }
  // Every tensor of the newest checkpoint of `run`, whole, in param_layout order.
  std::vector<std::vector<float>> weights(const std::string& run, const ModelConfig& c) {
    std::string step;
    EXPECT_TRUE(ckpt_find_latest((dir_ / run).string(), step).is_ok()) << run;
    CkptManifest m;
    EXPECT_TRUE(ckpt_read_manifest(step, m).is_ok());
    std::vector<std::vector<float>> out;
    for (const ParamTensor& t : param_layout(c).tensors) {
      out.emplace_back(t.size());
      Status s = ckpt_read_box(step, m, t.name, t.full_rows, t.full_cols, {0, 0, t.rows, t.cols}, out.back().data());
      EXPECT_TRUE(s.is_ok()) << run << " " << t.name << ": " << s.message();
    }
    return out;
  }
  ModelConfig source_model() {
    std::string step;
    EXPECT_TRUE(ckpt_find_latest((dir_ / "source").string(), step).is_ok());
    CkptManifest m;
    EXPECT_TRUE(ckpt_read_manifest(step, m).is_ok());
    ModelConfig c;
    EXPECT_TRUE(model_config_read(toml::parse(m.config_toml), c).is_ok());
    return c;
  }
  fs::path dir_;
};

// The source's weights, its [model] and its tokenizer; a fresh optimizer (step 1 of a new
// schedule); one step at lr 1e-30 leaves every bit: the checkpoint equals the source's.
TEST_F(InitFromTest, StartsFromTheSourceWeightsWithAFreshOptimizer) {
  ASSERT_EQ(cont("one", "shard_a"), 0) << log("one");
  const ModelConfig c = source_model();
  EXPECT_TRUE(c.qkv_bias && c.qk_norm && c.head_dim == 32 && c.rope_scaling == RopeScaling::kLlama3);
  const auto src = weights("source", c), got = weights("one", c);
  ASSERT_EQ(src.size(), got.size());
  const auto layout = param_layout(c);
  for (size_t i = 0; i < src.size(); i++) EXPECT_EQ(src[i], got[i]) << layout.tensors[i].name;
  // Biases and norms were trained: a load that dropped them would not match a fresh init.
  const auto bias = test::ckpt_weights(dir_ / "one", "model.layers.1.self_attn.k_proj.bias");
  ASSERT_FALSE(bias.empty());
  EXPECT_NE(bias[0], 0.0f);
  std::vector<json> lines;
  for (json& j : test::read_metrics(dir_ / "one"))
    if (j.contains("loss")) lines.push_back(j);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["step"], 1);
  // The source's loss at its end is far below a fresh model's ln(320) = 5.77.
  EXPECT_LT(lines[0]["loss"].get<double>(), 5.0);
  // The run's resolved config names the source's [model] and tokenizer.
  const std::string cfg = test::read_file((dir_ / "one" / "config.toml").string());
  EXPECT_NE(cfg.find("qk_norm = true"), std::string::npos) << cfg;
  EXPECT_NE(cfg.find("tokenizer.json"), std::string::npos) << cfg;
  EXPECT_NE(log("one").find("set from it"), std::string::npos) << log("one");
  // smelt eval reads the run (its [data] eod_id comes from the tokenizer the source gave it).
  EXPECT_EQ(sh(fmt::format("{} eval --checkpoint {} --data text={} --max-tokens 2048 > {}/eval.log 2>&1", SMELT_BINARY,
                           (dir_ / "one").string(), (dir_ / "shard_a").string(), dir_.string())),
            0) << test::read_file((dir_ / "eval.log").string());
}

// tp 2 x pp 2 through mpirun: each rank loads its box of every tensor from the source.
TEST_F(InitFromTest, EveryRankLoadsItsBoxUnderTensorAndPipelineParallelism) {
  ASSERT_EQ(sh("command -v mpirun > /dev/null"), 0) << "mpirun is missing: scripts/install-deps installs openmpi-bin";
  ASSERT_EQ(cont("tp2pp2", "shard_a", 4, "--set parallel.tp=2 --set parallel.pp=2"), 0) << log("tp2pp2");
  const ModelConfig c = source_model();
  const auto src = weights("source", c), got = weights("tp2pp2", c);
  ASSERT_EQ(src.size(), got.size());
  const auto layout = param_layout(c);
  for (size_t i = 0; i < src.size(); i++) EXPECT_EQ(src[i], got[i]) << layout.tensors[i].name;
}

// Shards tokenized with another tokenizer than the model's: refused before any step, naming the
// shard's stats and both hashes; exit 1.
TEST_F(InitFromTest, ShardsOfAnotherTokenizerAreRefused) {
  EXPECT_EQ(cont("wrong", "shard_b"), 1);
  const std::string err = log("wrong");
  EXPECT_NE(err.find("was tokenized with tokenizer"), std::string::npos) << err;
  EXPECT_NE(err.find("shard_b.stats.json"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(dir_ / "wrong" / "checkpoints"));
  // A source that is not one: named.
  EXPECT_EQ(sh(fmt::format("{} train --config {} --data text={} --init-from {} --run-dir {} > {} 2>&1", SMELT_BINARY,
                           (dir_ / "continue.toml").string(), (dir_ / "shard_a").string(), (dir_ / "nowhere").string(),
                           (dir_ / "x").string(), (dir_ / "x.log").string())),
            1);
  EXPECT_NE(test::read_file((dir_ / "x.log").string()).find("not a directory"), std::string::npos);
}

// Once the continued run has a checkpoint, --resume continues it (its own weights and optimizer),
// whatever --init-from says.
TEST_F(InitFromTest, ResumeWinsOnceTheRunHasACheckpoint) {
  ASSERT_EQ(cont("r", "shard_a", 0, "--set optim.lr=1e-2 --steps 2"), 0) << log("r");
  const ModelConfig c = source_model();
  const auto after2 = weights("r", c);
  ASSERT_EQ(cont("r", "shard_a", 0, "--set optim.lr=1e-2 --steps 3 --resume"), 0) << log("r");
  EXPECT_NE(log("r").find("resuming from"), std::string::npos) << log("r");
  EXPECT_EQ(log("r").find("weights from"), std::string::npos) << log("r");
  std::vector<json> lines;
  for (json& j : test::read_metrics(dir_ / "r"))
    if (j.contains("loss")) lines.push_back(j);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines.back()["step"], 3);
  EXPECT_NE(weights("r", c)[1], after2[1]);
}

// A Hugging Face folder as the source: its config.json gives [model] (Qwen3: QK-norm, head_dim 128
// over d_model 256), its tokenizer.json the tokenizer, and the run's weights are import_hf's
// reading of its bf16 safetensors (2 shards), bit for bit but where one step at lr 1e-30 moves an
// exact zero, on one rank and on tp 2.
TEST_F(InitFromTest, AHuggingFaceFolderStartsTheRunWithItsWeights) {
  const std::string py = std::string(SMELT_SOURCE_DIR) + "/tests/reference/hf_family.py";
  SMELT_REQUIRE_REFERENCE(sh("/usr/bin/python3 -c 'import torch' 2> /dev/null") == 0, "python3-torch");
  const std::string hf = (dir_ / "hf").string(), tokq = test::fixtures() + "/qwen2.json";
  ASSERT_EQ(sh(fmt::format("/usr/bin/python3 {} write {} --family qwen3 --dtype bf16 --shards 2 --seed 5 --tokenizer {} "
                           "> {}/hf.log 2>&1", py, hf, tokq, dir_.string())),
            0) << test::read_file((dir_ / "hf.log").string());
  const std::string data = std::string(SMELT_TEST_DATA) + "/tokenizer_train/";
  ASSERT_EQ(sh(fmt::format("{} tokenize --tokenizer {} -i {}en_coding_style.rst {}zh_coding_style.rst -o {} --append-eod "
                           "-t 1 --log-level error", SMELT_BINARY, tokq, data, data, (dir_ / "shard_q").string())),
            0);
  HfModelInfo info;
  ASSERT_TRUE(import_hf_config(hf, 64, info).is_ok());
  EXPECT_TRUE(info.config.qk_norm);
  EXPECT_EQ(info.config.head_size(), 128);
  std::vector<float> want;
  ASSERT_TRUE(import_hf_weights(hf, info.config, want).is_ok());
  const auto layout = param_layout(info.config);
  // One rank, and tp 2 through mpirun: each rank reads its boxes from the folder (rows of the
  // column-parallel projections, columns of o_proj and down_proj) a tensor at a time.
  for (const auto& [run, ranks, extra] : {std::tuple<std::string, int, std::string>{"fromhf", 0, ""},
                                          {"fromhf_tp2", 2, "--set parallel.tp=2"}}) {
    std::string cmd = fmt::format("{} train --config {} --data text={} --init-from {} --run-dir {} {} > {} 2>&1",
                                  SMELT_BINARY, (dir_ / "continue.toml").string(), (dir_ / "shard_q").string(), hf,
                                  (dir_ / run).string(), extra, (dir_ / (run + ".log")).string());
    if (ranks > 0) cmd = fmt::format("{} -np {} {}", test::kMpirun, ranks, cmd);
    ASSERT_EQ(sh(cmd), 0) << log(run);
    const auto got = weights(run, info.config);
    for (size_t i = 0; i < layout.tensors.size(); i++) {
      const ParamTensor& t = layout.tensors[i];
      // One AdamW step at lr 1e-30 moves a weight by at most ~1e-30: nothing, but for the weights
      // bf16 rounded to exactly 0 (which it moves to +-1e-30).
      int64_t differ = 0, first = -1;
      for (int64_t k = 0; k < t.size(); k++)
        if (std::fabs(got[i][k] - want[t.offset + k]) > 1e-29f) differ++, first = first < 0 ? k : first;
      EXPECT_EQ(differ, 0) << run << " " << t.name << " first at " << first << ": "
                           << (first >= 0 ? got[i][first] : 0) << " vs " << (first >= 0 ? want[t.offset + first] : 0);
    }
    EXPECT_NE(log(run).find("Qwen3ForCausalLM"), std::string::npos) << log(run);
  }
}

}  // namespace
