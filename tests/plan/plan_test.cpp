// smelt plan: the cluster file (round trip, errors that name the key), the cost model's memory as
// the trainer's own plan, its refusals, its 1F1B simulation against the formula, the search. The
// validation against real runs is plan_validation_test.cpp.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "smelt/model/params.hpp"
#include "smelt/model/shard.hpp"
#include "smelt/plan/calibrate.hpp"
#include "smelt/plan/cluster.hpp"
#include "smelt/plan/cost.hpp"
#include "smelt/train/pipeline.hpp"
#include "smelt/train/run_memory.hpp"
#include "test_files.hpp"
#include "train_test_util.hpp"
#include "test_references.hpp"

namespace smelt {
namespace {

namespace fs = std::filesystem;

ClusterSpec sample_cluster() {
  ClusterSpec c;
  c.name = "two boxes";
  c.source = "a test";
  c.nodes = 2, c.devices_per_node = 4, c.cores_per_node = 0, c.threads_per_rank = 1;
  c.memory_gb = 16;
  c.fp32_gflops = 1000, c.bf16_gflops = 4000, c.attention_gflops = 500, c.elementwise_gb_s = 100, c.memory_gb_s = 120;
  c.intra_gb_s = 50, c.intra_latency_us = 2, c.inter_gb_s = 10, c.inter_latency_us = 5;
  c.disk_write_mb_s = 800, c.process_mb = 100, c.mpi_process_mb = 120;
  return c;
}

ModelConfig small_model() {
  ModelConfig m;
  m.vocab_size = 1024, m.d_model = 128, m.n_layers = 4, m.n_heads = 4, m.n_kv_heads = 4, m.ffn_hidden = 352;
  m.max_seq_len = 128;
  return m;
}

TEST(PlanCluster, TomlRoundTripsEveryField) {
  ClusterSpec c = sample_cluster();
  c.gemm.push_back({512, 128, 384, Precision::kFp32, 87.5});
  c.gemm.push_back({512, 128, 384, Precision::kBf16, 301.25});
  c.allreduce.push_back({2, {4096, 65536}, {1e-5, 4e-5}});
  c.allreduce.push_back({4, {4096, 65536}, {2e-5, 9e-5}});
  c.p2p = {2, {4096, 65536}, {3e-6, 2e-5}};
  c.sync.push_back({2, {5e-4, 8e-3}, {1e-5, 6e-5}});
  ClusterSpec back;
  ASSERT_TRUE(cluster_parse(cluster_toml(c), "x.toml", back).is_ok());
  EXPECT_EQ(back.name, c.name);
  EXPECT_EQ(back.source, c.source);
  EXPECT_EQ(back.nodes, 2);
  EXPECT_EQ(back.devices(), 8);
  EXPECT_DOUBLE_EQ(back.memory_gb, 16);
  EXPECT_DOUBLE_EQ(back.inter_latency_us, 5);
  EXPECT_DOUBLE_EQ(back.mpi_process_mb, 120);
  ASSERT_EQ(back.gemm.size(), 2u);
  EXPECT_EQ(back.gemm[1].precision, Precision::kBf16);
  EXPECT_DOUBLE_EQ(back.gemm[1].gflops, 301.25);
  ASSERT_EQ(back.allreduce.size(), 2u);
  EXPECT_EQ(back.allreduce[1].ranks, 4);
  EXPECT_DOUBLE_EQ(back.allreduce[1].seconds[1], 9e-5);
  EXPECT_DOUBLE_EQ(back.p2p.bytes[1], 65536);
  ASSERT_EQ(back.sync.size(), 1u);
  EXPECT_EQ(back.sync[0].ranks, 2);
  EXPECT_DOUBLE_EQ(back.sync[0].bytes[1], 8e-3);
  EXPECT_DOUBLE_EQ(back.sync[0].seconds[1], 6e-5);
}

TEST(PlanCluster, BadFilesNameTheKeyAndWhatWasExpected) {
  const std::string good = cluster_toml(sample_cluster());
  ClusterSpec c;
  Status s = cluster_parse(good + "\n[cluster2]\nx = 1\n", "bad.toml", c);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("bad.toml"), std::string::npos);
  EXPECT_NE(s.message().find("[cluster2]: unknown table"), std::string::npos) << s.message();
  std::string typo = good;
  typo.replace(typo.find("memory_gb ="), 11, "memory_gib =");
  s = cluster_parse(typo, "typo.toml", c);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("memory_gib: unknown key"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("memory_gb = 0: must be > 0 (the memory per device"), std::string::npos) << s.message();
  s = cluster_parse(good + "\n[[allreduce]]\nranks = 2\nbytes = [1, 2]\nseconds = [1]\n", "curve.toml", c);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("allreduce[0]: bytes has 2 values and seconds 1"), std::string::npos) << s.message();
  s = cluster_parse(good + "\n[[sync]]\nranks = 2\nsegment_s = [0.002, 0.001]\nwait_s = [1e-5, 2e-5]\n", "sync.toml", c);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("sync[0]: segment_s must increase (point 1)"), std::string::npos) << s.message();
  s = cluster_parse("[cluster\n", "syntax.toml", c);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("syntax.toml line 1"), std::string::npos) << s.message();
}

