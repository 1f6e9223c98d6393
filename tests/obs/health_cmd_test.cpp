// `smelt health` on real `smelt train` runs made to break one vital sign each by fault injection
// (a slow loader, a rank delayed before the reduction under mpirun, a throttled checkpoint write,
// bad data that makes the loss spike until the trainer rolls back): it names the sign, the step
// since which it is bad and the rank responsible, and exits 1; a healthy run exits 0. The trainer
// logs the sign's first departure as a "vital_sign" event. Downstream tasks on evaluation lines
// (a hand-made file, tests/obs/task_lines.hpp) get a line each and a warning when one falls back.
#include <sys/wait.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "obs/task_lines.hpp"
#include "test_files.hpp"
#include "train_test_util.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace smelt;

namespace {

using test::kMpirun;

struct Health {
  int rc = -1;
  json report;
  std::string text;
};

class HealthCmdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::fresh_test_dir("smelt_health");
    const std::string en = std::string(SMELT_TEST_DATA) + "/tokenizer/english.txt";
    test::write_byte_shard((dir_ / "train").string(), {en});
    test::write_file((dir_ / "run.toml").string(), test::byte_model_toml(32, true) + R"([data]
seq_len = 32
batch_size = 2
eod_id = 256
[train]
steps = 40
threads = 1
peak_gflops = 50
[optim]
lr = 3e-3
warmup_steps = 5
[ckpt]
save_every = 10
[health.vitals]
warmup = 5
)");
  }
  void TearDown() override { fs::remove_all(dir_); }

  int train(const std::string& run, const std::string& extra, int ranks = 0) {
    std::string cmd = fmt::format("{} train --config {} --data {} --run-dir {} {} > {}.log 2>&1", SMELT_BINARY,
                                  (dir_ / "run.toml").string(), (dir_ / "train").string(), (dir_ / run).string(), extra,
                                  (dir_ / run).string());
    if (ranks > 0) cmd = fmt::format("{} -np {} {}", kMpirun, ranks, cmd);
    int st = std::system(cmd.c_str());
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }
  std::string log(const std::string& run) { return test::read_file((dir_ / (run + ".log")).string()); }

  Health health(const std::string& run, const std::string& flags = "") {
    Health h;
    const std::string out = (dir_ / "health.out").string();
    int st = std::system(fmt::format("{} health {} --json {} > {} 2>&1", SMELT_BINARY, flags, (dir_ / run).string(), out).c_str());
    h.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    h.report = json::parse(test::read_file(out), nullptr, false);
    st = std::system(fmt::format("{} health {} {} > {} 2>&1", SMELT_BINARY, flags, (dir_ / run).string(), out).c_str());
    h.text = test::read_file(out);
    return h;
  }
  static json sign(const Health& h, const std::string& name) {
    if (h.report.is_object())
      for (const auto& s : h.report["signs"])
        if (s["name"] == name) return s;
    ADD_FAILURE() << "no sign " << name << " in " << h.text;
    return json::object();
  }
  // The "vital_sign" events the trainer wrote.
  std::vector<json> events(const std::string& run) {
    std::vector<json> out;
    for (const auto& j : test::read_metrics(dir_ / run, true, true))
      if (j.value("event", "") == "vital_sign") out.push_back(j);
    return out;
  }
  // The signs that are not ok, for messages.
  static std::string not_ok(const Health& h) {
    std::string s;
    if (h.report.is_object())
      for (const auto& x : h.report["signs"])
        if (x["state"] == "warn" || x["state"] == "bad")
          s += x["name"].get<std::string>() + "=" + x["state"].get<std::string>() + " ";
    return s;
  }
  fs::path dir_;
};

TEST_F(HealthCmdTest, HealthyRunExitsZero) {
  ASSERT_EQ(train("ok", ""), 0) << log("ok");
  Health h = health("ok");
  EXPECT_EQ(h.rc, 0) << h.text;
  EXPECT_EQ(h.report["state"], "ok") << h.text;
  EXPECT_EQ(h.report["last_step"], 40);
  EXPECT_EQ(sign(h, "data_fetch_p95")["last_step"], 40) << h.text;  // judged from step 40
  for (const char* n : {"data_fetch_p95", "data_wait", "grad_norm_ratio", "token_entropy", "loss_spike"})
    EXPECT_EQ(sign(h, n)["state"], "ok") << n << "\n" << h.text;
  EXPECT_TRUE(events("ok").empty()) << log("ok");
  EXPECT_NE(h.text.find("data fetch P95"), std::string::npos) << h.text;
}

