// Tensor, pipeline and hybrid parallel `smelt train` under a real `mpirun --oversubscribe`
// (docs/parallel.md), on the byte model of the data-parallel tests (V 260, C 64, L 2, 4 heads,
// 2 KV heads, untied head) with the same global batch everywhere (4 rows x 2 micro-batches):
// - PP 2 and DP 2 x PP 2 + ZeRO-1 against one process: pipeline stages run the same kernels on the
//   same rows; with clipping off (the global norm is summed per stage, so its last bits differ
//   and would reach a clipped update) PP 2's losses and weights are the one process's bit for bit;
// - TP 2, TP 2 x PP 2, DP 2 x TP 2, and DP 2 x PP 2 (other row counts per GEMM) agree within fp32
//   rounding over 20 steps: the tolerance below, with the measured worst printed;
// - every parameter's gradient at step 1 (its first AdamW moment, (1 - beta1) g, read back as
//   the full tensor from the layout's boxes) matches one process's, for TP 2 x PP 2 (also with
//   tied embeddings: the two stages' parts added) and TP 4 (KV heads replicated);
// - a checkpoint written by TP 2 x PP 2 resumes on 1 rank and on DP 2 with the same data and the
//   uninterrupted run's losses; `smelt ckpt verify` and `smelt export` take it;
// - the memory plan shrinks per rank; layouts the world or the model do not allow are refused
//   before training with the numbers; a killed rank ends the job, and mpirun names it.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/model/activations.hpp"
#include "smelt/model/params.hpp"
#include "test_files.hpp"
#include "train_test_util.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace smelt;

namespace {

// Relative loss agreement over 20 steps for layouts whose sums are associated differently.
// Layouts that associate sums differently start 7e-7 apart (step 1's gradients) and drift apart
// as rounding differences grow through training: over 20 steps at lr 3e-3 the worst loss gap
// measured 4.6e-8 to 2.5e-5 relative over five runs (the data order follows the test folder's
// path, so each run trains on another order), final weights 1e-5 to 1e-3.
constexpr double kLossTol = 2e-4;
constexpr double kWeightTol = 1e-2;

class ParallelTrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::fresh_test_dir("smelt_par");
    const std::string d = SMELT_TEST_DATA;
    test::write_byte_shard((dir_ / "train").string(), {d + "/tokenizer/english.txt", d + "/tokenizer/chinese.txt"});
    test::write_file((dir_ / "run.toml").string(), test::byte_model_toml(32, false) + R"([data]
seq_len = 32
batch_size = 4
eod_id = 256
[train]
steps = 20
grad_accum = 2
threads = 1
peak_gflops = 50
sparsity_every = 5
precision = "fp32"
[optim]
lr = 3e-3
warmup_steps = 3
grad_clip = 0
[ckpt]
save_every = 5
keep_last = 10
[eval]
every = 10
tokens = 2048
)" + "data = '" + (dir_ / "train").string() + "'\n");
  }
  void TearDown() override { fs::remove_all(dir_); }

  // `smelt train` on `ranks` ranks (0: no mpirun) with [parallel] tp, pp.
  int train(int ranks, const std::string& run, int tp, int pp, const std::string& extra = "") {
    std::string cmd = fmt::format("{} train --config {} --data {} --run-dir {} --set parallel.tp={} --set parallel.pp={} "
                                  "{} > {}.log 2>&1",
                                  SMELT_BINARY, (dir_ / "run.toml").string(), (dir_ / "train").string(),
                                  (dir_ / run).string(), tp, pp, extra, (dir_ / run).string());
    if (ranks > 0) cmd = fmt::format("{} -np {} {}", test::kMpirun, ranks, cmd);
    int st = std::system(cmd.c_str());
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }
  std::string log(const std::string& run) { return test::read_file((dir_ / (run + ".log")).string()); }
  // The step lines (not the step-0 evaluation's line or events).
  std::vector<json> metrics(const std::string& run) {
    std::vector<json> out;
    for (json& j : test::read_metrics(dir_ / run))
      if (j.contains("loss")) out.push_back(std::move(j));
    return out;
  }

  // The full tensor `name` of the run's checkpoint at `step`, from whatever boxes hold it.
  std::vector<float> tensor(const std::string& run, int64_t step, const std::string& name, const ParamTensor& full) {
    const std::string dir = ckpt_step_dir((dir_ / run).string(), step);
    CkptManifest m;
    EXPECT_TRUE(ckpt_read_manifest(dir, m).is_ok()) << dir;
    std::vector<float> v(full.size());
    Status s = ckpt_read_box(dir, m, name, full.full_rows, full.full_cols, {0, 0, full.rows, full.cols}, v.data());
    EXPECT_TRUE(s.is_ok()) << run << " " << name << ": " << s.message();
    return v;
  }
  static ModelConfig model() {
    ModelConfig c;
    EXPECT_TRUE(model_config_read(toml::parse(test::byte_model_toml(32, false)), c).is_ok());
    return c;
  }

  fs::path dir_;
};

