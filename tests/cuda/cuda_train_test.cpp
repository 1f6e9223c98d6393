// `smelt train` with [train] device = "cuda": the same run on the GPU and on the CPU in fp32 (the
// loss of every step and the evaluations agree), a bf16 run that learns, checkpoints passed from
// the GPU to the CPU and back, and a clear refusal where there is no GPU.
#include <cmath>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>

#include "cuda/cuda_test_util.hpp"
#include "smelt/common/config.hpp"
#include "smelt/train/train_config.hpp"
#include "smelt/train/trainer.hpp"
#include "train_test_util.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace smelt {
namespace {

class CudaTrain : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::fresh_test_dir("smelt_cuda_train");
    const std::string d = SMELT_TEST_DATA;
    test::write_byte_shard((dir_ / "en").string(), {d + "/tokenizer/english.txt", d + "/tokenizer_train/en_coding_style.rst"});
    test::write_byte_shard((dir_ / "valid").string(), {d + "/tokenizer_train/en_submitting_patches.rst"});
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string config_text(const std::string& run) {
    return test::byte_model_toml(64, false) + fmt::format(R"([data]
sources = "{}"
seq_len = 64
batch_size = 4
eod_id = 256
prefetch_threads = 1
[train]
run_dir = "{}"
steps = 40
threads = 2
peak_gflops = 50
[optim]
lr = 3e-3
warmup_steps = 5
[eval]
data = "{}"
every = 20
tokens = 2048
[ckpt]
save_every = 20
)", (dir_ / "en").string(), (dir_ / run).string(), (dir_ / "valid").string());
  }

  TrainConfig config(const std::string& run, const std::string& extra) {
    toml::table root = toml::parse(config_text(run));
    std::istringstream sets(extra);
    std::string s;
    while (sets >> s) EXPECT_TRUE(config_apply_set(root, s).is_ok()) << s;
    TrainConfig c;
    Status st = train_config_read(root, c);
    EXPECT_TRUE(st.is_ok()) << st.message();
    return c;
  }

  fs::path dir_;
};

TEST_F(CudaTrain, WithoutAGpuTheRunSaysWhy) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  TrainSummary sum;
  const Status s = train_run(config("run", "train.device=cuda"), sum);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("[train] device = \"cuda\""), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(cuda::built() ? "no CUDA device" : "no CUDA backend"), std::string::npos) << s.message();
}

TEST_F(CudaTrain, WithoutAGpuSmeltTrainDeviceCudaExitsWithTheReason) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  const std::string cfg = (dir_ / "run.toml").string();
  test::write_file(cfg, config_text("run"));
  int rc = 0;
  const std::string out = test::run_command(std::string(SMELT_BINARY) + " train --config " + cfg + " --device cuda 2>&1", rc);
  EXPECT_EQ(WEXITSTATUS(rc), 1) << out;
  EXPECT_NE(out.find("[train] device = \"cuda\""), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(dir_ / "run" / "checkpoints")) << "nothing is trained or saved";
  test::run_command(std::string(SMELT_BINARY) + " train --config " + cfg + " --device tpu 2>&1", rc);
  EXPECT_EQ(WEXITSTATUS(rc), 2) << "an unknown device is a usage error";
}

