// The trainer's health rules (train/health.cpp, docs/train.md "Health"): a non-finite gradient
// skips its update, repeated loss spikes roll back and quarantine their documents, an entropy
// collapse restarts the schedule.
#include "trainer_fixture.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace smelt;
using smelt::test::TrainerTest;

namespace {

// [health] NaN rule: an injected NaN gradient at step 3 skips that update (weights untouched: step
// 4 sees step 3's loss landscape again), is counted, and training goes on with finite losses.
TEST_F(TrainerTest, NonFiniteGradientSkipsTheUpdate) {
  TrainConfig c = config("train.steps=6 eval.data=\"\" health.inject_nan_steps=3");
  TrainSummary s;
  ASSERT_TRUE(train_run(c, s).is_ok());
  auto m = metrics(c.train.run_dir);
  ASSERT_EQ(m.size(), 6u);
  EXPECT_EQ(m[2]["step"], 3);
  EXPECT_EQ(m[2]["skipped"], "nonfinite");
  EXPECT_TRUE(m[2]["grad_norm"].is_null());
  for (int i = 3; i < 6; i++) {
    EXPECT_TRUE(m[i]["loss"].is_number()) << i;
    EXPECT_FALSE(m[i].contains("skipped")) << i;
  }
  // Without the injection the same run differs from step 4 on (the skipped update matters)...
  TrainConfig d = config("train.steps=6 eval.data=\"\"");
  d.train.run_dir = (dir_ / "clean").string();
  ASSERT_TRUE(train_run(d, s).is_ok());
  auto n = metrics(d.train.run_dir);
  EXPECT_EQ(n[2]["loss"], m[2]["loss"]);
  EXPECT_NE(n[3]["loss"], m[3]["loss"]);
  // ...and the count survives in the checkpoint.
  CkptManifest man;
  ASSERT_TRUE(ckpt_read_manifest(c.train.run_dir + "/checkpoints/step_00000006", man).is_ok());
  EXPECT_EQ(man.state["health"]["nonfinite_skipped"], 1);
}

// [health] spike rule: scrambled targets (bad data) at steps 31-33 spike the loss three times in a
// row -> the weights roll back to step 30's checkpoint, the window's documents are written to
// quarantine.jsonl with their lineage ids, and training continues from the next data.
TEST_F(TrainerTest, RepeatedLossSpikesRollBackAndQuarantine) {
  TrainConfig c = config("train.steps=44 eval.data=\"\" ckpt.save_every=10 ckpt.async=false health.spike_warmup=10 "
                         "health.spike_sigma=4 health.spike_repeats=3 health.inject_bad_data_steps=31,32,33");
  TrainSummary s;
  Status st = train_run(c, s);
  ASSERT_TRUE(st.is_ok()) << st.message();
  std::vector<json> all;
  {
    std::istringstream in(test::read_file(c.train.run_dir + "/metrics.jsonl"));
    std::string line;
    while (std::getline(in, line)) all.push_back(json::parse(line));
  }
  json rollback;
  std::map<int64_t, json> steps;
  for (const auto& j : all) {
    if (j.contains("event")) {
      if (j["event"] == "rollback") rollback = j;
    } else {
      steps[j["step"]] = j;
    }
  }
  ASSERT_FALSE(rollback.is_null()) << "no rollback event";
  EXPECT_EQ(rollback["step"], 33);
  EXPECT_EQ(rollback["to_step"], 30);
  for (int t = 31; t <= 33; t++) EXPECT_EQ(steps[t]["loss_spike"], t - 30) << t;
  // After the rollback the loss is back near step 30's, far below the spikes.
  EXPECT_LT(steps[34]["loss"].get<double>(), steps[31]["loss"].get<double>() - 1.0);
  EXPECT_NEAR(steps[34]["loss"].get<double>(), steps[30]["loss"].get<double>(), 0.5);
  json q = json::parse(test::read_file(c.train.run_dir + "/quarantine.jsonl"));
  EXPECT_EQ(q["steps"], json({31, 33}));
  ASSERT_FALSE(q["documents"].empty());
  for (const auto& d : q["documents"]) {
    ASSERT_TRUE(d.contains("id"));
    const std::string id = d["id"];
    EXPECT_TRUE(id.rfind("english.txt:", 0) == 0 || id.rfind("en_coding_style.rst:", 0) == 0 ||
                id.rfind("chinese.txt:", 0) == 0) << id;
  }
  // Three steps of 4 x 64 tokens touch at least a few documents of these short lines.
  EXPECT_GE(q["documents"].size(), 3u);
  EXPECT_EQ(q["rolled_back_to"].get<std::string>().substr(q["rolled_back_to"].get<std::string>().size() - 13),
            "step_00000030");
  // The quarantine is in later checkpoints, and a resume after the rollback (from step 40) sees the
  // same data and state as the run that went on: same metrics from there.
  CkptManifest man;
  ASSERT_TRUE(ckpt_read_manifest(c.train.run_dir + "/checkpoints/step_00000040", man).is_ok());
  EXPECT_EQ(man.state["quarantine"].size(), q["documents"].size());
  const std::string cut = (dir_ / "cut").string();
  fs::copy(c.train.run_dir, cut, fs::copy_options::recursive);
  fs::remove_all(cut + "/checkpoints/step_00000044");
  TrainConfig r = c;
  r.train.run_dir = cut;
  r.resume = true;
  ASSERT_TRUE(train_run(r, s).is_ok());
  auto want = metrics(c.train.run_dir), got = metrics(cut);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); i++)
    EXPECT_EQ(deterministic(got[i]).dump(), deterministic(want[i]).dump()) << "line " << i;
}

// [health] entropy rule: evaluation entropy below the floor for 2 evaluations in a row restarts the
// LR schedule at 30% of the peak (warming up again).
TEST_F(TrainerTest, EntropyCollapseRestartsTheSchedule) {
  TrainConfig c = config("train.steps=14 eval.every=5 eval.tokens=512 health.entropy_floor=100 "
                         "health.entropy_evals=2 health.lr_restart_scale=0.3 optim.warmup_steps=2");
  TrainSummary s;
  ASSERT_TRUE(train_run(c, s).is_ok());
  std::vector<json> all;
  std::istringstream in(test::read_file(c.train.run_dir + "/metrics.jsonl"));
  std::string line;
  json restart;
  std::map<int64_t, json> steps;
  while (std::getline(in, line)) {
    json j = json::parse(line);
    if (j.contains("event")) {
      if (j["event"] == "lr_restart") restart = j;
    } else {
      steps[j["step"]] = j;
    }
  }
  ASSERT_FALSE(restart.is_null());
  EXPECT_EQ(restart["step"], 10);  // evaluations at 5 and 10 (the one before training does not count)
  EXPECT_NEAR(restart["peak_lr"].get<double>(), 3e-3, 1e-12);
  EXPECT_NEAR(steps[11]["lr"].get<double>(), 3e-3 / 2, 1e-12);  // warmup step 1 of 2 from the new peak
  EXPECT_NEAR(steps[12]["lr"].get<double>(), 3e-3, 1e-12);
  EXPECT_GT(steps[10]["lr"].get<double>(), 3e-3);
}

}  // namespace