bool have_mpirun() { return std::system("command -v mpirun > /dev/null 2>&1") == 0; }

double rel(double a, double b) { return std::fabs(a - b) / std::max(1e-12, std::fabs(b)); }

TEST_F(ParallelTrainTest, EveryLayoutTrainsLikeOneProcess) {
  ASSERT_TRUE(have_mpirun()) << "mpirun is missing: scripts/install-deps installs openmpi-bin";
  ASSERT_EQ(train(0, "one", 1, 1), 0) << log("one");
  struct Run {
    const char* name;
    int ranks, tp, pp;
    const char* extra;
    bool exact;
  };
  const Run runs[] = {{"pp2", 2, 1, 2, "", true},
                      {"tp2", 2, 2, 1, "", false},
                      {"tp2pp2", 4, 2, 2, "", false},
                      {"dp2tp2", 4, 2, 1, "", false},
                      {"dp2pp2_zero", 4, 1, 2, "--set dist.zero=1", false}};
  const std::vector<json> want = metrics("one");
  ASSERT_EQ(want.size(), 20u);
  const ModelConfig c = model();
  const ParamLayout full = param_layout(c);
  for (const Run& r : runs) {
    ASSERT_EQ(train(r.ranks, r.name, r.tp, r.pp, r.extra), 0) << log(r.name);
    const std::vector<json> got = metrics(r.name);
    ASSERT_EQ(got.size(), want.size()) << r.name;
    double worst = 0;
    for (size_t i = 0; i < want.size(); i++) {
      EXPECT_EQ(got[i]["tokens"], want[i]["tokens"]) << r.name << " step " << i + 1;
      const double e = rel(got[i]["loss"].get<double>(), want[i]["loss"].get<double>());
      worst = std::max(worst, e);
      if (r.exact) EXPECT_EQ(got[i]["loss"], want[i]["loss"]) << r.name << " step " << i + 1;
      else EXPECT_LT(e, kLossTol) << r.name << " step " << i + 1;
      // The evaluations (steps 0, 10, 20: held-out batches through the stages)
      if (!want[i].contains("eval_loss")) continue;
      ASSERT_TRUE(got[i].contains("eval_loss")) << r.name << " step " << i + 1;
      if (r.exact) EXPECT_EQ(got[i]["eval_loss"], want[i]["eval_loss"]) << r.name << " step " << i + 1;
      else EXPECT_LT(rel(got[i]["eval_loss"].get<double>(), want[i]["eval_loss"].get<double>()), kLossTol) << r.name;
      EXPECT_EQ(got[i]["eval_tokens"], want[i]["eval_tokens"]) << r.name;
    }
    double wworst = 0;
    for (const auto& t : full.tensors) {
      const std::vector<float> a = tensor("one", 20, t.name, t), b = tensor(r.name, 20, t.name, t);
      if (r.exact) EXPECT_EQ(a, b) << r.name << ": " << t.name;
      double num = 0, den = 0;
      for (size_t i = 0; i < a.size(); i++) num = std::max(num, (double)std::fabs(a[i] - b[i])), den = std::max(den, (double)std::fabs(a[i]));
      wworst = std::max(wworst, num / den);
      EXPECT_LT(num / den, kWeightTol) << r.name << ": " << t.name;
    }
    std::printf("[%s] worst relative loss difference over 20 steps %.2e, final weights %.2e\n", r.name, worst, wworst);
    // The pipeline's and the groups' numbers are in every line.
    json last;
    for (const json& j : test::read_metrics(dir_ / r.name, true))
      if (j.contains("loss")) last = j;
    if (r.pp > 1) {
      ASSERT_TRUE(last.contains("pp_wait_ms")) << last.dump();
      EXPECT_EQ(last["pp_wait_ms"].size(), 2u);
      EXPECT_DOUBLE_EQ(last["pp_bubble"].get<double>(), 1.0 / 3.0);  // (P - 1) / (M + P - 1), M = 2
      EXPECT_GT(last["pp_bytes"].get<double>(), 0);
    }
    if (r.tp > 1) EXPECT_GT(last["tp_bytes"].get<double>(), 0) << last.dump();
  }
}

