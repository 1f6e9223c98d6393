// The vital-sign monitor on hand-made metrics lines: each sign's bands, the persistence rule,
// "since which step", the straggler's rank, the warmup, events, and [health.vitals] validation.
// (tests/obs/health_cmd_test.cpp makes real runs break each sign.)
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "smelt/obs/vitals.hpp"

using json = nlohmann::json;
using namespace smelt;

namespace {

// A healthy step line: 100 ms steps, no waits, calibrated entropy, a steady gradient norm.
json healthy(int64_t step) {
  return {{"step", step},       {"loss", 4.0},         {"grad_norm", 1.0},       {"grad_norm_ratio", 1.0},
          {"token_entropy", 4.1}, {"step_ms", 100.0},  {"data_wait_ms", 0.1},   {"fetch_ms", {{"p50", 0.1}, {"p95", 0.2}, {"p99", 0.3}}}};
}

const VitalSign& sign(const VitalsMonitor& m, const std::string& name) {
  for (const auto& s : m.signs())
    if (s.name == name) return s;
  static VitalSign none;
  ADD_FAILURE() << "no sign " << name;
  return none;
}

VitalsConfig config() {
  VitalsConfig c;
  c.warmup = 2;
  c.persist = 3;
  return c;
}

TEST(Vitals, HealthyRunIsOkAndUnjudgedSignsUnknown) {
  VitalsMonitor m(config());
  for (int s = 1; s <= 45; s++) {
    if (s == 12) {  // one slow fetch early on: the loader's P95 over 12 samples is that fetch
      json j = healthy(s);
      j["fetch_ms"]["p95"] = 500.0;
      EXPECT_TRUE(m.observe(j).empty());
      continue;
    }
    EXPECT_TRUE(m.observe(healthy(s)).empty());
  }
  EXPECT_EQ(m.worst(), "ok");
  for (const char* n : {"data_fetch_p95", "data_wait", "grad_norm_ratio", "token_entropy", "loss_spike"}) {
    EXPECT_EQ(sign(m, n).state, "ok") << n;
    EXPECT_EQ(sign(m, n).since, -1) << n;
    EXPECT_EQ(sign(m, n).last_step, 45) << n;
  }
  // one rank, no checkpoint, no sparsity samples: nothing to judge
  for (const char* n : {"allreduce_wait", "allreduce_spread", "ckpt_write", "attn_sparsity"})
    EXPECT_EQ(sign(m, n).state, "unknown") << n;
}

TEST(Vitals, DataWaitCountsAfterPersistStepsAndNamesTheFirst) {
  VitalsMonitor m(config());
  for (int s = 1; s <= 10; s++) m.observe(healthy(s));
  // Two slow steps are noise (persist = 3) ...
  for (int s = 11; s <= 12; s++) {
    json j = healthy(s);
    j["data_wait_ms"] = 50.0;  // 50% of the step: bad
    m.observe(j);
  }
  m.observe(healthy(13));
  EXPECT_EQ(sign(m, "data_wait").state, "ok");
  // ... three in a row count, from the first of them.
  std::vector<VitalSign> worse;
  for (int s = 14; s <= 17; s++) {
    json j = healthy(s);
    j["data_wait_ms"] = 50.0;
    for (auto& w : m.observe(j)) worse.push_back(w);
  }
  const VitalSign& w = sign(m, "data_wait");
  EXPECT_EQ(w.state, "bad");
  EXPECT_EQ(w.now, "bad");
  EXPECT_EQ(w.since, 14);
  EXPECT_EQ(w.steps, (std::vector<int64_t>{14, 15, 16, 17}));
  EXPECT_DOUBLE_EQ(w.value, 50.0);
  ASSERT_EQ(worse.size(), 1u);  // reported once, when it got worse
  EXPECT_EQ(worse[0].name, "data_wait");
  EXPECT_EQ(m.worst(), "bad");
  // Recovered: the worst stays, "now" follows.
  for (int s = 18; s <= 20; s++) m.observe(healthy(s));
  EXPECT_EQ(sign(m, "data_wait").state, "bad");
  EXPECT_EQ(sign(m, "data_wait").now, "ok");
}

TEST(Vitals, WarnBandBelowBadAndMinimumTime) {
  VitalsMonitor m(config());
  for (int s = 1; s <= 5; s++) m.observe(healthy(s));
  for (int s = 6; s <= 9; s++) {
    json j = healthy(s);
    j["data_wait_ms"] = 10.0;  // 10%: above warn (5%), below bad (20%)
    m.observe(j);
  }
  EXPECT_EQ(sign(m, "data_wait").state, "warn");
  EXPECT_EQ(sign(m, "data_wait").since, 6);
  // Tiny steps: a 3 ms wait in a 4 ms step is under min_ms (5) and not judged a problem.
  VitalsMonitor t(config());
  for (int s = 1; s <= 20; s++) {
    json j = healthy(s);
    j["step_ms"] = 4.0;
    j["data_wait_ms"] = 3.0;
    t.observe(j);
  }
  EXPECT_EQ(sign(t, "data_wait").state, "ok");
}

TEST(Vitals, WarmupStepsAreNotJudged) {
  VitalsConfig c = config();
  c.warmup = 10;
  VitalsMonitor m(c);
  for (int s = 1; s <= 10; s++) {
    json j = healthy(s);
    j["grad_norm"] = s <= 5 ? 1.0 : 20.0;  // the first steps' norms swing: 20x, not judged yet
    m.observe(j);
  }
  EXPECT_EQ(sign(m, "grad_norm_ratio").state, "unknown");
  // The ratio is to the median of the last grad_window norms (20 here), not to the last step.
  for (int s = 11; s <= 14; s++) {
    json j = healthy(s);
    j["grad_norm"] = 400.0;
    m.observe(j);
  }
  EXPECT_EQ(sign(m, "grad_norm_ratio").state, "bad");
  EXPECT_EQ(sign(m, "grad_norm_ratio").since, 11);
  EXPECT_DOUBLE_EQ(sign(m, "grad_norm_ratio").value, 20.0);
  // A norm that falls slowly over the run stays ok.
  VitalsMonitor f(config());
  for (int s = 1; s <= 200; s++) {
    json j = healthy(s);
    j["grad_norm"] = 5.0 * std::pow(0.98, s);
    f.observe(j);
  }
  EXPECT_EQ(sign(f, "grad_norm_ratio").state, "ok");
}

TEST(Vitals, StragglerRankIsNamed) {
  VitalsMonitor m(config());
  for (int s = 1; s <= 5; s++) {
    json j = healthy(s);
    j["allreduce_wait_ms"] = 1.0;
    j["rank_compute_ms"] = {99.0, 98.0, 99.5};
    m.observe(j);
  }
  for (int s = 6; s <= 9; s++) {
    json j = healthy(s);
    j["step_ms"] = 205.0;
    j["allreduce_wait_ms"] = 150.0;              // rank 0 waits 73% of the step: bad
    j["rank_compute_ms"] = {50.0, 200.0, 51.0};  // rank 1 comes late: the spread is 34% of the step
    m.observe(j);
  }
  const VitalSign& sp = sign(m, "allreduce_spread");
  EXPECT_EQ(sp.state, "bad");
  EXPECT_EQ(sp.since, 6);
  EXPECT_EQ(sp.ranks, std::vector<int>{1});
  EXPECT_NE(sp.detail.find("rank 1"), std::string::npos) << sp.detail;
  const double mean = (50.0 + 200.0 + 51.0) / 3;
  EXPECT_NEAR(sp.value, std::sqrt((std::pow(50 - mean, 2) + std::pow(200 - mean, 2) + std::pow(51 - mean, 2)) / 3), 1e-9);
  EXPECT_EQ(sign(m, "allreduce_wait").state, "bad");
  EXPECT_EQ(sign(m, "allreduce_wait").since, 6);
}

TEST(Vitals, CheckpointRateAgainstTheDisk) {
  VitalsConfig c = config();
  c.ckpt_min_mb = 1;
  VitalsMonitor m(c);
  m.observe(healthy(1));
  json a = healthy(2);
  a["ckpt_write_mb_s"] = 400.0, a["ckpt_write_mb"] = 50.0, a["disk_mb_s"] = 1000.0;  // 40%: ok
  m.observe(a);
  EXPECT_EQ(sign(m, "ckpt_write").state, "ok");
  json small = healthy(3);
  small["ckpt_write_mb_s"] = 1.0, small["ckpt_write_mb"] = 0.5, small["disk_mb_s"] = 1000.0;  // under ckpt_min_mb
  m.observe(small);
  EXPECT_EQ(sign(m, "ckpt_write").state, "ok");
  json b = healthy(4);
  b["ckpt_write_mb_s"] = 100.0, b["ckpt_write_mb"] = 50.0, b["disk_mb_s"] = 1000.0;  // 10%: warn (one sample counts)
  m.observe(b);
  EXPECT_EQ(sign(m, "ckpt_write").state, "warn");
  EXPECT_EQ(sign(m, "ckpt_write").since, 4);
  json d = healthy(5);
  d["ckpt_write_mb_s"] = 20.0, d["ckpt_write_mb"] = 50.0, d["disk_mb_s"] = 1000.0;  // 2%: bad
  m.observe(d);
  EXPECT_EQ(sign(m, "ckpt_write").state, "bad");
  EXPECT_EQ(sign(m, "ckpt_write").since, 5);
}

TEST(Vitals, EntropyAgainstTheLossAndSparsity) {
  VitalsMonitor m(config());
  for (int s = 1; s <= 6; s++) {
    json j = healthy(s);
    j["token_entropy"] = 0.5;  // 0.125 of the loss: over-confident, bad
    j["attn_sparsity"] = 0.98;  // warn
    m.observe(j);
  }
  EXPECT_EQ(sign(m, "token_entropy").state, "bad");
  EXPECT_EQ(sign(m, "token_entropy").since, 3);
  EXPECT_NE(sign(m, "token_entropy").detail.find("over-confident"), std::string::npos);
  EXPECT_EQ(sign(m, "attn_sparsity").state, "warn");
  EXPECT_EQ(sign(m, "attn_sparsity").since, 1);
}

TEST(Vitals, SpikesWarnAndARollbackIsBad) {
  VitalsMonitor m(config());
  for (int s = 1; s <= 5; s++) m.observe(healthy(s));
  json j = healthy(6);
  j["loss"] = 9.0, j["loss_spike"] = 1;
  m.observe(j);
  EXPECT_EQ(sign(m, "loss_spike").state, "warn");
  EXPECT_EQ(sign(m, "loss_spike").since, 6);
  m.observe(json{{"step", 8}, {"event", "rollback"}, {"to_step", 4}});
  EXPECT_EQ(sign(m, "loss_spike").state, "bad");
  EXPECT_EQ(sign(m, "loss_spike").since, 8);
  EXPECT_NE(sign(m, "loss_spike").detail.find("to step 4"), std::string::npos);
}

TEST(Vitals, NonFiniteGradientIsOutOfBand) {
  VitalsMonitor m(config());
  for (int s = 1; s <= 4; s++) m.observe(healthy(s));
  for (int s = 5; s <= 7; s++) {
    json j = healthy(s);
    j["grad_norm"] = nullptr, j["skipped"] = "nonfinite";
    j.erase("grad_norm_ratio");
    m.observe(j);
  }
  EXPECT_EQ(sign(m, "grad_norm_ratio").state, "bad");
  EXPECT_EQ(sign(m, "grad_norm_ratio").since, 5);
}

TEST(Vitals, ConfigReadAndRefused) {
  toml::table root = toml::parse("[health.vitals]\npersist = 5\ndata_wait_bad = 0.4\n");
  VitalsConfig c;
  toml::table resolved;
  std::vector<std::string> errors;
  ASSERT_TRUE(vitals_config_read(root, c, resolved, errors).is_ok());
  EXPECT_TRUE(errors.empty());
  EXPECT_EQ(c.persist, 5);
  EXPECT_DOUBLE_EQ(c.data_wait_bad, 0.4);
  EXPECT_EQ(resolved.at_path("health.vitals.persist").value<int64_t>(), 5);
  EXPECT_TRUE(resolved.at_path("health.vitals.grad_ratio_bad").is_number());  // defaults resolved too
  for (const char* bad : {"[health.vitals]\npersist = 0\n", "[health.vitals]\ndata_wait_warn = 0.5\ndata_wait_bad = 0.1\n",
                          "[health.vitals]\ngrad_ratio_warn = 0.5\n", "[health.vitals]\ntypo = 1\n"}) {
    VitalsConfig d;
    toml::table r;
    std::vector<std::string> e;
    toml::table t = toml::parse(bad);
    EXPECT_TRUE(vitals_config_read(t, d, r, e).is_ok());  // value errors go to e, not the status
    EXPECT_FALSE(e.empty()) << bad;
    if (!e.empty()) EXPECT_NE(e[0].find("health.vitals"), std::string::npos) << e[0];
  }
}

}  // namespace
