// Data-parallel `smelt train` under a real `mpirun --oversubscribe`: 2 and 4 ranks give the same
// losses, gradient norms and final weights, bit for bit, as one process that takes the same global
// batch as 2 or 4 micro-batches (the reduction adds the ranks' gradients in rank order, the trainer
// adds micro-batches in the same order); a checkpoint written by 4 ranks resumes on 2 and on 1;
// a rank killed mid-run ends the whole job (no rank left waiting) and --resume continues.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <set>
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

const char* kMpirun =
    "mpirun --allow-run-as-root --oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none";

std::vector<json> metrics(const fs::path& run_dir) { return test::read_metrics(run_dir); }

class DpTrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::fresh_test_dir("smelt_dp");
    const std::string d = SMELT_TEST_DATA;
    test::write_byte_shard((dir_ / "train").string(), {d + "/tokenizer/english.txt", d + "/tokenizer/chinese.txt"});
    test::write_file((dir_ / "run.toml").string(), test::byte_model_toml(32, false) + R"([data]
seq_len = 32
batch_size = 4
eod_id = 256
[train]
steps = 12
threads = 1
peak_gflops = 50
sparsity_every = 4
[optim]
lr = 3e-3
warmup_steps = 3
[ckpt]
save_every = 4
keep_last = 5
)");
  }
  void TearDown() override { fs::remove_all(dir_); }

  // `smelt train` on `ranks` ranks (0: no mpirun) with this global batch and accumulation.
  int train(int ranks, const std::string& run, const std::string& extra = "", const std::string& config = "run.toml") {
    std::string cmd = fmt::format("{} train --config {} --data {} --run-dir {} {} > {}.log 2>&1", SMELT_BINARY,
                                  (dir_ / config).string(), (dir_ / "train").string(), (dir_ / run).string(),
                                  extra, (dir_ / run).string());
    if (ranks > 0) cmd = fmt::format("{} -np {} {}", kMpirun, ranks, cmd);
    int st = std::system(cmd.c_str());
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }
  std::string log(const std::string& run) { return test::read_file((dir_ / (run + ".log")).string()); }

  static std::vector<float> weights(const fs::path& run_dir, const std::string& name) {
    return test::ckpt_weights(run_dir, name);
  }

  fs::path dir_;
};

bool have_mpirun() { return std::system("command -v mpirun > /dev/null 2>&1") == 0; }