TEST_F(ParallelTrainTest, EveryGradientAtStepOneMatchesOneProcess) {
  ASSERT_TRUE(have_mpirun());
  const std::string one_step = "--steps 1 --set ckpt.save_every=0";
  ASSERT_EQ(train(0, "one", 1, 1, one_step), 0) << log("one");
  ASSERT_EQ(train(4, "tp2pp2", 2, 2, one_step), 0) << log("tp2pp2");
  ASSERT_EQ(train(4, "tp4", 4, 1, one_step), 0) << log("tp4");  // KV heads replicated over 2 ranks each
  // Tied embeddings: the last stage's copy and the first stage's table add their gradients.
  const std::string tied = one_step + " --set model.tie_embeddings=true";
  ASSERT_EQ(train(0, "one_tied", 1, 1, tied), 0) << log("one_tied");
  ASSERT_EQ(train(4, "tp2pp2_tied", 2, 2, tied), 0) << log("tp2pp2_tied");
  ModelConfig c = model();
  double worst = 0;
  for (const char* run : {"tp2pp2", "tp4", "tp2pp2_tied"}) {
    const bool is_tied = std::string(run).find("tied") != std::string::npos;
    c.tie_embeddings = is_tied;
    const std::string base = is_tied ? "one_tied" : "one";
    for (const auto& t : param_layout(c).tensors) {
      // AdamW's first moment after one step without clipping: (1 - beta1) g.
      const std::vector<float> a = tensor(base, 1, "optim.m." + t.name, t), b = tensor(run, 1, "optim.m." + t.name, t);
      double num = 0, den = 0;
      for (size_t i = 0; i < a.size(); i++) num = std::max(num, (double)std::fabs(a[i] - b[i])), den = std::max(den, (double)std::fabs(a[i]));
      EXPECT_GT(den, 0) << t.name;
      EXPECT_LT(num / den, 1e-4) << run << ": " << t.name;
      worst = std::max(worst, num / den);
    }
  }
  std::printf("worst relative gradient difference at step 1: %.2e\n", worst);
}

TEST_F(ParallelTrainTest, ATensorAndPipelineCheckpointResumesOnOneRankAndOnDataParallel) {
  ASSERT_TRUE(have_mpirun());
  ASSERT_EQ(train(4, "tp2pp2", 2, 2), 0) << log("tp2pp2");
  const std::vector<json> want = metrics("tp2pp2");
  ASSERT_EQ(want.size(), 20u);
  const std::string ckpt = ckpt_step_dir((dir_ / "tp2pp2").string(), 10);
  ASSERT_EQ(std::system(fmt::format("{} ckpt verify {} > {}/verify.log 2>&1", SMELT_BINARY, ckpt, dir_.string()).c_str()), 0)
      << test::read_file((dir_ / "verify.log").string());
  ASSERT_EQ(std::system(fmt::format("{} export --format hf --checkpoint {} --output {} > {}/export.log 2>&1", SMELT_BINARY,
                                    ckpt, (dir_ / "hf").string(), dir_.string())
                            .c_str()),
            0)
      << test::read_file((dir_ / "export.log").string());
  EXPECT_TRUE(fs::exists(dir_ / "hf" / "model.safetensors"));
  for (auto [ranks, name, tp, pp] : {std::tuple{0, "on1", 1, 1}, std::tuple{2, "on_dp2", 1, 1}}) {
    fs::copy(dir_ / "tp2pp2", dir_ / name, fs::copy_options::recursive);
    for (const char* s : {"step_00000015", "step_00000020"}) fs::remove_all(dir_ / name / "checkpoints" / s);
    ASSERT_EQ(train(ranks, name, tp, pp, "--resume"), 0) << log(name);
    EXPECT_NE(log(name).find("resuming from"), std::string::npos) << log(name);
    const std::vector<json> got = metrics(name);
    ASSERT_EQ(got.size(), want.size()) << name;
    for (size_t i = 0; i < 10; i++) EXPECT_EQ(got[i].dump(), want[i].dump()) << name << " " << i;
    for (size_t i = 10; i < want.size(); i++) {
      EXPECT_EQ(got[i]["tokens"], want[i]["tokens"]) << name << " step " << i + 1;  // no sample skipped or repeated
      EXPECT_LT(rel(got[i]["loss"].get<double>(), want[i]["loss"].get<double>()), kLossTol) << name << " step " << i + 1;
    }
  }
}