TEST_F(CudaTrain, Fp32RunMatchesTheCpuStepForStepAndResumesOnTheCpu) {
  SMELT_REQUIRE_CUDA_DEVICE();
  TrainSummary gs, cs;
  const TrainConfig g = config("gpu", "train.device=cuda train.precision=fp32");
  const TrainConfig c = config("cpu", "train.precision=fp32");
  Status s = train_run(g, gs);
  ASSERT_TRUE(s.is_ok()) << s.message();
  ASSERT_TRUE(train_run(c, cs).is_ok());
  const auto mg = test::read_metrics(g.train.run_dir, true), mc = test::read_metrics(c.train.run_dir, true);
  ASSERT_EQ(mg.size(), 41u);
  ASSERT_EQ(mc.size(), 41u);
  double worst = 0, worst_eval = 0;
  for (size_t i = 1; i < mg.size(); i++) {
    const double lg = mg[i]["loss"].get<double>(), lc = mc[i]["loss"].get<double>();
    worst = std::max(worst, std::fabs(lg - lc) / lc);
    EXPECT_NEAR(mg[i]["token_entropy"].get<double>(), mc[i]["token_entropy"].get<double>(), 1e-3) << "step " << i;
    EXPECT_NEAR(mg[i]["grad_norm"].get<double>(), mc[i]["grad_norm"].get<double>(),
                1e-2 * mc[i]["grad_norm"].get<double>()) << "step " << i;
  }
  for (size_t i : {0, 20, 40})
    worst_eval = std::max(worst_eval, std::fabs(mg[i]["eval_loss"].get<double>() - mc[i]["eval_loss"].get<double>()));
  test::report("trainer fp32 GPU vs CPU, worst relative step loss", worst, 2e-3);
  test::report("trainer fp32 GPU vs CPU, worst eval loss gap (nats)", worst_eval, 2e-3);
  EXPECT_LT(mg[40]["eval_loss"].get<double>(), mg[0]["eval_loss"].get<double>() - 0.5);

  // The GPU's checkpoint at step 40, resumed on the CPU for 10 more steps.
  ASSERT_TRUE(fs::exists(fs::path(g.train.run_dir) / "checkpoints" / "step_00000040"));
  TrainConfig r = config("gpu", "train.precision=fp32 train.steps=50");
  r.resume = true;
  TrainSummary rs;
  s = train_run(r, rs);
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(rs.start_step, 40);
  EXPECT_EQ(rs.steps, 50);
  const auto mr = test::read_metrics(g.train.run_dir, true);
  ASSERT_EQ(mr.size(), 51u);
  // The CPU run's checkpoint resumed on the GPU (a copy of its folder).
  fs::copy(c.train.run_dir, dir_ / "cpu_then_gpu", fs::copy_options::recursive);
  TrainConfig rg = config("cpu_then_gpu", "train.device=cuda train.precision=fp32 train.steps=50");
  rg.resume = true;
  s = train_run(rg, rs);
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(rs.start_step, 40);
  const auto mgr = test::read_metrics(rg.train.run_dir, true);
  ASSERT_EQ(mgr.size(), 51u);
  // Step 41 on the CPU from the GPU's state against step 41 of a CPU run resumed from its own.
  TrainConfig rc = config("cpu", "train.precision=fp32 train.steps=50");
  rc.resume = true;
  ASSERT_TRUE(train_run(rc, cs).is_ok());
  const auto mcr = test::read_metrics(c.train.run_dir, true);
  ASSERT_EQ(mcr.size(), 51u);
  test::report("resumed on the CPU from the GPU's checkpoint, step 41 loss vs the CPU's",
               std::fabs(mr[41]["loss"].get<double>() - mcr[41]["loss"].get<double>()) / mcr[41]["loss"].get<double>(),
               2e-3);
  test::report("resumed on the GPU from the CPU's checkpoint, steps 41-50 worst relative loss vs the CPU's",
               [&] {
                 double w = 0;
                 for (int i = 41; i <= 50; i++)
                   w = std::max(w, std::fabs(mgr[i]["loss"].get<double>() - mcr[i]["loss"].get<double>()) /
                                       mcr[i]["loss"].get<double>());
                 return w;
               }(),
               2e-3);
}

TEST_F(CudaTrain, Bf16RunLearnsAndItsCheckpointResumesOnTheGpu) {
  SMELT_REQUIRE_CUDA_DEVICE();
  TrainSummary gs;
  const TrainConfig g = config("gpu16", "train.device=cuda train.precision=auto");
  Status s = train_run(g, gs);
  ASSERT_TRUE(s.is_ok()) << s.message();
  const auto m = test::read_metrics(g.train.run_dir, true);
  ASSERT_EQ(m.size(), 41u);
  EXPECT_NEAR(m[1]["loss"].get<double>(), std::log(260.0), 0.1);
  EXPECT_NEAR(m[1]["token_entropy"].get<double>(), std::log(260.0), 0.05);
  double last5 = 0;
  for (int i = 36; i <= 40; i++) last5 += m[i]["loss"].get<double>() / 5;
  EXPECT_LT(last5, m[1]["loss"].get<double>() - 1.5) << "training did not learn";
  EXPECT_LT(m[40]["eval_loss"].get<double>(), m[0]["eval_loss"].get<double>() - 0.5);
  for (const char* k : {"mfu", "mfu_peak"}) EXPECT_GT(m[40][k].get<double>(), 0.0) << k;
  // Resume at step 20 on the GPU: steps 21-40 again give the first run's losses bit for bit.
  fs::remove_all(fs::path(g.train.run_dir) / "checkpoints" / "step_00000040");
  TrainConfig r = g;
  r.resume = true;
  TrainSummary rs;
  s = train_run(r, rs);
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(rs.start_step, 20);
  const auto mr = test::read_metrics(g.train.run_dir, true);
  ASSERT_EQ(mr.size(), 41u);
  for (int i = 21; i <= 40; i++) EXPECT_EQ(mr[i]["loss"], m[i]["loss"]) << "step " << i;
}

}  // namespace
}  // namespace smelt