TEST_F(DpTrainTest, TwoAndFourRanksEqualOneProcessBitForBit) {
  ASSERT_TRUE(have_mpirun()) << "mpirun is missing: scripts/install-deps installs openmpi-bin";
  ASSERT_EQ(train(0, "one2", "--set data.batch_size=2 --set train.grad_accum=2"), 0) << log("one2");
  ASSERT_EQ(train(2, "two", "--set data.batch_size=4"), 0) << log("two");
  ASSERT_EQ(train(0, "one4", "--set data.batch_size=1 --set train.grad_accum=4 --threads 2"), 0) << log("one4");
  ASSERT_EQ(train(4, "four"), 0) << log("four");
  // The same without overlapping the reduction with backward (one reduction after it), and with
  // ZeRO-1 (reduce-scatter, sharded AdamW, all-gather of the weights).
  ASSERT_EQ(train(2, "two_serial", "--set data.batch_size=4 --set dist.overlap=false"), 0) << log("two_serial");
  ASSERT_EQ(train(2, "two_zero", "--set data.batch_size=4 --set dist.zero=1"), 0) << log("two_zero");
  ASSERT_EQ(train(4, "four_zero", "--set dist.zero=1 --set dist.bucket_mb=0.05"), 0) << log("four_zero");
  // 2 ranks x 2 rows == 1 process x 2 micro-batches of 2 rows; 4 ranks x 1 row == 1 x 4 x 1.
  for (auto [a, b] : {std::pair{"one2", "two"}, std::pair{"one4", "four"}, std::pair{"one2", "two_serial"},
                      std::pair{"one2", "two_zero"}, std::pair{"one4", "four_zero"}}) {
    auto x = metrics(dir_ / a), y = metrics(dir_ / b);
    ASSERT_EQ(x.size(), 12u) << a;
    ASSERT_EQ(y.size(), 12u) << b;
    for (size_t i = 0; i < x.size(); i++) EXPECT_EQ(x[i].dump(), y[i].dump()) << a << " vs " << b << ", step " << i + 1;
    for (const char* t : {"lm_head.weight", "model.layers.1.mlp.down_proj.weight", "model.embed_tokens.weight"})
      EXPECT_EQ(weights(dir_ / a, t), weights(dir_ / b, t)) << a << " vs " << b << ": " << t;
    if (std::string(b).find("zero") == std::string::npos) {
      EXPECT_EQ(weights(dir_ / a, "optim.v.model.norm.weight"), weights(dir_ / b, "optim.v.model.norm.weight")) << b;
    }
  }
  // With earlier micro-batches (grad_accum = 2) the overlapped buckets add their sum first: the
  // same bits as the serial path, with and without ZeRO-1 (whose serial path reduce-scatters after
  // backward).
  const std::string acc = "--set data.batch_size=4 --set train.grad_accum=2 ";
  ASSERT_EQ(train(2, "acc", acc), 0) << log("acc");
  ASSERT_EQ(train(2, "acc_serial", acc + "--set dist.overlap=false"), 0) << log("acc_serial");
  ASSERT_EQ(train(2, "acc_zero", acc + "--set dist.zero=1 --set dist.bucket_mb=0.05"), 0) << log("acc_zero");
  ASSERT_EQ(train(2, "acc_zero_serial", acc + "--set dist.zero=1 --set dist.overlap=false"), 0) << log("acc_zero_serial");
  for (const char* run : {"acc_serial", "acc_zero", "acc_zero_serial"}) {
    auto x = metrics(dir_ / "acc"), y = metrics(dir_ / run);
    ASSERT_EQ(x.size(), y.size()) << run;
    for (size_t i = 0; i < x.size(); i++) EXPECT_EQ(x[i].dump(), y[i].dump()) << run << ", step " << i + 1;
    EXPECT_EQ(weights(dir_ / "acc", "lm_head.weight"), weights(dir_ / run, "lm_head.weight")) << run;
  }
  // dist.deterministic = false: the MPI library's own all-reduce, equal to fp32 rounding.
  ASSERT_EQ(train(4, "four_native", "--set dist.deterministic=false"), 0) << log("four_native");
  auto x = metrics(dir_ / "one4"), y = metrics(dir_ / "four_native");
  ASSERT_EQ(y.size(), x.size());
  for (size_t i = 0; i < x.size(); i++)
    EXPECT_NEAR(x[i]["loss"].get<double>(), y[i]["loss"].get<double>(), 1e-5) << "step " << i + 1;
  // Overlap: backward handed the gradient over in buckets as its layers finished (the 0.05 MB
  // buckets split this 0.5 MB gradient into several; the 4 MB default takes it in one), and the
  // time the step waited is reported apart from the communication time.
  auto four_zero = test::read_metrics(dir_ / "four_zero", true), two = test::read_metrics(dir_ / "two", true);
  EXPECT_EQ(four_zero[0]["allreduce_buckets"].get<int>(), 4);  // head, norm + layer 1, layer 0, embedding
  EXPECT_EQ(two[0]["allreduce_buckets"].get<int>(), 1);
  for (const auto& j : four_zero) EXPECT_GT(j["allreduce_ms"].get<double>(), 0.0);
  for (const auto& j : test::read_metrics(dir_ / "two_serial", true))
    EXPECT_EQ(j["allreduce_wait_ms"].get<double>(), j["allreduce_ms"].get<double>());
  // The reduction is reported; the loss fell.
  std::istringstream in(test::read_file((dir_ / "four" / "metrics.jsonl").string()));
  std::string line;
  std::getline(in, line);
  json first = json::parse(line);
  EXPECT_GT(first["allreduce_bytes"].get<uint64_t>(), 0u);
  EXPECT_TRUE(first.contains("allreduce_wait_ms"));
  auto f = metrics(dir_ / "four");
  EXPECT_LT(f.back()["loss"].get<double>(), f.front()["loss"].get<double>());
  // Only rank 0 writes: one summary on stderr.
  const std::string l = log("four");
  EXPECT_EQ(l.find("train "), l.rfind("train ")) << l;
}