TEST(PlanCluster, CurvesInterpolateAndExtrapolate) {
  CommCurve c{2, {1000, 2000, 4000}, {1.0, 2.0, 3.0}};
  EXPECT_DOUBLE_EQ(c.at(1500), 1.5);
  EXPECT_DOUBLE_EQ(c.at(3000), 2.5);
  EXPECT_DOUBLE_EQ(c.at(8000), 5.0);  // the last segment's line
  EXPECT_DOUBLE_EQ(c.at(10), 1.0);    // never below the smallest message's time
}

TEST(PlanLayout, NamesParseBack) {
  Layout l;
  ASSERT_TRUE(layout_parse("dp2-tp4-pp8-z1-rc1-mb16", l).is_ok());
  EXPECT_EQ(l.dp, 2);
  EXPECT_EQ(l.tp, 4);
  EXPECT_EQ(l.pp, 8);
  EXPECT_TRUE(l.zero);
  EXPECT_TRUE(l.recompute);
  EXPECT_EQ(l.micro, 16);
  EXPECT_EQ(l.name(), "dp2-tp4-pp8-z1-rc1-mb16");
  Status s = layout_parse("dp2-xx3", l);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("unknown part 'xx'"), std::string::npos) << s.message();
  EXPECT_FALSE(layout_parse("dp-tp2", l).is_ok());
}

PlanRequest request(int64_t global_batch, int seq) {
  PlanRequest r;
  r.model = small_model();
  r.global_batch = global_batch;
  r.seq = seq;
  return r;
}

Layout layout(int dp, int tp, int pp, bool zero, bool rc, int micro, int accum) {
  Layout l;
  l.dp = dp, l.tp = tp, l.pp = pp, l.zero = zero, l.recompute = rc, l.micro = micro, l.accum = accum;
  return l;
}

// One source of truth: the prediction's memory is the trainer's table for the largest stage's
// shard, plus the cluster's fixed process memory.
TEST(PlanMemory, IsTheTrainersPlanOfTheLargestStage) {
  const ClusterSpec c = sample_cluster();
  const PlanRequest r = request(32, 128);
  for (const Layout& l : {layout(1, 1, 1, false, false, 8, 4), layout(2, 2, 2, true, false, 4, 4),
                          layout(1, 1, 4, false, true, 2, 16), layout(8, 1, 1, true, false, 4, 1)}) {
    const Prediction p = plan_predict(r, c, l);
    ASSERT_GT(p.memory.total(), 0) << l.name() << ": " << p.reason;
    std::vector<int> bounds;
    ASSERT_TRUE(stage_bounds(r.model.n_layers, l.pp, {}, bounds).is_ok());
    ModelConfig m = r.model;
    m.recompute = l.recompute;
    int64_t largest = 0;
    for (int st = 0; st < l.pp; st++) {
      RunMemoryInput in;
      in.B = l.micro, in.T = r.seq, in.dp = l.dp, in.grad_accum = l.accum, in.zero = l.zero;
      in.save_at_end = r.save_at_end;  // every run saves at its end unless told not to: one staging copy
      const RunMemory rm = run_memory_plan(m, model_shard(l.tp, 0, l.pp, st, bounds), in);
      largest = std::max(largest, rm.total());
      const int slots = l.pp > 1 ? pipeline_slots(l.pp, st, l.accum) : 1;
      const MemoryPlan mp = memory_plan(m, model_shard(l.tp, 0, l.pp, st, bounds), l.micro, r.seq,
                                        l.zero ? l.dp : 1, Precision::kFp32, 1, slots);
      EXPECT_EQ(rm.model.total(), mp.total()) << l.name() << " stage " << st;
    }
    EXPECT_EQ(p.memory.run.total(), largest) << l.name();
    const int world = l.dp * l.tp * l.pp;
    EXPECT_EQ(p.memory.process_bytes, (int64_t)((world > 1 ? c.mpi_process_mb : c.process_mb) * 1e6));
  }
  // ZeRO-1 divides the moments, TP the weights, recompute the activations.
  const auto mem = [&](const Layout& l) { return plan_predict(r, c, l).memory.run; };
  EXPECT_LT(mem(layout(4, 1, 1, true, false, 8, 1)).model.optimizer_bytes,
            mem(layout(4, 1, 1, false, false, 8, 1)).model.optimizer_bytes / 3);
  EXPECT_LT(mem(layout(1, 4, 1, false, false, 8, 4)).model.param_bytes,
            mem(layout(1, 1, 1, false, false, 8, 4)).model.param_bytes / 2);
  EXPECT_LT(mem(layout(1, 1, 1, false, true, 8, 4)).model.activation_bytes,
            mem(layout(1, 1, 1, false, false, 8, 4)).model.activation_bytes / 2);
}

