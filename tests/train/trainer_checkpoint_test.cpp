// The trainer's checkpoints (train/trainer_checkpoint.cpp): a resume reproduces the uninterrupted
// run's metrics bit for bit, resumes across precisions, and refuses another model.
#include "trainer_fixture.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace smelt;
using smelt::test::TrainerTest;

namespace {

// Checkpoints hold fp32 master weights and moments whatever the precision: a run saved in fp32
// resumes in bf16 and one saved in bf16 resumes in fp32, continuing from the same loader position
// and step with losses within bf16 noise of the uninterrupted run in the first precision (0.5%
// per step; measured 3.7e-5 and 4.7e-5), and the loss keeps falling.
TEST_F(TrainerTest, ResumesAcrossPrecisions) {
  for (const char* first : {"fp32", "bf16"}) {
    const std::string second = std::string(first) == "fp32" ? "bf16" : "fp32";
    TrainConfig full = config(fmt::format("train.steps=10 ckpt.save_every=5 ckpt.keep_last=10 eval.every=0 "
                                          "train.precision=\"{}\"", first));
    full.train.run_dir = (dir_ / (std::string("full_") + first)).string();
    TrainSummary a;
    ASSERT_TRUE(train_run(full, a).is_ok());
    auto want = metrics(full.train.run_dir);
    const std::string cut = (dir_ / (std::string("cut_") + first)).string();
    fs::copy(full.train.run_dir, cut, fs::copy_options::recursive);
    fs::remove_all(cut + "/checkpoints/step_00000010");
    TrainConfig resumed = full;
    resumed.train.run_dir = cut;
    ASSERT_TRUE(enum_parse(second, resumed.train.precision));
    resumed.resume = true;
    TrainSummary b;
    Status s = train_run(resumed, b);
    ASSERT_TRUE(s.is_ok()) << s.message();
    EXPECT_EQ(b.start_step, 5);
    EXPECT_EQ(json::parse(test::read_file(cut + "/summary.json"))["timing"]["precision"], second);
    auto got = metrics(cut);
    ASSERT_EQ(got.size(), want.size());
    double worst = 0;
    for (size_t i = 0; i < want.size(); i++) {
      ASSERT_EQ(got[i]["step"], want[i]["step"]);
      if (want[i].contains("loss"))
        worst = std::max(worst, std::fabs(got[i]["loss"].get<double>() / want[i]["loss"].get<double>() - 1));
      if (!want[i].contains("loss")) continue;
      EXPECT_EQ(got[i]["tokens"], want[i]["tokens"]) << "line " << i;
      const double lw = want[i]["loss"].get<double>(), lg = got[i]["loss"].get<double>();
      if (want[i]["step"].get<int>() <= 5) EXPECT_EQ(lg, lw) << "line " << i << " (before the resume)";
      else EXPECT_NEAR(lg, lw, 5e-3 * lw) << first << " -> " << second << " line " << i;
    }
    EXPECT_LT(b.last_loss, got[1]["loss"].get<double>());
    std::printf("%s -> %s: worst relative loss difference after the resume %.2e\n", first, second.c_str(), worst);
  }
}

TEST_F(TrainerTest, ResumeReproducesTheUninterruptedRun) {
  TrainConfig full = config("train.steps=12 ckpt.save_every=4 ckpt.keep_last=10 eval.every=6");
  TrainSummary a;
  ASSERT_TRUE(train_run(full, a).is_ok());
  auto want = metrics(full.train.run_dir);
  // Interrupted copy: keep only step 4's checkpoint, then resume.
  const std::string cut = (dir_ / "cut").string();
  fs::copy(full.train.run_dir, cut, fs::copy_options::recursive);
  fs::remove_all(cut + "/checkpoints/step_00000008");
  fs::remove_all(cut + "/checkpoints/step_00000012");
  TrainConfig resumed = full;
  resumed.train.run_dir = cut;
  resumed.resume = true;
  TrainSummary b;
  Status s = train_run(resumed, b);
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(b.start_step, 4);
  auto got = metrics(cut);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); i++)
    EXPECT_EQ(deterministic(got[i]).dump(), deterministic(want[i]).dump()) << "line " << i;
  // The final weights are the same bits.
  expect_same_tensors(a.checkpoint, b.checkpoint);
  // A kill after the asynchronous save of step 4 committed but before step 4's line reached
  // metrics.jsonl: the resume restores the line from the checkpoint.
  const std::string torn = (dir_ / "torn").string();
  fs::copy(full.train.run_dir, torn, fs::copy_options::recursive);
  fs::remove_all(torn + "/checkpoints/step_00000008");
  fs::remove_all(torn + "/checkpoints/step_00000012");
  {
    std::string kept;
    for (const auto& j : metrics(torn))
      if (j["step"].get<int64_t>() < 4) kept += j.dump() + "\n";
    test::write_file(torn + "/metrics.jsonl", kept);
  }
  ASSERT_EQ(metrics(torn).back()["step"], 3);
  resumed.train.run_dir = torn;
  ASSERT_TRUE(train_run(resumed, b).is_ok());
  got = metrics(torn);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); i++)
    EXPECT_EQ(deterministic(got[i]).dump(), deterministic(want[i]).dump()) << "line " << i;
  // A kill before the first checkpoint committed: --resume starts from step 0, and the earlier
  // attempt's step lines go (a restart event `smelt launch` wrote between the attempts stays).
  const std::string none = (dir_ / "none").string();
  fs::copy(full.train.run_dir, none, fs::copy_options::recursive);
  fs::remove_all(none + "/checkpoints");
  {
    std::string kept;
    for (const auto& j : metrics(none))
      if (j["step"].get<int64_t>() <= 3) kept += j.dump() + "\n";
    test::write_file(none + "/metrics.jsonl", kept + R"({"event":"restart","step":0,"restart":1})" "\n");
  }
  resumed.train.run_dir = none;
  ASSERT_TRUE(train_run(resumed, b).is_ok());
  EXPECT_EQ(b.start_step, 0);
  got = metrics(none);
  ASSERT_EQ(got.size(), want.size() + 1) << "every step once, and the restart event";
  EXPECT_EQ(got[0].value("event", ""), "restart");
  for (size_t i = 0; i < want.size(); i++)
    EXPECT_EQ(deterministic(got[i + 1]).dump(), deterministic(want[i]).dump()) << "line " << i;
}

TEST_F(TrainerTest, ResumeRefusesAnotherModel) {
  TrainConfig c = config("train.steps=2 eval.data=\"\"");
  TrainSummary s;
  ASSERT_TRUE(train_run(c, s).is_ok());
  TrainConfig d = config("train.steps=4 eval.data=\"\" model.d_model=128");
  d.resume = true;
  Status st = train_run(d, s);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("[model] differs"), std::string::npos) << st.message();
}

}  // namespace