// Hierarchical all-reduce on emulated nodes: one rank per node or one node of four gives the flat
// reduction's bits; two nodes of two sum each node first (((g0+g1)+(g2+g3)) instead of
// ((g0+g1)+g2)+g3): the same numbers to fp32 rounding, and deterministic run to run.
TEST_F(DpTrainTest, HierarchicalEqualsFlat) {
  ASSERT_TRUE(have_mpirun());
  ASSERT_EQ(train(4, "flat"), 0) << log("flat");
  for (int rpn : {1, 4, 2}) {
    const std::string name = "h" + std::to_string(rpn);
    ASSERT_EQ(train(4, name, fmt::format("--set dist.allreduce=\\\"hierarchical\\\" --set dist.ranks_per_node={}", rpn)),
              0)
        << log(name);
    json sum = json::parse(test::read_file((dir_ / name / "summary.json").string()));
    EXPECT_EQ(sum["timing"]["allreduce"], "hierarchical");
    EXPECT_EQ(sum["timing"]["nodes"], 4 / rpn);
    auto x = metrics(dir_ / "flat"), y = metrics(dir_ / name);
    ASSERT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size(); i++) {
      if (rpn != 2) {
        EXPECT_EQ(x[i].dump(), y[i].dump()) << name << " step " << i + 1;
      } else {
        EXPECT_NEAR(x[i]["loss"].get<double>(), y[i]["loss"].get<double>(), 1e-5) << name << " step " << i + 1;
        EXPECT_NEAR(x[i]["grad_norm"].get<double>(), y[i]["grad_norm"].get<double>(),
                    1e-4 * x[i]["grad_norm"].get<double>()) << name << " step " << i + 1;
      }
    }
  }
  ASSERT_EQ(train(4, "h2b", "--set dist.allreduce=\\\"hierarchical\\\" --set dist.ranks_per_node=2"), 0) << log("h2b");
  auto a = metrics(dir_ / "h2"), b = metrics(dir_ / "h2b");
  for (size_t i = 0; i < a.size(); i++) EXPECT_EQ(a[i].dump(), b[i].dump()) << "step " << i + 1;
  // A node size that does not divide the ranks is refused, naming the key.
  EXPECT_NE(train(4, "bad", "--set dist.allreduce=\\\"hierarchical\\\" --set dist.ranks_per_node=3"), 0);
  EXPECT_NE(log("bad").find("ranks_per_node = 3"), std::string::npos) << log("bad");
}

TEST_F(DpTrainTest, CheckpointOfFourRanksResumesOnTwoAndOne) {
  ASSERT_TRUE(have_mpirun());
  ASSERT_EQ(train(4, "four"), 0) << log("four");
  auto want = metrics(dir_ / "four");
  for (auto [ranks, name, extra] : {std::tuple{2, "on2", "--set train.grad_accum=1"}, std::tuple{0, "on1", ""}}) {
    fs::copy(dir_ / "four", dir_ / name, fs::copy_options::recursive);
    for (const char* s : {"step_00000008", "step_00000012"}) fs::remove_all(dir_ / name / "checkpoints" / s);
    ASSERT_EQ(train(ranks, name, std::string("--resume ") + extra), 0) << log(name);
    EXPECT_NE(log(name).find("resuming from"), std::string::npos) << log(name);
    auto got = metrics(dir_ / name);
    ASSERT_EQ(got.size(), want.size()) << name;
    // Steps 1-4 are the 4-rank run's; from step 5 the same data in the same order (the loader
    // position does not depend on the rank count), summed in another association: fp32 rounding.
    for (size_t i = 0; i < 4; i++) EXPECT_EQ(got[i].dump(), want[i].dump()) << name << " " << i;
    for (size_t i = 4; i < want.size(); i++) {
      EXPECT_EQ(got[i]["tokens"], want[i]["tokens"]) << name << " step " << i + 1;
      EXPECT_NEAR(got[i]["loss"].get<double>(), want[i]["loss"].get<double>(), 1e-4) << name << " step " << i + 1;
    }
  }
}