TEST(PlanRefusals, SayWhyWithTheNumbers) {
  const ClusterSpec c = sample_cluster();
  const PlanRequest r = request(32, 128);
  Prediction p = plan_predict(r, c, layout(1, 3, 1, false, false, 8, 4));
  EXPECT_FALSE(p.fits);
  EXPECT_NE(p.reason.find("heads"), std::string::npos) << p.reason;
  p = plan_predict(r, c, layout(3, 1, 1, false, false, 8, 1));
  EXPECT_NE(p.reason.find("not the global batch 32"), std::string::npos) << p.reason;
  p = plan_predict(r, c, layout(1, 1, 8, false, false, 8, 4));
  EXPECT_FALSE(p.fits);
  EXPECT_NE(p.reason.find("layer"), std::string::npos) << p.reason;
  ClusterSpec tiny = c;
  tiny.memory_gb = 0.05;
  p = plan_predict(r, tiny, layout(1, 1, 1, false, false, 32, 1));
  EXPECT_FALSE(p.fits);
  EXPECT_NE(p.reason.find("does not fit"), std::string::npos) << p.reason;
  EXPECT_NE(p.reason.find("over by"), std::string::npos) << p.reason;
  // search: every listed layout uses the rank count; the fitting ones come first, fastest first
  const std::vector<Prediction> all = plan_search([&] { PlanRequest q = r; q.ranks = 8; return q; }(), c);
  ASSERT_FALSE(all.empty());
  bool seen_reject = false;
  double last = 0;
  for (const Prediction& x : all) {
    EXPECT_EQ(x.layout.dp * x.layout.tp * x.layout.pp, 8) << x.layout.name();
    if (!x.fits) {
      seen_reject = true;
      continue;
    }
    EXPECT_FALSE(seen_reject) << "a fitting layout after a rejected one: " << x.layout.name();
    EXPECT_GE(x.time.step_ms, last);
    last = x.time.step_ms;
  }
}

// With equal stages and free messages the simulated 1F1B idle is the formula's (P-1)/(M+P-1).
TEST(PlanTime, PipelineIdleMatchesTheBubbleFormulaForEqualStages) {
  ClusterSpec c = sample_cluster();
  c.intra_gb_s = 1e9, c.intra_latency_us = 0;  // messages cost nothing
  PlanRequest r = request(64, 128);
  r.model.vocab_size = 8;  // the head and embedding cost (almost) nothing: the stages are equal
  for (int P : {2, 4})
    for (int M : {4, 8, 16}) {
      const Prediction p = plan_predict(r, c, layout(1, 1, P, false, false, 64 / M, M));
      ASSERT_GT(p.time.step_ms, 0) << p.reason;
      const double compute = p.time.gemm_ms + p.time.attention_ms + p.time.elementwise_ms;
      const double idle = p.time.bubble_ms / (p.time.bubble_ms + compute);
      EXPECT_NEAR(idle, pipeline_bubble(P, M), 0.01) << "P " << P << " M " << M;
    }
  // TP adds its all-reduces, DP its reduction, and a layout without either has none.
  const Prediction tp = plan_predict(r, c, layout(1, 2, 1, false, false, 8, 8));
  EXPECT_GT(tp.time.tp_ms, 0);
  EXPECT_EQ(plan_predict(r, c, layout(1, 1, 1, false, false, 8, 8)).time.tp_ms, 0);
  EXPECT_GT(plan_predict(r, c, layout(2, 1, 1, false, false, 8, 4)).time.dp_ms, 0);
  // Recompute costs a forward more.
  EXPECT_GT(plan_predict(r, c, layout(1, 1, 1, false, true, 8, 8)).time.step_ms,
            plan_predict(r, c, layout(1, 1, 1, false, false, 8, 8)).time.step_ms);
}

