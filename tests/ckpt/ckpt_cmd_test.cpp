// `smelt ckpt verify|list` as a user runs them: exit 0 for a valid checkpoint, 1 with the bad file
// and tensor named for a damaged one, list's table and --json with validity, 2 for usage errors.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "smelt/ckpt/checkpoint.hpp"
#include "test_files.hpp"

namespace fs = std::filesystem;
using namespace smelt;

namespace {

struct CmdResult {
  int rc;
  std::string out, err;
};

class CkptCmdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("smelt_ckpt_cmd_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    run_ = (dir_ / "run").string();
    ASSERT_EQ(run("--help").rc, 0) << "`smelt ckpt --help` failed";
  }
  void TearDown() override { fs::remove_all(dir_); }
  CmdResult run(const std::string& args) {
    std::string out = (dir_ / "out.txt").string(), err = (dir_ / "err.txt").string();
    int st = std::system((std::string(SMELT_BINARY) + " ckpt " + args + " > " + out + " 2> " + err).c_str());
    return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, test::read_file(out), test::read_file(err)};
  }
  void save(int64_t step) {
    data_.assign(5000, 0.0f);
    for (size_t i = 0; i < data_.size(); ++i) data_[i] = static_cast<float>(step + i);
    CkptSaveRequest r;
    r.step = step;
    r.config_toml = "[model]\n";
    r.tensors = {{"model.norm.weight", {1000}, data_.data()}, {"model.embed_tokens.weight", {10, 400}, data_.data() + 1000}};
    ASSERT_TRUE(ckpt_save(run_, r).is_ok());
  }
  fs::path dir_;
  std::string run_;
  std::vector<float> data_;
};

bool has(const std::string& s, const std::string& n) { return s.find(n) != std::string::npos; }

}  // namespace

TEST_F(CkptCmdTest, VerifyExitCodesNameTheBadFileAndTensor) {
  save(10);
  save(20);
  std::string d20 = ckpt_step_dir(run_, 20);
  CmdResult ok = run("verify " + d20);
  EXPECT_EQ(ok.rc, 0) << ok.err;
  EXPECT_TRUE(has(ok.out, "valid")) << ok.out;
  CkptManifest m;
  ASSERT_TRUE(ckpt_read_manifest(d20, m).is_ok());
  std::string shard = d20 + "/rank-00000.safetensors", bytes = test::read_file(shard);
  bytes[static_cast<size_t>(m.find("model.embed_tokens.weight")->offset + 100)] ^= 0x10;
  test::write_file(shard, bytes);
  CmdResult bad = run("verify " + d20);
  EXPECT_EQ(bad.rc, 1);
  EXPECT_TRUE(has(bad.err, "rank-00000.safetensors") && has(bad.err, "model.embed_tokens.weight")) << bad.err;

  CmdResult table = run("list " + run_);
  EXPECT_EQ(table.rc, 0);  // step 10 is still valid
  EXPECT_TRUE(has(table.out, "step_00000020") && has(table.out, "NO") && has(table.out, "model.embed_tokens.weight"))
      << table.out;
  EXPECT_TRUE(has(table.out, "step_00000010")) << table.out;
  CmdResult js = run("list --json " + run_);
  ASSERT_EQ(js.rc, 0);
  auto j = nlohmann::json::parse(js.out);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["step"], 20);
  EXPECT_EQ(j[0]["valid"], false);
  EXPECT_EQ(j[0]["latest"], true);
  EXPECT_TRUE(has(j[0]["problem"].get<std::string>(), "CRC32C"));
  EXPECT_EQ(j[1]["step"], 10);
  EXPECT_EQ(j[1]["valid"], true);
  EXPECT_GT(j[1]["bytes"].get<int64_t>(), 5000 * 4);

  fs::remove(ckpt_step_dir(run_, 10) + "/manifest.json");
  EXPECT_EQ(run("list " + run_).rc, 1);  // nothing valid left
  CmdResult gone = run("verify " + ckpt_step_dir(run_, 10));
  EXPECT_EQ(gone.rc, 1);
  EXPECT_TRUE(has(gone.err, "manifest.json")) << gone.err;
}

TEST_F(CkptCmdTest, UsageErrorsExitTwo) {
  EXPECT_EQ(run("").rc, 2);
  EXPECT_EQ(run("frobnicate x").rc, 2);
  EXPECT_EQ(run("verify").rc, 2);
  EXPECT_EQ(run("verify " + (dir_ / "missing").string()).rc, 2);
  EXPECT_EQ(run("list").rc, 2);
  EXPECT_EQ(run("list " + (dir_ / "missing").string()).rc, 2);
  save(1);
  EXPECT_EQ(run("verify " + run_).rc, 2);  // a run folder, not a checkpoint
}