// ZeRO-1: the AdamW moments sharded over 4 ranks. The memory plan's optimizer state shrinks to the
// largest shard (8 of the 31 gradient-norm blocks: 26% here); each rank writes its shard into the
// checkpoint (the boxes of the full tensors its range covers); resuming the sharded state on 4 ranks
// gives the uninterrupted run's metrics bit for bit; the sharded checkpoint resumes unsharded on 2
// ranks and an unsharded one resumes sharded (other association of the sums: fp32 rounding).
TEST_F(DpTrainTest, ZeroOneShardsTheOptimizerStateAndResumes) {
  ASSERT_TRUE(have_mpirun());
  ASSERT_EQ(train(4, "plain"), 0) << log("plain");
  ASSERT_EQ(train(4, "zero", "--set dist.zero=1"), 0) << log("zero");
  auto plan = [&](const char* run) {
    return json::parse(test::read_file((dir_ / run / "summary.json").string()))["timing"]["memory_plan"];
  };
  const double full = plan("plain")["optimizer_bytes"].get<double>(), shard = plan("zero")["optimizer_bytes"].get<double>();
  EXPECT_EQ(full, 125760.0 * 8);
  EXPECT_EQ(shard, 8 * 4096.0 * 8);  // the largest shard: 8 blocks of 4096 floats, m and v
  EXPECT_EQ(plan("zero")["param_bytes"], plan("plain")["param_bytes"]);
  EXPECT_NE(log("zero").find("ZeRO-1: AdamW moments sharded over 4 ranks"), std::string::npos) << log("zero");
  std::string latest;
  ASSERT_TRUE(ckpt_find_latest((dir_ / "zero").string(), latest).is_ok());
  CkptManifest m;
  ASSERT_TRUE(ckpt_read_manifest(latest, m).is_ok());
  EXPECT_EQ(m.ranks, 4);
  // Each rank's range of the moments, as boxes of the full tensors in its own file: together they
  // hold every moment once, and a tensor a range boundary cuts is stored as pieces ("name[r0:r1,...]").
  std::set<std::string> files;
  int64_t held = 0;
  bool cut = false;
  for (const auto& t : m.tensors)
    if (t.name.rfind("optim.v.", 0) == 0) {
      files.insert(t.file);
      held += t.bytes / 4;
      cut = cut || t.name.find('[') != std::string::npos;
    }
  EXPECT_EQ(files.size(), 4u);
  EXPECT_EQ(held, 125760);
  EXPECT_TRUE(cut);

  auto want = metrics(dir_ / "zero");
  auto resume = [&](const char* from, const char* name, int ranks, const std::string& extra) {
    fs::copy(dir_ / from, dir_ / name, fs::copy_options::recursive);
    for (const char* st : {"step_00000008", "step_00000012"}) fs::remove_all(dir_ / name / "checkpoints" / st);
    EXPECT_EQ(train(ranks, name, "--resume " + extra), 0) << log(name);
    EXPECT_NE(log(name).find("resuming from"), std::string::npos) << log(name);
    return metrics(dir_ / name);
  };
  auto same = resume("zero", "zero_again", 4, "--set dist.zero=1");
  ASSERT_EQ(same.size(), want.size());
  for (size_t i = 0; i < want.size(); i++) EXPECT_EQ(same[i].dump(), want[i].dump()) << "step " << i + 1;
  for (auto [from, name, ranks, extra] : {std::tuple{"zero", "unsharded2", 2, ""},
                                          std::tuple{"plain", "sharded2", 2, "--set dist.zero=1"}}) {
    auto got = resume(from, name, ranks, extra);
    auto ref = metrics(dir_ / from);
    ASSERT_EQ(got.size(), ref.size()) << name;
    for (size_t i = 4; i < ref.size(); i++) {
      EXPECT_EQ(got[i]["tokens"], ref[i]["tokens"]) << name << " step " << i + 1;
      EXPECT_NEAR(got[i]["loss"].get<double>(), ref[i]["loss"].get<double>(), 1e-4) << name << " step " << i + 1;
    }
  }
  // ZeRO with the hierarchical reduction or top-k is refused, naming the keys.
  EXPECT_NE(train(2, "bad", "--set dist.zero=1 --set dist.allreduce=\\\"hierarchical\\\""), 0);
  EXPECT_NE(log("bad").find("zero = 1"), std::string::npos) << log("bad");
}