// A measured sync curve adds, to each TP all-reduce, the wait at the compute between two of them;
// a cluster without one adds none.
TEST(PlanTime, TpAllReducesWaitTheSyncCurveAtTheComputeBetweenThem) {
  ClusterSpec c = sample_cluster();
  const PlanRequest r = request(64, 128);
  const Layout l = layout(1, 2, 1, false, false, 8, 8);
  const Prediction bare = plan_predict(r, c, l);
  ASSERT_TRUE(bare.fits) << bare.reason;
  EXPECT_EQ(bare.time.tp_wait_ms, 0);
  c.sync.push_back({2, {1e-6, 1.0}, {1e-6, 0.1}});  // a tenth of the segment (a line through 0)
  c.sync.push_back({4, {1e-6, 1.0}, {1e-6, 0.5}});  // not this layout's group size
  const Prediction p = plan_predict(r, c, l);
  // 4 layers: the embedding's, 8 forward, 8 backward, the head's input gradient and its two rows.
  const int collectives = 1 + 2 * 4 + 2 * 4 + 1 + 2;
  const double compute_ms = p.time.gemm_ms + p.time.attention_ms + p.time.elementwise_ms;
  const double segment_s = compute_ms / 1e3 / l.accum / collectives;
  const double expect_ms = l.accum * collectives * c.sync[0].at(segment_s) * 1e3;
  EXPECT_NEAR(p.time.tp_wait_ms, expect_ms, 1e-6 * expect_ms);
  EXPECT_NEAR(p.time.tp_wait_ms, 0.1 * compute_ms, 0.01 * compute_ms);
  EXPECT_NEAR(p.time.tp_ms - bare.time.tp_ms, p.time.tp_wait_ms, 1e-6 * expect_ms);
  EXPECT_NEAR(p.time.step_ms - bare.time.step_ms, p.time.tp_wait_ms, 1e-6 * expect_ms);
}

TEST(PlanExamples, ClusterFilesLoadAndThe7BNeedsAModelSplitOnAccelerators) {
  for (const char* f : {"cpu-8node.toml", "accel-2048-h100.toml", "accel-2048-910b.toml"}) {
    ClusterSpec c;
    const std::string path = std::string(SMELT_SOURCE_DIR) + "/configs/clusters/" + f;
    ASSERT_TRUE(cluster_load(path, c).is_ok()) << cluster_load(path, c).message();
    EXPECT_GT(c.devices(), 1) << f;
  }
  ClusterSpec h100;
  ASSERT_TRUE(cluster_load(std::string(SMELT_SOURCE_DIR) + "/configs/clusters/accel-2048-h100.toml", h100).is_ok());
  PlanRequest r;
  r.model.vocab_size = 32000, r.model.d_model = 4096, r.model.n_layers = 32, r.model.n_heads = 32;
  r.model.n_kv_heads = 32, r.model.ffn_hidden = 11008, r.model.max_seq_len = 4096;
  r.global_batch = 1024, r.seq = 4096, r.precision = Precision::kBf16, r.ranks = 64;
  r.micro_batches = {1};
  const Prediction pure_dp = plan_predict(r, h100, layout(64, 1, 1, false, false, 1, 16));
  EXPECT_FALSE(pure_dp.fits) << "7B fp32 master weights, gradients and moments: 16 bytes a parameter";
  const Prediction split = plan_predict(r, h100, layout(8, 8, 1, true, true, 1, 128));
  EXPECT_TRUE(split.fits) << split.reason;
}

}  // namespace
}  // namespace smelt
