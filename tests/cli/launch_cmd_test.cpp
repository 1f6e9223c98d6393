// `smelt launch` end to end on one machine, under a real `mpirun`: a 2-rank run of a tiny model
// meets 10 faults injected from outside at seeded random steps (a rank SIGKILLed, a rank SIGSTOPped
// until the job's own hang timeout names it, every rank stopped until the supervisor's stall
// timeout, the newest checkpoint corrupted before a kill) and is restarted every time; it ends with
// the per-step losses and final weights of an uninterrupted run, bit for bit, each restart an
// event in metrics.jsonl with its cause, rank and lost steps (at most one checkpoint interval, two
// where the newest checkpoint was corrupt), and its goodput in launch.json. Also: a command that is
// wrong (exit 2) is not restarted, restarts run out, and SIGTERM to the supervisor saves the run.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "smelt/ckpt/checkpoint.hpp"
#include "test_files.hpp"
#include "launch_test_util.hpp"
#include "train_test_util.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace smelt;

using test::events;
using test::Fault;
using test::last_step;
using test::ranks_of;
using test::step_lines;

namespace {

const char* kMpirunArgs = "--allow-run-as-root --oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none";

class LaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::fresh_test_dir("smelt_launch");
    const std::string d = SMELT_TEST_DATA;
    test::write_byte_shard((dir_ / "train").string(), {d + "/tokenizer/english.txt", d + "/tokenizer/chinese.txt"});
    test::write_file((dir_ / "run.toml").string(), test::byte_model_toml(32, false) + R"([data]
seq_len = 32
batch_size = 4
eod_id = 256
[train]
steps = 400
threads = 1
peak_gflops = 50
[optim]
lr = 3e-3
warmup_steps = 10
[ckpt]
save_every = 10
keep_last = 3
[dist]
timeout_s = 4
)");
  }
  void TearDown() override {
    if (HasFailure()) std::fprintf(stderr, "kept for a look: %s\n", dir_.c_str());
    else fs::remove_all(dir_);
  }

  std::string train_args(const std::string& run, const std::string& extra = "") const {
    return fmt::format("{} train --config {} --data {} --run-dir {} {}", SMELT_BINARY, (dir_ / "run.toml").string(),
                       (dir_ / "train").string(), (dir_ / run).string(), extra);
  }
  // `smelt launch` in the background; its output in RUN.log.
  pid_t launch(const std::string& run, const std::string& opts, const std::string& extra = "", int np = 2) const {
    const std::string cmd = fmt::format("exec {} launch --np {} --launcher mpirun --launcher-args '{}' {} --json -- {} > {}.json 2> {}.log",
                                        SMELT_BINARY, np, kMpirunArgs, opts, train_args(run, extra),
                                        (dir_ / run).string(), (dir_ / run).string());
    pid_t pid = fork();
    if (pid == 0) {
      execl("/bin/sh", "sh", "-c", cmd.c_str(), (char*)nullptr);
      _exit(127);
    }
    return pid;
  }
  static int wait_exit(pid_t pid, int seconds) {
    int st = 0;
    for (int i = 0; i < seconds * 20; i++) {
      if (waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
  }
  std::string log(const std::string& run) const { return test::read_file((dir_ / (run + ".log")).string()); }
  static std::vector<float> weights(const fs::path& run_dir, const std::string& name) {
    return test::ckpt_weights(run_dir, name);
  }

  fs::path dir_;
};

// Breaks the newest checkpoint's largest file (one byte flipped): its CRC32C no longer matches.
void corrupt_newest(const fs::path& run) {
  std::string latest = test::read_file((run / "checkpoints" / "latest").string());
  while (!latest.empty() && (latest.back() == '\n' || latest.back() == ' ')) latest.pop_back();
  fs::path biggest;
  uintmax_t size = 0;
  for (const auto& e : fs::directory_iterator(run / "checkpoints" / latest))
    if (e.is_regular_file() && e.file_size() > size) size = e.file_size(), biggest = e.path();
  std::fstream f(biggest, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg((std::streamoff)(size / 2));
  char c = 0;
  f.read(&c, 1);
  c ^= 0x5A;
  f.seekp((std::streamoff)(size / 2));
  f.write(&c, 1);
}

}  // namespace

TEST_F(LaunchTest, TenFaultsRestartedEveryTimeEndAsAnUninterruptedRun) {
  ASSERT_EQ(std::system("command -v mpirun > /dev/null 2>&1"), 0) << "mpirun is missing: scripts/install-deps";
  // The reference: the same 2 ranks, never interrupted.
  const std::string ref = fmt::format("mpirun -np 2 {} {} > {} 2>&1", kMpirunArgs, train_args("ref"),
                                      (dir_ / "ref.log").string());
  ASSERT_EQ(std::system(ref.c_str()), 0) << log("ref");
  // Ten faults at seeded random steps, in the order the run reaches them.
  const std::vector<Fault> faults = test::fault_schedule(
      36, {"kill", "stop", "kill", "stall", "kill", "corrupt", "stop", "kill", "kill", "stop"}, 15, 20, 2);
  ASSERT_LT(faults.back().at_step, 390);
  const pid_t sup = launch("run", "--max-restarts 20 --backoff 0.2 --backoff-max 1 --stall-timeout 15 --start-timeout 120 --grace 3");
  std::set<pid_t> hit;  // ranks already faulted (a dying job's ranks are not faulted again)
  size_t next = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(400);
  int st = 0;
  bool ended = false;
  while (!ended && std::chrono::steady_clock::now() < deadline) {
    ended = waitpid(sup, &st, WNOHANG) == sup;
    if (ended || next == faults.size()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    const Fault& f = faults[next];
    std::map<int, pid_t> ranks = ranks_of(dir_ / "run");
    // (a step of this attempt: a job still starting up would wait out --start-timeout)
    if (ranks.size() != 2 || hit.count(ranks[0]) || hit.count(ranks[1]) || test::attempt_step(dir_ / "run") < f.at_step) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      continue;
    }
    if (f.kind == "kill") kill(ranks[f.rank], SIGKILL);
    if (f.kind == "stop") kill(ranks[f.rank], SIGSTOP);
    if (f.kind == "stall") kill(ranks[0], SIGSTOP), kill(ranks[1], SIGSTOP);
    if (f.kind == "corrupt") corrupt_newest(dir_ / "run"), kill(ranks[f.rank], SIGKILL);
    hit.insert(ranks[0]), hit.insert(ranks[1]);
    next++;
  }
  if (!ended) {
    kill(sup, SIGKILL);
    waitpid(sup, &st, 0);
  }
  ASSERT_TRUE(ended && WIFEXITED(st) && WEXITSTATUS(st) == 0) << log("run");
  EXPECT_EQ(next, faults.size()) << "faults injected";
  // Every step's loss, gradient norm and token count, and the final weights: the uninterrupted run's bits.
  const std::vector<json> a = step_lines(dir_ / "ref"), b = step_lines(dir_ / "run");
  ASSERT_EQ(a.size(), 400u);
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); i++) EXPECT_EQ(a[i].dump(), b[i].dump()) << "step " << i + 1;
  for (const char* t : {"lm_head.weight", "model.layers.1.mlp.down_proj.weight", "optim.v.model.norm.weight"})
    EXPECT_EQ(weights(dir_ / "ref", t), weights(dir_ / "run", t)) << t;
  // The restarts: one per fault, each with its cause and rank (a busy machine may add a hang of its
  // own: every injected fault must be there, in order).
  const std::vector<json> rs = events(dir_ / "run", "restart");
  ASSERT_GE(rs.size(), faults.size()) << log("run");
  size_t k = 0;
  for (const json& r : rs) {
    if (k == faults.size()) break;
    const Fault& f = faults[k];
    const std::string want = f.kind == "stop" ? "hang" : f.kind == "stall" ? "stall" : "killed";
    if (r["cause"] != want) continue;
    // (a hang found outside a step's reduction ends the job without a name)
    if (f.kind == "kill" || f.kind == "corrupt" || (f.kind == "stop" && !r["rank"].is_null())) {
      EXPECT_EQ(r["rank"], f.rank) << r.dump();
    }
    // one checkpoint interval (two past a corrupted one), and one more where the fault came while
    // the interval's save was still being written (asynchronous: this model runs a step in ~10 ms,
    // so a save under load can be committed several steps later; measured 15 lost once)
    const int64_t interval = (f.kind == "corrupt" ? 30 : 20) + 3;
    EXPECT_LE(r["steps_lost"].get<int64_t>(), interval) << r.dump();
    // from the newest valid checkpoint: a periodic one, or the save on SIGTERM of ranks the stall's
    // stop woke (they save at the end of their step); none where the first fault came before the
    // first save committed (CI met one at step 20): then from step 0
    if (r["checkpoint"].is_null() && k == 0) {
      EXPECT_EQ(r["step"], 0) << r.dump();
      k++;
      continue;
    }
    ASSERT_TRUE(r["checkpoint"].is_string()) << r.dump();
    EXPECT_NE(r["checkpoint"].get<std::string>().find(fmt::format("step_{:08d}", r["step"].get<int64_t>())),
              std::string::npos) << "resumed from the checkpoint of its step: " << r.dump();
    if (f.kind == "corrupt") {
      EXPECT_TRUE(r.contains("skipped_checkpoints")) << r.dump();
    }
    k++;
  }
  std::string seen;
  for (const json& r : rs) seen += fmt::format("\n  {} rank {} at step {}: {}", r["cause"].dump(), r["rank"].dump(),
                                              r["failed_at_step"].dump(), r["detail"].get<std::string>());
  EXPECT_EQ(k, faults.size()) << "every fault's restart, in order; the restarts:" << seen;
  // The end: goodput in metrics.jsonl and launch.json.
  const std::vector<json> end = events(dir_ / "run", "launch_end");
  ASSERT_EQ(end.size(), 1u);
  EXPECT_EQ(end[0]["outcome"], "completed");
  const json lj = json::parse(test::read_file((dir_ / "run" / "launch.json").string()));
  EXPECT_EQ(lj["restarts"].size(), rs.size());
  const double goodput = lj["goodput"].get<double>();
  EXPECT_GT(goodput, 0.0);
  EXPECT_LT(goodput, 1.0);
  EXPECT_EQ(json::parse(test::read_file((dir_ / "run.json").string()))["goodput"], lj["goodput"]);
  for (const auto& r : lj["restarts"]) EXPECT_GT(r.value("back_training_s", -1.0), 0.0) << r.dump();
  // smelt health reads the same from metrics.jsonl (the run's vital signs may judge it either way).
  int rc = 0;
  const std::string health = test::run_command(std::string(SMELT_BINARY) + " health --json " + (dir_ / "run").string(), rc);
  const json h = json::parse(health, nullptr, false);
  ASSERT_TRUE(h.is_object() && h.contains("restarts")) << health;
  EXPECT_EQ(h["restarts"]["restarts"], rs.size());
  EXPECT_EQ(h["restarts"]["goodput"], lj["goodput"]);
  EXPECT_EQ(h["restarts"]["outcome"], "completed");
  int64_t by_cause = 0;
  for (const auto& [cause, n] : h["restarts"]["by_cause"].items()) by_cause += n.get<int64_t>();
  EXPECT_EQ(by_cause, (int64_t)rs.size());
  const std::string text = test::run_command(std::string(SMELT_BINARY) + " health " + (dir_ / "run").string(), rc);
  EXPECT_NE(text.find(fmt::format("restarts       {} (", rs.size())), std::string::npos) << text;
}