// Top-k keeps rank-local state (each rank's unsent residual and, with momentum correction, its
// velocity): every rank writes it into the checkpoint, and a resume on the same rank count
// continues bit for bit.
TEST_F(DpTrainTest, TopkResidualAndMomentumResumeBitForBit) {
  ASSERT_TRUE(have_mpirun());
  const std::string topk =
      "--set dist.compression.type=\\\"topk\\\" --set dist.compression.ratio=0.05 --set dist.compression.momentum=0.9";
  ASSERT_EQ(train(2, "topk", topk), 0) << log("topk");
  std::string latest;
  ASSERT_TRUE(ckpt_find_latest((dir_ / "topk").string(), latest).is_ok());
  CkptManifest m;
  ASSERT_TRUE(ckpt_read_manifest(latest, m).is_ok());
  for (const char* t : {"topk.residual.0", "topk.residual.1", "topk.velocity.0", "topk.velocity.1"})
    EXPECT_NE(m.find(t), nullptr) << t;
  fs::copy(dir_ / "topk", dir_ / "again", fs::copy_options::recursive);
  for (const char* st : {"step_00000008", "step_00000012"}) fs::remove_all(dir_ / "again" / "checkpoints" / st);
  ASSERT_EQ(train(2, "again", "--resume " + topk), 0) << log("again");
  auto a = metrics(dir_ / "topk"), b = metrics(dir_ / "again");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); i++) EXPECT_EQ(a[i].dump(), b[i].dump()) << "step " << i + 1;
  EXPECT_LT(a.back()["loss"].get<double>(), a.front()["loss"].get<double>());
}

TEST_F(DpTrainTest, AKilledRankEndsTheJobAndResumeContinues) {
  ASSERT_TRUE(have_mpirun());
  const std::string cmd = fmt::format("exec {} -np 2 {} train --config {} --data {} --run-dir {} --steps 100000 "
                                      "--save-every 20 > {} 2>&1",
                                      kMpirun, SMELT_BINARY, (dir_ / "run.toml").string(), (dir_ / "train").string(),
                                      (dir_ / "run").string(), (dir_ / "run.log").string());
  // (a `smelt` process of this job other than rank 0's is as good as any: the newest)
  const test::KilledJob k = test::kill_a_rank(cmd, dir_ / "run", SMELT_BINARY, (dir_ / "run.toml").string());
  ASSERT_GE(k.rank, 0) << "no rank to kill: " << log("run");
  // The job ends by itself (mpirun tears the other rank down) well within a minute.
  ASSERT_TRUE(k.ended) << "the job kept waiting after a rank died";
  EXPECT_FALSE(WIFEXITED(k.status) && WEXITSTATUS(k.status) == 0) << log("run");
  // Relaunch with --resume: it continues from the last checkpoint.
  std::string latest;
  ASSERT_TRUE(ckpt_find_latest((dir_ / "run").string(), latest).is_ok());
  CkptManifest m;
  ASSERT_TRUE(ckpt_read_manifest(latest, m).is_ok());
  ASSERT_EQ(train(2, "run", fmt::format("--resume --steps {}", m.step + 6)), 0) << log("run");
  EXPECT_NE(log("run").find("resuming from " + latest), std::string::npos) << log("run");
  auto got = metrics(dir_ / "run");
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got.back()["step"], m.step + 6);
}