TEST_F(HealthCmdTest, SlowLoaderMakesTheDataSignsBad) {
  // One prefetch thread building each batch in 40 ms, for steps of a few ms (60 steps: the
  // fetch P95 is judged from the 40th).
  ASSERT_EQ(train("slow", "--set data.inject_slow_ms=40 --set data.prefetch_threads=1 --steps 60"), 0) << log("slow");
  Health h = health("slow");
  EXPECT_EQ(h.rc, 1) << h.text;
  EXPECT_EQ(h.report["state"], "bad");
  const json w = sign(h, "data_wait");
  EXPECT_EQ(w["state"], "bad") << h.text;
  EXPECT_EQ(w["since"], 6) << h.text;  // the first step after [health.vitals] warmup = 5
  EXPECT_EQ(sign(h, "data_fetch_p95")["state"], "bad") << h.text;
  EXPECT_EQ(sign(h, "data_fetch_p95")["since"], 40) << h.text;
  EXPECT_EQ(sign(h, "grad_norm_ratio")["state"], "ok") << h.text;  // only the data signs
  // The trainer warned once per sign and level, naming it.
  bool logged = false;
  for (const auto& e : events("slow"))
    if (e["sign"] == "data_wait" && e["state"] == "bad") logged = e["since"] == 6;
  EXPECT_TRUE(logged) << log("slow");
  EXPECT_NE(log("slow").find("vital sign data wait: bad"), std::string::npos) << log("slow");
  // --last judges only the end of the run: still slow there.
  EXPECT_EQ(health("slow", "--last 10").rc, 1);
}

TEST_F(HealthCmdTest, DelayedRankIsNamedInTheReductionSigns) {
  ASSERT_EQ(std::system("command -v mpirun > /dev/null 2>&1"), 0) << "mpirun is missing: scripts/install-deps installs openmpi-bin";
  // Rank 1 arrives 150 ms late from step 20 on (a spread of 75 ms). Times under 30 ms are not
  // judged ([health.vitals] min_ms), so that two ranks sharing two cores with the rest of ctest,
  // whose scheduling spreads them by tens of ms now and then, do not turn the sign bad earlier.
  ASSERT_EQ(train("late", "--set data.batch_size=4 --set dist.inject_delay_rank=1 --set dist.inject_delay_ms=150 "
                          "--set dist.inject_delay_step=20 --set health.vitals.min_ms=30", 2), 0) << log("late");
  Health h = health("late");
  EXPECT_EQ(h.rc, 1) << h.text;
  const json sp = sign(h, "allreduce_spread");
  EXPECT_EQ(sp["state"], "bad") << h.text;
  EXPECT_EQ(sp["since"], 20) << h.text;
  EXPECT_EQ(sp["ranks"], json::array({1})) << h.text;
  // Rank 0 waits for the late rank from step 20 on (on a busy machine two ranks on two cores
  // may wait long before: the wait alone cannot name the cause, the spread can).
  const json w = sign(h, "allreduce_wait");
  EXPECT_EQ(w["state"], "bad") << h.text;
  EXPECT_LE(w["since"].get<int64_t>(), 20) << h.text;
  EXPECT_NE(h.text.find("rank 1"), std::string::npos) << h.text;
  EXPECT_EQ(sign(h, "data_wait")["state"], "ok") << h.text;
}

TEST_F(HealthCmdTest, ThrottledCheckpointWriteIsBad) {
  // The tiny model's checkpoints (~1.3 MB) are judged ([health.vitals] ckpt_min_mb = 0) against
  // the disk's rate for a file of that size, measured at the start; the throttle caps them at 1 MB/s.
  ASSERT_EQ(train("slowdisk", "--set health.vitals.ckpt_min_mb=0 --set ckpt.inject_write_mb_s=1"), 0) << log("slowdisk");
  Health h = health("slowdisk");
  EXPECT_EQ(h.rc, 1) << h.text;
  const json c = sign(h, "ckpt_write");
  EXPECT_EQ(c["state"], "bad") << h.text;
  // Asynchronous saves report the previous save's rate at the next save (step 20, or 30 when the
  // slow write still ran at 20): the first line that carries a rate.
  int64_t first = -1;
  for (const auto& j : test::read_metrics(dir_ / "slowdisk", true))
    if (first < 0 && j.contains("ckpt_write_mb_s")) first = j["step"];
  EXPECT_GE(first, 20);
  EXPECT_EQ(c["since"], first) << h.text;
  EXPECT_LT(c["value"].get<double>(), 1.05) << h.text;
  // Unthrottled, the same checkpoints write faster than the throttle (how much faster depends on
  // fsync latency, which a busy machine stretches: why checkpoints under ckpt_min_mb are not
  // judged by default).
  ASSERT_EQ(train("fastdisk", "--set health.vitals.ckpt_min_mb=0"), 0) << log("fastdisk");
  Health f = health("fastdisk");
  EXPECT_GT(sign(f, "ckpt_write")["value"].get<double>(), 2.0) << f.text;
}