TEST_F(LaunchTest, AWrongCommandIsNotRestartedAndRestartsRunOut) {
  // exit 2 (usage): no restart mends it
  pid_t sup = launch("bad", "--max-restarts 5 --backoff 0", "--set train.no_such_key=1");
  EXPECT_EQ(wait_exit(sup, 60), 1) << log("bad");
  json j = json::parse(test::read_file((dir_ / "bad" / "launch.json").string()));
  EXPECT_EQ(j["attempts"].size(), 1u);
  EXPECT_EQ(j["restarts"].size(), 0u);
  EXPECT_NE(j["outcome"].get<std::string>().find("exit code 2"), std::string::npos) << j.dump();
  // A fault on every attempt (the hang injection fires again after each resume): two restarts, then it gives up.
  sup = launch("hang", "--max-restarts 2 --backoff 0.1", "--set dist.inject_hang_rank=1 --set dist.inject_hang_step=3");
  EXPECT_EQ(wait_exit(sup, 120), 1) << log("hang");
  j = json::parse(test::read_file((dir_ / "hang" / "launch.json").string()));
  EXPECT_EQ(j["attempts"].size(), 3u) << j.dump();
  EXPECT_EQ(j["outcome"], "gave up after 2 restarts");
  for (const auto& r : j["restarts"]) {
    EXPECT_EQ(r["cause"], "hang") << r.dump();
    EXPECT_EQ(r["rank"], 1) << r.dump();
  }
}