// Top-k compression with error feedback (ratio 0.01, warming up from 1 over 40 steps): each rank
// sends about 1% of its entries (12 bytes each: 3% of the dense bytes), runs are deterministic, and
// the model still trains. The 2%-of-dense target is measured on the demo corpus (bench/RESULTS.md
// "dist": +0.1% with a 30-step warmup); on this 125 k-parameter byte model, where 1% is ~1,250
// entries, top-k ends 5.8-6.2% above dense after 120 steps over three data orders, so the test
// bounds the mean gap at 10% and prints it.
TEST_F(DpTrainTest, TopkCompressionSendsOnePercentAndTrains) {
  ASSERT_TRUE(have_mpirun());
  const std::string topk =
      "--set dist.compression.type=\\\"topk\\\" --set dist.compression.ratio=0.01 --set dist.compression.warmup_steps=40 "
      "--set dist.compression.momentum=0";  // the warmup alone, as measured above
  double gap_sum = 0;
  for (int seed : {1, 2, 3}) {
    const std::string d = "dense" + std::to_string(seed), t = "topk" + std::to_string(seed);
    ASSERT_EQ(train(2, d, fmt::format("--steps 120 --seed {}", seed)), 0) << log(d);
    ASSERT_EQ(train(2, t, fmt::format("--steps 120 --seed {} {}", seed, topk)), 0) << log(t);
    auto x = metrics(dir_ / d), y = metrics(dir_ / t);
    ASSERT_EQ(x.size(), 120u);
    ASSERT_EQ(y.size(), 120u);
    double ld = 0, lt = 0;
    for (int i = 110; i < 120; i++) ld += x[i]["loss"].get<double>() / 10, lt += y[i]["loss"].get<double>() / 10;
    std::printf("seed %d, last-10 mean loss: dense %.4f, top-k %.4f (%+.2f%%)\n", seed, ld, lt, 100 * (lt - ld) / ld);
    gap_sum += (lt - ld) / ld;
    EXPECT_LT(lt, y[0]["loss"].get<double>() - 1.0) << "top-k did not train";
    auto rd = test::read_metrics(dir_ / d, true), rt = test::read_metrics(dir_ / t, true);
    const double bd = rd.back()["allreduce_bytes"].get<double>(), bt = rt.back()["allreduce_bytes"].get<double>();
    EXPECT_NEAR(bt / bd, 0.03, 0.005) << bt << " vs " << bd;
    EXPECT_GT(rt.front()["allreduce_bytes"].get<double>(), 0.9 * bd);  // step 1 of the warmup sends everything
  }
  std::printf("mean gap over three data orders: %+.2f%%\n", 100 * gap_sum / 3);
  EXPECT_LT(std::abs(gap_sum / 3), 0.10);
  // Deterministic: the same run again gives the same bits.
  ASSERT_EQ(train(2, "topk1b", fmt::format("--steps 120 --seed 1 {}", topk)), 0);
  auto a = metrics(dir_ / "topk1"), b = metrics(dir_ / "topk1b");
  for (size_t i = 0; i < a.size(); i++) EXPECT_EQ(a[i].dump(), b[i].dump()) << "step " << i + 1;
}

