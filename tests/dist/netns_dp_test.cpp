// Data-parallel `smelt train` across two "hosts" made of network namespaces (tests/netns_hosts.hpp):
// 4 ranks as 2 hosts x 2 ranks, the ranks of different hosts over real TCP. With
// `[dist] allreduce = "hierarchical"` and no ranks_per_node, MPI_Comm_split_type(SHARED) finds the
// 2 hosts as 2 nodes of 2 (summary.json says so), and the run matches 4 ranks on one host with the
// flat reduction to fp32 rounding, not bit for bit: the hierarchical sum is ((g0+g1)+(g2+g3)), the
// flat one ((g0+g1)+g2)+g3 (docs/dist.md). Measured here: losses 1.2e-7 apart at most, final
// weights 1e-7; other data orders gave up to 1.7e-5 in rarely seen embedding rows (AdamW scales
// their small gradients up), hence the weights' 1e-4 bound. The same hierarchical run again, with
// host 2's link slowed to 20 Mbit/s, gives the same bits. Skipped where namespaces cannot be made (not root, no iproute2, a container
// without the rights). One GEMM engine for every run: `auto` picks from a per-machine cache that
// other runs update.
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "netns_hosts.hpp"
#include "smelt/ckpt/checkpoint.hpp"
#include "test_files.hpp"
#include "train_test_util.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace smelt;

namespace {

class NetnsDpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!test::netns_available(why)) GTEST_SKIP() << why;
    if (std::system("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun";
    dir_ = test::fresh_test_dir("smelt_netns_dp");
    ASSERT_TRUE(hosts_.create(2, dir_, why)) << why;
    const std::string d = SMELT_TEST_DATA;
    test::write_byte_shard((dir_ / "train").string(), {d + "/tokenizer/english.txt", d + "/tokenizer/chinese.txt"});
    test::write_file((dir_ / "run.toml").string(), test::byte_model_toml(32, false) + R"([data]
seq_len = 32
batch_size = 4
eod_id = 256
[train]
steps = 8
threads = 1
gemm = "openblas"
[optim]
lr = 3e-3
warmup_steps = 3
)");
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // `smelt train` on 4 ranks under `mpirun` (a command up to the program); its exit code. The data
  // source is named ("text=") so its order does not follow this folder's name (a pid in it).
  int train(const std::string& mpirun, const std::string& run, const std::string& extra = "") {
    const std::string cmd = fmt::format("timeout 120 {} -np 4 {} train --config {} --data text={} --run-dir {} {} > {}.log 2>&1",
                                        mpirun, SMELT_BINARY, (dir_ / "run.toml").string(), (dir_ / "train").string(),
                                        (dir_ / run).string(), extra, (dir_ / run).string());
    const int st = std::system(cmd.c_str());
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }
  std::string log(const std::string& run) { return test::read_file((dir_ / (run + ".log")).string()); }
  json timing(const std::string& run) {
    return json::parse(test::read_file((dir_ / run / "summary.json").string()))["timing"];
  }
  std::vector<float> weights(const std::string& run, const std::string& name) {
    return test::ckpt_weights(dir_ / run, name);
  }

  fs::path dir_;
  test::NetnsHosts hosts_;
};

TEST_F(NetnsDpTest, HierarchicalAcrossTwoHostsMatchesFlatOnOne) {
  const std::string hier = "--set dist.allreduce=\\\"hierarchical\\\"";
  ASSERT_EQ(train(test::kMpirun, "flat"), 0) << log("flat");
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(train(hosts_.mpirun(2), "hier", hier), 0) << log("hier");
  std::printf("4 ranks on 2 namespace hosts: %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  // Again with host 2's link slowed to 20 Mbit/s both ways (a token bucket): slower, the same bits.
  ASSERT_TRUE(hosts_.slow(2, "20mbit"));
  const auto t1 = std::chrono::steady_clock::now();
  ASSERT_EQ(train(hosts_.mpirun(2), "hier2", hier), 0) << log("hier2");
  std::printf("the same with host 2 at 20 Mbit/s: %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count());
  // The ranks sharing memory are the ranks of one namespace host: 2 nodes of 2.
  EXPECT_EQ(timing("flat")["allreduce"], "flat");
  EXPECT_EQ(timing("hier")["allreduce"], "hierarchical");
  EXPECT_EQ(timing("hier")["nodes"], 2);
  auto x = test::read_metrics(dir_ / "flat"), y = test::read_metrics(dir_ / "hier"), z = test::read_metrics(dir_ / "hier2");
  ASSERT_EQ(x.size(), 8u);
  ASSERT_EQ(y.size(), x.size());
  ASSERT_EQ(z.size(), x.size());
  double loss_gap = 0;
  for (size_t i = 0; i < x.size(); i++) {
    loss_gap = std::max(loss_gap, std::abs(x[i]["loss"].get<double>() - y[i]["loss"].get<double>()));
    EXPECT_EQ(x[i]["tokens"], y[i]["tokens"]) << "step " << i + 1;
    EXPECT_NEAR(x[i]["loss"].get<double>(), y[i]["loss"].get<double>(), 1e-5) << "step " << i + 1;
    EXPECT_NEAR(x[i]["grad_norm"].get<double>(), y[i]["grad_norm"].get<double>(), 1e-4 * x[i]["grad_norm"].get<double>())
        << "step " << i + 1;
    EXPECT_EQ(y[i].dump(), z[i].dump()) << "hierarchical run to run, step " << i + 1;
  }
  std::printf("largest loss difference flat vs hierarchical: %.3g\n", loss_gap);
  for (const char* t : {"lm_head.weight", "model.layers.1.mlp.down_proj.weight", "model.embed_tokens.weight"}) {
    const auto a = weights("flat", t), b = weights("hier", t);
    ASSERT_EQ(a.size(), b.size()) << t;
    float worst = 0;
    for (size_t i = 0; i < a.size(); i++) worst = std::max(worst, std::abs(a[i] - b[i]));
    std::printf("%s: largest difference flat vs hierarchical %.3g\n", t, worst);
    EXPECT_LT(worst, 1e-4f) << t;
    EXPECT_EQ(b, weights("hier2", t)) << t;
  }
}

}  // namespace