TEST_F(LaunchTest, SigtermToTheSupervisorSavesTheRunAndDoesNotRestart) {
  pid_t sup = launch("term", "--backoff 0", "--set train.steps=100000 --set ckpt.save_every=0");
  for (int i = 0; i < 1200 && last_step(dir_ / "term") < 20; i++) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_GE(last_step(dir_ / "term"), 20) << log("term");
  kill(sup, SIGTERM);
  EXPECT_EQ(wait_exit(sup, 120), 0) << log("term");
  json j = json::parse(test::read_file((dir_ / "term" / "launch.json").string()));
  EXPECT_EQ(j["outcome"].get<std::string>().rfind("stopped (saved at step ", 0), 0u) << j.dump();
  EXPECT_EQ(j["attempts"].size(), 1u);
  // the trainer saved on the way down: a valid checkpoint at the step it stopped
  std::string ck;
  ASSERT_TRUE(ckpt_find_latest((dir_ / "term").string(), ck).is_ok());
  CkptManifest m;
  ASSERT_TRUE(ckpt_read_manifest(ck, m).is_ok());
  EXPECT_GE(m.step, 20);
  EXPECT_TRUE(ranks_of(dir_ / "term").empty()) << "no rank is left running";
}

TEST_F(LaunchTest, AHostNotReachedIsLeftOutAndTheRunGoesOnWithTheSameGlobalBatch) {
  // The reference: 4 ranks, 30 steps. The launch: 2 hosts of 2 slots, the second not reachable
  // (its probe fails), so 2 ranks with batch_size 2 x grad_accum 2 instead of 4 x 1.
  const std::string steps = "--set train.steps=30";
  const std::string ref = fmt::format("mpirun -np 4 {} {} > {} 2>&1", kMpirunArgs, train_args("ref4", steps),
                                      (dir_ / "ref4.log").string());
  ASSERT_EQ(std::system(ref.c_str()), 0) << log("ref4");
  pid_t sup = launch("shrunk", "--hosts localhost:2,no-such-host.invalid:2 --min-ranks 2 --probe-timeout 30", steps, 4);
  ASSERT_EQ(wait_exit(sup, 180), 0) << log("shrunk");
  const json lj = json::parse(test::read_file((dir_ / "shrunk" / "launch.json").string()));
  ASSERT_EQ(lj["attempts"].size(), 1u) << lj.dump();
  EXPECT_EQ(lj["attempts"][0]["ranks"], 2) << lj.dump();
  EXPECT_EQ(lj["attempts"][0]["hosts"], json({{"localhost", 2}})) << lj.dump();
  EXPECT_NE(log("shrunk").find("host no-such-host.invalid: a probe exited with status"), std::string::npos) << log("shrunk");
  EXPECT_NE(log("shrunk").find("--set data.batch_size=2 --set train.grad_accum=2"), std::string::npos) << log("shrunk");
  // The same rows each step, summed in another grouping: the losses and weights to fp32 rounding.
  const std::vector<json> a = step_lines(dir_ / "ref4"), b = step_lines(dir_ / "shrunk");
  ASSERT_EQ(a.size(), 30u);
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); i++) {
    EXPECT_NEAR(a[i]["loss"].get<double>(), b[i]["loss"].get<double>(), 1e-4 * a[i]["loss"].get<double>()) << i + 1;
    EXPECT_EQ(a[i]["tokens"], b[i]["tokens"]) << i + 1;
  }
  const std::vector<float> wa = weights(dir_ / "ref4", "lm_head.weight"), wb = weights(dir_ / "shrunk", "lm_head.weight");
  ASSERT_EQ(wa.size(), wb.size());
  for (size_t i = 0; i < wa.size(); i++) ASSERT_NEAR(wa[i], wb[i], 1e-5) << i;
  // Without --min-ranks the run needs all 4: it gives up at once, naming the host and why.
  sup = launch("full", "--hosts localhost:2,no-such-host.invalid:2 --probe-timeout 30", steps, 4);
  EXPECT_EQ(wait_exit(sup, 120), 1) << log("full");
  EXPECT_NE(log("full").find("no-such-host.invalid (a probe exited"), std::string::npos) << log("full");
  EXPECT_NE(log("full").find("--min-ranks 4"), std::string::npos) << log("full");
  EXPECT_FALSE(fs::exists(dir_ / "full" / "metrics.jsonl")) << "nothing was started";
}