// What a new user gets: `dist.compression = { type = "topk", ratio = 0.01 }` and nothing else (the
// defaults: a 30-step warmup and momentum 0.9, docs/dist.md) on the 12-step 2-rank run ends within
// 2% of the dense run's loss (mean of the last 4 steps), and still sends less than dense. Measured
// 2026-12-01: +0.0%; the old defaults (warmup_steps = 0, momentum = 0) gave +7-9% here. Both runs
// on one GEMM engine: `auto` picks from a per-machine cache that other runs update, and a switch
// between the two runs would move the dense curve by more than the bound.
TEST_F(DpTrainTest, TopkWithTheDefaultsEndsWithinTwoPercentOfDense) {
  ASSERT_TRUE(have_mpirun());
  test::write_file((dir_ / "topk.toml").string(), test::read_file((dir_ / "run.toml").string()) +
                                                      "[dist]\ncompression = { type = \"topk\", ratio = 0.01 }\n");
  const std::string gemm = "--set train.gemm=\\\"openblas\\\"";
  ASSERT_EQ(train(2, "dense", gemm), 0) << log("dense");
  ASSERT_EQ(train(2, "topk", gemm, "topk.toml"), 0) << log("topk");
  auto x = metrics(dir_ / "dense"), y = metrics(dir_ / "topk");
  ASSERT_EQ(x.size(), 12u);
  ASSERT_EQ(y.size(), 12u);
  double ld = 0, lt = 0;
  for (int i = 8; i < 12; i++) ld += x[i]["loss"].get<double>() / 4, lt += y[i]["loss"].get<double>() / 4;
  std::printf("last-4 mean loss: dense %.4f, top-k with the defaults %.4f (%+.2f%%)\n", ld, lt, 100 * (lt - ld) / ld);
  EXPECT_LT(std::abs(lt - ld) / ld, 0.02);
  auto last_bytes = [](const std::vector<json>& lines) {  // the last step line's bytes (events carry none)
    for (auto it = lines.rbegin(); it != lines.rend(); ++it)
      if (it->contains("allreduce_bytes")) return (*it)["allreduce_bytes"].get<double>();
    return -1.0;
  };
  const double bd = last_bytes(test::read_metrics(dir_ / "dense", true)), bt = last_bytes(test::read_metrics(dir_ / "topk", true));
  EXPECT_GT(bt, 0);
  EXPECT_LT(bt, bd);  // step 12 of the 30-step warmup: about 18% of the entries
  const std::string resolved = test::read_file((dir_ / "topk" / "config.toml").string());
  EXPECT_NE(resolved.find("warmup_steps = 30"), std::string::npos) << resolved;
}

// A rank that hangs (fault injection: rank 1 stops responding at step 3) must not leave the others
// waiting forever: past [dist] timeout_s the job ends, and rank 0 names the rank that never arrived
// (every rank tells rank 0 when it reaches a step's reduction). Then with rank 0 as the hung one:
// rank 1 names it.
TEST_F(DpTrainTest, AHungRankEndsTheJobAfterTheTimeout) {
  ASSERT_TRUE(have_mpirun());
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = train(2, "hang", "--set dist.timeout_s=3 --set dist.inject_hang_rank=1 --set dist.inject_hang_step=3");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(rc, 0) << log("hang");
  EXPECT_LT(s, 60.0);
  EXPECT_NE(log("hang").find("rank 0 of 2"), std::string::npos) << log("hang");
  EXPECT_NE(log("hang").find("rank 1 (host "), std::string::npos) << log("hang");
  EXPECT_NE(log("hang").find("never reached step 3's gradient reduction"), std::string::npos) << log("hang");
  auto m = metrics(dir_ / "hang");
  ASSERT_EQ(m.size(), 2u);  // steps 1 and 2 finished
  // Rank 0 hangs: rank 1 names it.
  EXPECT_NE(train(2, "hang0", "--set dist.timeout_s=3 --set dist.inject_hang_rank=0 --set dist.inject_hang_step=3"), 0);
  EXPECT_NE(log("hang0").find("rank 1 of 2"), std::string::npos) << log("hang0");
  EXPECT_NE(log("hang0").find("rank 0 (host "), std::string::npos) << log("hang0");
  EXPECT_NE(log("hang0").find("never reached step 3's gradient reduction"), std::string::npos) << log("hang0");
}

}  // namespace
