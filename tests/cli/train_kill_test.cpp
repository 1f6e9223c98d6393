// A real `smelt train` SIGKILLed 24 times at seeded random moments (checkpoints every 2 steps, the
// asynchronous writer on, so kills land mid-step, mid-write, mid-fsync and mid-rename): after every
// kill a valid checkpoint exists and `--resume` goes on from it; at the end the run's metrics equal
// an uninterrupted run's in every field but timing, and its final weights are the same bits.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/dataset/indexed.hpp"
#include "test_files.hpp"
#include "train_test_util.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace smelt;

namespace {

std::vector<json> metrics(const fs::path& run_dir) { return test::read_metrics(run_dir); }

pid_t start(const std::string& args, const fs::path& log) {
  pid_t pid = fork();
  if (pid == 0) {
    const std::string cmd = "exec " + std::string(SMELT_BINARY) + " " + args + " >> " + log.string() + " 2>&1";
    execl("/bin/sh", "sh", "-c", cmd.c_str(), (char*)nullptr);
    _exit(127);
  }
  return pid;
}

TEST(TrainKill, TwentyFourKillsThenResumeEqualsUninterrupted) {
  const fs::path dir = fs::temp_directory_path() / ("smelt_train_kill_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  test::write_byte_shard((dir / "train").string(), {std::string(SMELT_TEST_DATA) + "/tokenizer/english.txt"});
  test::write_file((dir / "run.toml").string(), test::byte_model_toml(32, true) + R"([data]
seq_len = 32
batch_size = 2
eod_id = 256
[train]
steps = 4000
threads = 1
peak_gflops = 50
[optim]
lr = 3e-3
warmup_steps = 10
[ckpt]
save_every = 2
keep_last = 2
async = true
)");
  auto args = [&](const std::string& run) {
    return fmt::format("train --config {} --data {} --run-dir {} --resume", (dir / "run.toml").string(),
                       (dir / "train").string(), (dir / run).string());
  };
  // The uninterrupted reference.
  pid_t ref = start(args("ref"), dir / "ref.log");
  int st = 0;
  waitpid(ref, &st, 0);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << test::read_file((dir / "ref.log").string());

  std::mt19937 rng(20261129);
  const fs::path run = dir / "run";
  int kills = 0, finished_early = 0;
  for (int round = 0; round < 24; round++) {
    pid_t pid = start(args("run"), dir / "run.log");
    // The first round waits for a first checkpoint, so that one exists to resume from.
    if (round == 0)
      for (int i = 0; i < 4000 && !fs::exists(run / "checkpoints" / "latest"); i++)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(20000, 250000)(rng)));
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    if (WIFSIGNALED(st)) kills++;
    else finished_early++;
    std::string latest;
    std::vector<std::string> warnings;
    Status s = ckpt_find_latest(run.string(), latest, &warnings);
    ASSERT_TRUE(s.is_ok()) << "round " << round << ": " << s.message();
    EXPECT_TRUE(ckpt_verify(latest).is_ok()) << latest;
    if (finished_early) break;
  }
  EXPECT_GE(kills, 20) << "the run finished before enough kills; make it longer";
  // Finish, then compare with the reference.
  pid_t last = start(args("run"), dir / "run.log");
  waitpid(last, &st, 0);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << test::read_file((dir / "run.log").string());
  auto want = metrics(dir / "ref"), got = metrics(run);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); i++) EXPECT_EQ(got[i].dump(), want[i].dump()) << "line " << i;
  std::string a, b;
  ASSERT_TRUE(ckpt_find_latest((dir / "ref").string(), a).is_ok());
  ASSERT_TRUE(ckpt_find_latest(run.string(), b).is_ok());
  CkptManifest ma, mb;
  ASSERT_TRUE(ckpt_read_manifest(a, ma).is_ok());
  ASSERT_TRUE(ckpt_read_manifest(b, mb).is_ok());
  EXPECT_EQ(ma.step, 4000);
  EXPECT_EQ(mb.step, 4000);
  for (const auto& t : ma.tensors) {
    std::vector<float> x(t.bytes / 4), y(t.bytes / 4);
    ASSERT_TRUE(ckpt_load_tensor(a, ma, t.name, x.data(), x.size()).is_ok());
    ASSERT_TRUE(ckpt_load_tensor(b, mb, t.name, y.data(), y.size()).is_ok());
    EXPECT_EQ(x, y) << t.name;
  }
  // No half-written step folder is left behind as a checkpoint.
  for (const auto& e : fs::directory_iterator(run / "checkpoints"))
    if (e.is_directory()) {
      EXPECT_TRUE(ckpt_verify(e.path().string()).is_ok() || e.path().extension() == ".tmp") << e.path();
    }
  fs::remove_all(dir);
}

}  // namespace
