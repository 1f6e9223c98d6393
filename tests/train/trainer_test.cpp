// The training loop end to end on real text (byte tokens of the English and Chinese test texts):
// the schedule's shapes, the loss falls, metrics.jsonl carries every field, gradient accumulation
// matches a bigger batch, the same seed gives the same bits on any thread count, bucketed data
// and stop by tokens, the memory plan refuses what does not fit, and bad configs name the key.
// Resume: trainer_checkpoint_test.cpp; time budgets: trainer_budget_test.cpp; health rules:
// trainer_health_test.cpp; the CLI side (SIGTERM save, --resume, smelt eval): tests/cli/train_cmd_test.cpp.
#include "trainer_fixture.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace smelt;
using smelt::test::TrainerTest;

namespace {

TEST(Schedule, WarmupCosineWsdConstantRestart) {
  LrSchedule s;
  s.lr = 1.0, s.min_lr = 0.1, s.warmup_steps = 10, s.total_steps = 110;
  EXPECT_DOUBLE_EQ(lr_at(s, 0), 0.1);
  EXPECT_DOUBLE_EQ(lr_at(s, 9), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(s, 10), 1.0);
  EXPECT_NEAR(lr_at(s, 60), 0.55, 1e-12);  // half way: the cosine's midpoint
  EXPECT_NEAR(lr_at(s, 110), 0.1, 1e-12);
  EXPECT_NEAR(lr_at(s, 500), 0.1, 1e-12);  // past the end stays at the floor
  for (int64_t t = 10; t < 110; t++) EXPECT_LE(lr_at(s, t + 1), lr_at(s, t) + 1e-15);
  s.kind = ScheduleKind::kWsd;
  s.decay_fraction = 0.2;  // the last 22 steps decay
  EXPECT_DOUBLE_EQ(lr_at(s, 50), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(s, 88), 1.0);
  EXPECT_NEAR(lr_at(s, 99), 1.0 - 0.9 * 11.0 / 22.0, 1e-12);
  EXPECT_NEAR(lr_at(s, 110), 0.1, 1e-12);
  s.kind = ScheduleKind::kConstant;
  EXPECT_DOUBLE_EQ(lr_at(s, 100), 1.0);
  s.kind = ScheduleKind::kCosine;
  s.restart_step = 60;  // entropy-collapse rule: a new schedule from 30% of the peak
  EXPECT_NEAR(lr_at(s, 59), 0.55 + 0.45 * std::cos(M_PI * 49 / 100.0) - 0.45 * std::cos(M_PI * 0.5), 0.02);
  EXPECT_LT(lr_at(s, 60), 0.3 * 0.2);  // warming up again
  EXPECT_NEAR(lr_at(s, 69), 0.3, 1e-12);
  EXPECT_FALSE(lr_schedule_validate(LrSchedule{.lr = 1e-3, .min_lr = 2e-3}).is_ok());
}

TEST_F(TrainerTest, BadConfigNamesKeyValueAndAllowed) {
  auto err = [&](const std::string& set) {
    toml::table root = toml::parse(fmt::format("[data]\nsources = \"{}\"\nseq_len = 128\neod_id = 256\n", (dir_ / "en").string()));
    EXPECT_TRUE(config_apply_set(root, set).is_ok());
    TrainConfig c;
    Status s = train_config_read(root, c);
    EXPECT_FALSE(s.is_ok()) << set;
    return s.message();
  };
  EXPECT_NE(err("train.stepz=3").find("stepz"), std::string::npos);
  EXPECT_NE(err("optim.schedule=\"linear\"").find("[optim] schedule = \"linear\": expected \"cosine\", \"wsd\" or \"constant\""), std::string::npos);
  EXPECT_NE(err("train.grad_accum=0").find("grad_accum = 0"), std::string::npos);
  EXPECT_NE(err("model.n_kv_heads=3").find("n_kv_heads = 3"), std::string::npos);
  EXPECT_NE(err("data.seq_len=1024").find("max_seq_len"), std::string::npos);
  EXPECT_NE(err("optim.min_lr=1.0").find("min_lr = 1"), std::string::npos);
  EXPECT_NE(err("optim.beta2=1.0").find("[optim] beta2 = 1: must be in [0, 1)"), std::string::npos);
  EXPECT_NE(err("optim.grad_clip=inf").find("[optim] grad_clip = inf"), std::string::npos);
  EXPECT_NE(err("wrong.key=1").find("[wrong]: unknown section"), std::string::npos);
}

// [optim] fills the schedule (doubles) and AdamW (floats): the resolved text keeps the decimals
// as written, not the float's binary expansion, and reading it again gives the same structs.
TEST_F(TrainerTest, OptimFloatsResolveAsWritten) {
  toml::table root = toml::parse(fmt::format("[data]\nsources = \"{}\"\nseq_len = 128\neod_id = 256\n"
                                             "[optim]\nschedule = \"wsd\"\nlr = 2e-3\nbeta2 = 0.95\neps = 1e-7\n"
                                             "weight_decay = 0.05\ngrad_clip = 0.7\n", (dir_ / "en").string()));
  TrainConfig c;
  ASSERT_TRUE(train_config_read(root, c).is_ok());
  EXPECT_EQ(c.schedule.kind, ScheduleKind::kWsd);
  EXPECT_EQ(c.optim.lr, 2e-3f);
  EXPECT_EQ(c.optim.beta2, 0.95f);
  EXPECT_EQ(c.optim.grad_clip, 0.7f);
  const std::string text = train_config_to_string(c);
  for (const char* line : {"beta2 = 0.95\n", "eps = 1e-07\n", "weight_decay = 0.05\n", "grad_clip = 0.7\n",
                           "schedule = 'wsd'\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line << " not in\n" << text;
  TrainConfig again;
  ASSERT_TRUE(train_config_read(toml::parse(text), again).is_ok());
  EXPECT_EQ(again.optim.beta2, c.optim.beta2);
  EXPECT_EQ(again.optim.eps, c.optim.eps);
  EXPECT_EQ(again.schedule.kind, c.schedule.kind);
  EXPECT_EQ(train_config_to_string(again), text);
}

TEST_F(TrainerTest, LossFallsAndMetricsCarryEveryField) {
  TrainConfig c = config();
  TrainSummary sum;
  Status s = train_run(c, sum);
  ASSERT_TRUE(s.is_ok()) << s.message();
  auto m = metrics(c.train.run_dir);
  ASSERT_EQ(m.size(), 41u);  // the step-0 evaluation, then 40 steps
  EXPECT_EQ(m[0]["step"], 0);
  EXPECT_TRUE(m[0].contains("eval_loss"));
  for (int i = 1; i <= 40; i++) {
    const json& j = m[i];
    EXPECT_EQ(j["step"], i);
    for (const char* k : {"loss", "lr", "grad_norm", "grad_norm_ratio", "tokens", "tokens_per_s", "mfu", "mfu_peak", "step_ms",
                          "data_wait_ms", "token_entropy", "loss_by_source", "fetch_ms"})
      EXPECT_TRUE(j.contains(k)) << "step " << i << " lacks " << k;
    // Honest MFU: against the model's own GEMM rate and the CPU's peak, never above 100%.
    for (const char* k : {"mfu", "mfu_peak"}) {
      EXPECT_GT(j[k].get<double>(), 0.0) << k;
      EXPECT_LE(j[k].get<double>(), 1.0) << k;
    }
    EXPECT_LE(j["mfu_peak"].get<double>(), j["mfu"].get<double>());
    EXPECT_EQ(j["tokens"], 4 * 64 * i);
    EXPECT_EQ(j.contains("attn_sparsity"), i % 5 == 0) << i;
    if (i % 5 == 0) {
      EXPECT_GE(j["attn_sparsity"].get<double>(), 0.0);
      EXPECT_LE(j["attn_sparsity"].get<double>(), 1.0);
    }
    EXPECT_TRUE(j["loss_by_source"].contains("en"));
    EXPECT_EQ(j.contains("eval_loss"), i % 20 == 0) << i;
    EXPECT_GT(j["fetch_ms"]["p95"].get<double>(), 0.0);
  }
  // Uniform prediction over 260 tokens has entropy log(260) = 5.56; it must fall as the model learns.
  EXPECT_NEAR(m[1]["token_entropy"].get<double>(), std::log(260.0), 0.05);
  EXPECT_LT(m[40]["token_entropy"].get<double>(), 4.5);
  EXPECT_NEAR(m[1]["loss"].get<double>(), std::log(260.0), 0.1);
  double last5 = 0;
  for (int i = 36; i <= 40; i++) last5 += m[i]["loss"].get<double>() / 5;
  EXPECT_LT(last5, m[1]["loss"].get<double>() - 1.5) << "training did not learn";
  EXPECT_LT(m[40]["eval_loss"].get<double>(), m[0]["eval_loss"].get<double>() - 1.0);
  EXPECT_DOUBLE_EQ(m[5]["lr"].get<double>(), 1e-2);  // end of warmup
  EXPECT_LT(m[40]["lr"].get<double>(), 2e-3);
  // The blend: about 70% of the tokens from en; both sources seen.
  EXPECT_TRUE(m[40]["loss_by_source"].contains("zh") || m[39]["loss_by_source"].contains("zh"));
  EXPECT_EQ(sum.steps, 40);
  EXPECT_EQ(sum.tokens, 40u * 4 * 64);
  EXPECT_LT(sum.eval_last, sum.eval_first);
  json j = json::parse(test::read_file(c.train.run_dir + "/summary.json"));
  EXPECT_EQ(j["steps"], 40);
  // What the GEMMs ran on and against what MFU was taken, for a person and a program.
  const json& tm = j["timing"];
  EXPECT_EQ(tm["precision"], "fp32");
  EXPECT_TRUE(tm["gemm"]["engine"] == "openblas" || tm["gemm"]["engine"] == "onednn" || tm["gemm"]["engine"] == "blis")
      << tm["gemm"];
  EXPECT_GT(tm["gemm_gflops"].get<double>(), 0.0);
  EXPECT_GT(tm["peak_gflops"].get<double>(), 0.0);
  EXPECT_FALSE(tm["cpu"]["model"].get<std::string>().empty());
  EXPECT_FALSE(tm["gemm"]["blas_core"].get<std::string>().empty());
  EXPECT_GT(tm["mfu"].get<double>(), 0.0);
  EXPECT_LE(tm["mfu"].get<double>(), 1.0);
  EXPECT_LE(tm["mfu_peak"].get<double>(), tm["mfu"].get<double>());
  EXPECT_NE(sum.text.find("of the CPU's peak"), std::string::npos) << sum.text;
  EXPECT_TRUE(fs::exists(c.train.run_dir + "/config.toml"));
  // The end-of-run checkpoint verifies and holds the model and both AdamW moments.
  ASSERT_FALSE(sum.checkpoint.empty());
  ASSERT_TRUE(ckpt_verify(sum.checkpoint).is_ok());
  CkptManifest man;
  ASSERT_TRUE(ckpt_read_manifest(sum.checkpoint, man).is_ok());
  EXPECT_EQ(man.step, 40);
  EXPECT_NE(man.find("lm_head.weight"), nullptr);
  EXPECT_NE(man.find("optim.v.model.norm.weight"), nullptr);
}

TEST_F(TrainerTest, GradAccumulationMatchesTheBiggerBatch) {
  TrainConfig big = config("train.steps=6 eval.data=\"\" data.batch_size=8");
  TrainConfig acc = config("train.steps=6 eval.data=\"\" data.batch_size=4 train.grad_accum=2");
  acc.train.run_dir = (dir_ / "acc").string();
  TrainSummary a, b;
  ASSERT_TRUE(train_run(big, a).is_ok());
  Status s = train_run(acc, b);
  ASSERT_TRUE(s.is_ok()) << s.message();
  auto x = metrics(big.train.run_dir), y = metrics(acc.train.run_dir);
  ASSERT_EQ(x.size(), 6u);
  ASSERT_EQ(y.size(), 6u);
  for (int i = 0; i < 6; i++) {
    EXPECT_EQ(x[i]["tokens"], y[i]["tokens"]);
    // Same rows in the same order, gradients summed in another order: fp32 rounding only.
    EXPECT_NEAR(x[i]["loss"].get<double>(), y[i]["loss"].get<double>(), 1e-4) << i;
    EXPECT_NEAR(x[i]["grad_norm"].get<double>(), y[i]["grad_norm"].get<double>(), 1e-3 * x[i]["grad_norm"].get<double>()) << i;
  }
}

TEST_F(TrainerTest, SameSeedSameBitsAndThreadCountDoesNotMatter) {
  TrainConfig one = config("train.steps=5 train.threads=1 eval.every=5");
  TrainConfig two = config("train.steps=5 train.threads=2 eval.every=5");
  two.train.run_dir = (dir_ / "two").string();
  TrainSummary a, b;
  ASSERT_TRUE(train_run(one, a).is_ok());
  ASSERT_TRUE(train_run(two, b).is_ok());
  auto x = metrics(one.train.run_dir), y = metrics(two.train.run_dir);
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); i++) EXPECT_EQ(deterministic(x[i]).dump(), deterministic(y[i]).dump());
}

TEST_F(TrainerTest, BucketedAndStopByTokens) {
  TrainConfig c = config("data.mode=\"bucketed\" data.buckets=16,32,64 data.max_tokens_per_batch=256 "
                         "train.steps=0 train.max_tokens=2000 eval.data=\"\"");
  TrainSummary s;
  Status st = train_run(c, s);
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_GE(s.tokens, 2000u);
  auto m = metrics(c.train.run_dir);
  ASSERT_FALSE(m.empty());
  ASSERT_GE(m.size(), 2u);
  EXPECT_GE(m.back()["tokens"].get<uint64_t>(), 2000u);
  EXPECT_LT(m[m.size() - 2]["tokens"].get<uint64_t>(), 2000u);  // stopped at the first step past the budget
  // Bucketed batches vary in shape; every one fits the planned rows.
  EXPECT_EQ(m.back()["step"].get<int64_t>(), s.steps);
}

TEST_F(TrainerTest, MemoryPlanRefusesBeforeTraining) {
  TrainConfig c = config("train.memory_mb=1");
  TrainSummary s;
  Status st = train_run(c, s);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("MiB"), std::string::npos) << st.message();
  EXPECT_FALSE(fs::exists(c.train.run_dir + "/metrics.jsonl"));
}

}  // namespace