TEST_F(ParallelTrainTest, TheMemoryPlanShrinksPerRankAndBadLayoutsAreRefused) {
  ASSERT_TRUE(have_mpirun());
  const std::string short_run = "--steps 2 --set ckpt.save_every=0 --set ckpt.save_at_end=false";
  ASSERT_EQ(train(0, "one", 1, 1, short_run), 0) << log("one");
  ASSERT_EQ(train(4, "tp2pp2", 2, 2, short_run), 0) << log("tp2pp2");
  auto plan = [&](const char* run) {
    return json::parse(test::read_file((dir_ / run / "summary.json").string()))["timing"]["memory_plan"];
  };
  // Rank 0 of TP 2 x PP 2: half the embedding and half of layer 0 (the head is on stage 1).
  const ModelConfig c = model();
  const ParamLayout L = param_layout(c);
  const double whole = plan("one")["param_bytes"].get<double>();
  EXPECT_EQ(whole, 4.0 * L.total);
  const double rank0 = plan("tp2pp2")["param_bytes"].get<double>();
  const int64_t layer = L.layers[1].ln1 - L.layers[0].ln1;
  EXPECT_EQ(rank0, 4.0 * (c.vocab_size * c.d_model / 2 + (layer - 2 * c.d_model) / 2 + 2 * c.d_model));
  // Two micro-batches in flight on stage 0 (1F1B), each with one layer's activations at half the
  // heads and SwiGLU units, and no logits.
  std::vector<int> bounds;
  ASSERT_TRUE(stage_bounds(c.n_layers, 2, {}, bounds).is_ok());
  const ShardDims d = shard_dims(c, model_shard(2, 0, 2, 0, bounds));
  EXPECT_EQ(plan("tp2pp2")["activation_bytes"].get<double>(), 2.0 * 4 * activation_floats(d, false, 4, 32));
  EXPECT_LT(plan("tp2pp2")["activation_bytes"].get<double>(), plan("one")["activation_bytes"].get<double>());
  EXPECT_NE(log("tp2pp2").find("memory plan"), std::string::npos);

  EXPECT_EQ(train(3, "bad_world", 2, 1, short_run), 1);
  EXPECT_NE(log("bad_world").find("tp = 2 x pp = 1 = 2 ranks per model replica does not divide the 3 ranks"),
            std::string::npos) << log("bad_world");
  EXPECT_EQ(train(0, "bad_heads", 3, 1, short_run), 1);
  EXPECT_NE(log("bad_heads").find("does not divide the 1 ranks"), std::string::npos) << log("bad_heads");
  EXPECT_EQ(train(3, "bad_heads3", 3, 1, short_run), 1);
  EXPECT_NE(log("bad_heads3").find("tp = 3: must divide n_heads = 4"), std::string::npos) << log("bad_heads3");
  EXPECT_EQ(train(4, "bad_stages", 1, 4, short_run), 1);
  EXPECT_NE(log("bad_stages").find("pp = 4 stages but the model has n_layers = 2"), std::string::npos)
      << log("bad_stages");
}

TEST_F(ParallelTrainTest, AKilledRankEndsTheJobWithItsName) {
  ASSERT_TRUE(have_mpirun());
  const std::string cmd = fmt::format("exec {} -np 4 {} train --config {} --data {} --run-dir {} --steps 100000 "
                                      "--save-every 10 --set parallel.tp=2 --set parallel.pp=2 > {} 2>&1",
                                      test::kMpirun, SMELT_BINARY, (dir_ / "run.toml").string(),
                                      (dir_ / "train").string(), (dir_ / "run").string(), (dir_ / "run.log").string());
  const test::KilledJob k = test::kill_a_rank(cmd, dir_ / "run", SMELT_BINARY, (dir_ / "run.toml").string());
  ASSERT_GE(k.rank, 0) << "no rank to kill: " << log("run");
  ASSERT_TRUE(k.ended) << "the job kept waiting after a rank died";
  EXPECT_FALSE(WIFEXITED(k.status) && WEXITSTATUS(k.status) == 0) << log("run");
  const int rank = k.rank;
  EXPECT_NE(log("run").find(fmt::format("rank {} ", rank)), std::string::npos) << log("run");
}

}  // namespace