TEST_F(HealthCmdTest, LossSpikeUntilRollbackIsBad) {
  ASSERT_EQ(train("spike", "--set health.spike_warmup=15 --set health.spike_sigma=3 --set health.inject_bad_data_steps=32,33,34"), 0) << log("spike");
  Health h = health("spike");
  EXPECT_EQ(h.rc, 1) << h.text;
  const json s = sign(h, "loss_spike");
  EXPECT_EQ(s["state"], "bad") << h.text;
  EXPECT_EQ(s["since"], 34) << h.text;  // the third spike in a row: the rollback
  EXPECT_EQ(s["steps"], json::array({32, 33, 34})) << h.text;
  EXPECT_NE(s["detail"].get<std::string>().find("to step 30"), std::string::npos) << h.text;
  // One spike alone only warns (exit 0).
  ASSERT_EQ(train("blip", "--set health.spike_warmup=15 --set health.spike_sigma=3 --set health.inject_bad_data_steps=32"), 0) << log("blip");
  Health b = health("blip");
  EXPECT_EQ(sign(b, "loss_spike")["state"], "warn") << b.text;
  EXPECT_EQ(sign(b, "loss_spike")["since"], 32) << b.text;
  EXPECT_EQ(b.rc, 0) << b.text << not_ok(b);
}

TEST_F(HealthCmdTest, TasksGetALineEachAndATaskBehindItsBestWarns) {
  fs::create_directories(dir_ / "tasks");
  test::write_file((dir_ / "tasks" / "metrics.jsonl").string(), test::task_run_metrics());
  Health h = health("tasks");
  EXPECT_EQ(h.rc, 0) << h.text;  // a warning, not a failure
  EXPECT_EQ(h.report["state"], "warn") << h.text;
  EXPECT_NE(h.text.find("task arc_easy: acc_norm 0.2500 -> 0.3000 (+-0.032) over 3 evaluations, chance 0.25\n"),
            std::string::npos) << h.text;
  EXPECT_NE(h.text.find("task wikitext: bits_per_byte 2.5000 -> 1.9000 (+-0.050) over 3 evaluations\n"), std::string::npos)
      << h.text;
  EXPECT_NE(h.text.find("warning: task arc_easy: acc_norm 0.3000 at step 30 is below its best 0.4125 at step 20 by more "
                        "than 2 stderr (2 x 0.032)"), std::string::npos) << h.text;
  EXPECT_EQ(h.text.find("warning: task wikitext"), std::string::npos) << h.text;
  const json& arc = h.report["tasks"]["arc_easy"];
  EXPECT_EQ(arc["metric"], "acc_norm");
  EXPECT_EQ(arc["first"], 0.25);
  EXPECT_EQ(arc["last"], 0.30);
  EXPECT_EQ(arc["last_stderr"], 0.0324);
  EXPECT_EQ(arc["chance"], 0.25);
  EXPECT_EQ(arc["evaluations"], 3);
  EXPECT_EQ(arc["best"], 0.4125);
  EXPECT_EQ(arc["best_step"], 20);
  EXPECT_EQ(arc["regressed"], true);
  const json& wiki = h.report["tasks"]["wikitext"];
  EXPECT_TRUE(wiki["chance"].is_null()) << wiki.dump();
  EXPECT_EQ(wiki["last"], 1.9);
  EXPECT_EQ(wiki["regressed"], false);
  ASSERT_EQ(h.report["warnings"].size(), 1u) << h.report.dump();
  EXPECT_NE(h.report["warnings"][0].get<std::string>().find("arc_easy"), std::string::npos);
  // One more evaluation brings arc_easy back above its best: no warning, the run is ok.
  test::write_file((dir_ / "tasks" / "metrics.jsonl").string(),
                   test::task_run_metrics() + json(test::task_run_line(40)).dump() + "\n");
  Health back = health("tasks");
  EXPECT_EQ(back.report["state"], "ok") << back.text;
  EXPECT_EQ(back.report["warnings"].size(), 0u) << back.text;
  EXPECT_EQ(back.report["tasks"]["arc_easy"]["evaluations"], 4) << back.text;
  EXPECT_NE(back.text.find("task arc_easy: acc_norm 0.2500 -> 0.4500"), std::string::npos) << back.text;
  // --from-step judges only the end: the evaluations at 30 and 40.
  Health end = health("tasks", "--from-step 25");
  EXPECT_EQ(end.report["tasks"]["arc_easy"]["first"], 0.30) << end.text;
  EXPECT_EQ(end.report["tasks"]["arc_easy"]["evaluations"], 2) << end.text;
}

TEST_F(HealthCmdTest, UsageAndMissingRun) {
  Health h = health("nothing_here");
  EXPECT_EQ(h.rc, 1);
  EXPECT_NE(h.text.find("metrics.jsonl"), std::string::npos) << h.text;
  int st = std::system(fmt::format("{} health > /dev/null 2>&1", SMELT_BINARY).c_str());
  EXPECT_EQ(WEXITSTATUS(st), 2);
  st = std::system(fmt::format("{} health --last 0 {} > /dev/null 2>&1", SMELT_BINARY, dir_.string()).c_str());
  EXPECT_EQ(WEXITSTATUS(st), 2);
}

}  // namespace