TEST(LaunchCli, HostsOptionsAreCheckedAndPlaced) {
  int rc = 0;
  const std::string smelt = SMELT_BINARY, cmd = " -- " + smelt + " train --run-dir /nonexistent/run";
  std::string out = test::run_command(smelt + " launch --launcher mpirun --hosts a:2,b:2 --dry-run" + cmd, rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("mpirun -np 4 --host a:2,b:2 "), std::string::npos) << out;
  out = test::run_command(smelt + " launch --launcher srun --hosts a:2,b:2 --np 2 --dry-run" + cmd, rc);
  EXPECT_NE(out.find("srun --ntasks 2 --kill-on-bad-exit=1 --nodelist=a "), std::string::npos) << out;
  const std::pair<const char*, const char*> bad[] = {
      {"--min-ranks 2", "--min-ranks needs --hosts"},
      {"--hosts a:2 --np 4", "--np 4: the hosts have 2 slots"},
      {"--hosts a:2,b:x", "\"b:x\": expected HOST or HOST:SLOTS"},
      {"--hosts a:2,b:2 --min-ranks 5", "--min-ranks 5 is more than --np 4"},
      {"--hosts a:2 --launcher direct", "--hosts needs a launcher"}};
  for (const auto& [opts, msg] : bad) {
    out = test::run_command(smelt + " launch " + opts + cmd + " 2>&1", rc);
    EXPECT_EQ(WEXITSTATUS(rc), 2) << opts << ": " << out;
    EXPECT_NE(out.find(msg), std::string::npos) << opts << ": " << out;
  }
}
