// The trainer tests' fixture (tests/train/trainer_*_test.cpp): byte-token shards of the English and
// Chinese test texts, a 2-layer byte model's run config with [set] overrides, and the run's
// metrics. Not a test.
#pragma once
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/common/config.hpp"
#include "smelt/dataset/indexed.hpp"
#include "smelt/dataset/lineage.hpp"
#include "smelt/train/schedule.hpp"
#include "smelt/train/train_config.hpp"
#include "smelt/train/trainer.hpp"
#include "test_files.hpp"
#include "train_test_util.hpp"

namespace smelt::test {

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::fresh_test_dir("smelt_trainer");
    const std::string d = SMELT_TEST_DATA;
    test::write_byte_shard((dir_ / "en").string(), {d + "/tokenizer/english.txt", d + "/tokenizer_train/en_coding_style.rst"});
    test::write_byte_shard((dir_ / "zh").string(), {d + "/tokenizer/chinese.txt"});
    test::write_byte_shard((dir_ / "valid").string(), {d + "/tokenizer_train/en_submitting_patches.rst"});
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  TrainConfig config(const std::string& extra = "") {
    std::string text = test::byte_model_toml(64, false) + fmt::format(R"([data]
sources = "en={}:0.7,zh={}:0.3"
seq_len = 64
batch_size = 4
eod_id = 256
prefetch_threads = 1
[train]
run_dir = "{}"
steps = 40
threads = 2
peak_gflops = 50
sparsity_every = 5
[optim]
lr = 1e-2
warmup_steps = 5
[eval]
data = "{}"
every = 20
tokens = 2048
[ckpt]
save_every = 0
)", (dir_ / "en").string(), (dir_ / "zh").string(), (dir_ / "run").string(), (dir_ / "valid").string());
    toml::table root = toml::parse(text);
    std::istringstream sets(extra);
    std::string s;
    while (sets >> s) EXPECT_TRUE(config_apply_set(root, s).is_ok()) << s;
    TrainConfig c;
    Status st = train_config_read(root, c);
    EXPECT_TRUE(st.is_ok()) << st.message();
    return c;
  }

  static std::vector<nlohmann::json> metrics(const std::string& run_dir) { return test::read_metrics(run_dir, true); }
  // The run's time_budget_plan events, in order.
  static std::vector<nlohmann::json> time_budget_plans(const std::string& run_dir) {
    std::vector<nlohmann::json> plans;
    for (const auto& l : metrics(run_dir))
      if (l.contains("event") && l["event"] == "time_budget_plan") plans.push_back(l);
    return plans;
  }
  static nlohmann::json deterministic(nlohmann::json j) { return test::drop_timing(std::move(j)); }
  // Every tensor of checkpoint step folder a is in b with the same bits.
  static void expect_same_tensors(const std::string& a, const std::string& b) {
    CkptManifest ma, mb;
    ASSERT_TRUE(ckpt_read_manifest(a, ma).is_ok());
    ASSERT_TRUE(ckpt_read_manifest(b, mb).is_ok());
    for (const auto& t : ma.tensors) {
      std::vector<float> x(t.bytes / 4), y(t.bytes / 4);
      ASSERT_TRUE(ckpt_load_tensor(a, ma, t.name, x.data(), x.size()).is_ok());
      ASSERT_TRUE(ckpt_load_tensor(b, mb, t.name, y.data(), y.size()).is_ok()) << t.name;
      EXPECT_EQ(x, y) << t.name;
    }
  }

  std::filesystem::path dir_;
};

}  // namespace smelt::test
