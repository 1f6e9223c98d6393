// The trainer's time budget (train/trainer_budget.cpp): the step count planned from the first
// steps' time, planned again at warmup's end, the schedule laid out over it, evaluations left out
// of the step time.
#include "trainer_fixture.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace smelt;
using smelt::test::TrainerTest;

namespace {

// The plan's step time leaves out the evaluations between the steps it timed: the plan counts the
// evaluations still due on their own, and counting them twice left a demo run's last minute
// unused. Here an evaluation every 2 steps costs about as much as several steps.
TEST_F(TrainerTest, TimeBudgetStepTimeLeavesOutTheEvaluations) {
  TrainConfig c = config("train.steps=0 train.time_budget_minutes=0.1 train.threads=1 eval.every=2 eval.tokens=4096 "
                         "optim.warmup_steps=300");
  TrainSummary s;
  Status st = train_run(c, s);
  ASSERT_TRUE(st.is_ok()) << st.message();
  auto m = metrics(c.train.run_dir);
  json plan;
  for (const auto& l : m)
    if (l.contains("event") && l["event"] == "time_budget_plan") {
      plan = l;
      break;
    }
  ASSERT_TRUE(plan.is_object());
  const int64_t at = plan["step"].get<int64_t>();
  ASSERT_GE(at, 5);
  // The steps the plan timed (2..at) and the evaluations between them (steps 2..at-1).
  double step_ms = 0, eval_ms = 0;
  int steps = 0, evals = 0;
  for (const auto& l : m) {
    if (!l.contains("step") || l.contains("event")) continue;
    const int64_t k = l["step"].get<int64_t>();
    if (k >= 2 && k <= at && l.contains("step_ms")) step_ms += l["step_ms"].get<double>(), steps++;
    if (k >= 1 && k < at && l.contains("eval_tokens_per_s"))
      eval_ms += 1e3 * l["eval_tokens"].get<double>() / l["eval_tokens_per_s"].get<double>(), evals++;
  }
  ASSERT_EQ(steps, at - 1);
  ASSERT_GE(evals, 2);
  const double mean_step = step_ms / steps, eval_share = eval_ms / steps;  // each step's part of the evaluations
  EXPECT_GT(eval_share, mean_step) << "the evaluations should weigh: " << eval_ms << " ms over " << steps;
  EXPECT_LT(plan["step_ms"].get<double>(), mean_step + 0.5 * eval_share)
      << "steps " << mean_step << " ms, evaluations " << eval_share << " ms a step";
  std::printf("plan %.2f ms a step; the steps timed %.2f ms, the evaluations %.2f ms a step\n",
              plan["step_ms"].get<double>(), mean_step, eval_share);
}

// A budget whose steps end inside the warmup: its first plan is final (no warmup's end will come
// to plan again), and the run ends by it.
TEST_F(TrainerTest, TimeBudgetEndingInsideTheWarmupPlansOnce) {
  TrainConfig c = config("train.steps=0 train.time_budget_minutes=0.05 train.threads=1 eval.every=0 eval.points=1 "
                         "eval.tokens=512 optim.warmup_steps=1000000");
  TrainSummary s;
  Status st = train_run(c, s);
  ASSERT_TRUE(st.is_ok()) << st.message();
  const std::vector<json> plans = time_budget_plans(c.train.run_dir);
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_EQ(plans[0]["final"], true);
  EXPECT_LT(plans[0]["total_steps"].get<int64_t>(), 1000000);
  EXPECT_LT(s.seconds, 0.05 * 60 + 5);
}

// A plan made fewer than 5 steps before warmup's end is not made again there (too few new steps to
// time), so it is final when made, and its event says so. Steps of 128x64 tokens (35-90 ms seen)
// put the plan, made once 5% of 6 s is spent, at step 3 to 6 (warmup ends at step 7); the metrics'
// last plan event must say final either way.
TEST_F(TrainerTest, TimeBudgetPlanJustBeforeWarmupsEndIsFinal) {
  TrainConfig c = config("train.steps=0 train.time_budget_minutes=0.1 train.threads=1 eval.every=0 eval.points=1 "
                         "eval.tokens=512 data.batch_size=128 optim.warmup_steps=7");
  TrainSummary s;
  Status st = train_run(c, s);
  ASSERT_TRUE(st.is_ok()) << st.message();
  const std::vector<json> plans = time_budget_plans(c.train.run_dir);
  ASSERT_GE(plans.size(), 1u);
  const int64_t first = plans[0]["step"].get<int64_t>();
  std::printf("the plan came at step %lld: %lld steps\n", (long long)first,
              (long long)plans[0]["total_steps"].get<int64_t>());
  if (first + 5 > c.schedule.warmup_steps) {
    EXPECT_EQ(plans.size(), 1u);
  }
  EXPECT_EQ(plans.back()["final"], true);
  EXPECT_EQ(s.json["time_budget"]["planned_at_step"], plans.back()["step"]);
}

// [train] time_budget_minutes: the run plans its step count from its first steps, plans it again
// at warmup's last step (final), lays the schedule out over it (the last step ends at min_lr),
// spreads [eval] points over it, stops within the budget, and is the same run as `train.steps = N`
// with the final N (both plans fall in warmup).
TEST_F(TrainerTest, TimeBudgetPlansTheStepsAndTheScheduleEndsOnTime) {
  // 6 s; the plan comes at 5% of it (0.3 s), inside the 100 warmup steps unless a step takes
  // under 3 ms (3 ms on an idle 2-core guest), and the planned total stays above the warmup unless
  // a step takes over 60 ms (49 ms seen beside the whole test suite); a slower machine's plan is
  // final at once (its steps end inside the warmup).
  const double minutes = 0.1;
  TrainConfig c = config(fmt::format("train.steps=0 train.time_budget_minutes={} train.threads=1 eval.every=0 "
                                     "eval.points=3 eval.tokens=512 optim.warmup_steps=100 optim.schedule=\"cosine\"",
                                     minutes));
  TrainSummary s;
  Status st = train_run(c, s);
  ASSERT_TRUE(st.is_ok()) << st.message();
  const json& tb = s.json["time_budget"];
  ASSERT_TRUE(tb["planned_steps"].is_number()) << s.json.dump();
  const int64_t planned = tb["planned_steps"].get<int64_t>(), at = tb["planned_at_step"].get<int64_t>();
  EXPECT_GE(at, 3);
  EXPECT_GT(planned, at);
  EXPECT_LT(s.seconds, minutes * 60 + 5) << "the budget is a wall-time cap";
  auto m = metrics(c.train.run_dir);
  std::vector<json> steps, evals, plans;
  for (const auto& l : m) {
    if (l.contains("event")) {
      EXPECT_EQ(l["event"], "time_budget_plan");
      plans.push_back(l);
      continue;
    }
    if (l.contains("loss")) steps.push_back(l);
    if (l.contains("eval_loss")) evals.push_back(l);
  }
  ASSERT_EQ((int64_t)steps.size(), s.steps);
  // The plan, and when it came inside warmup (5 steps or more before its end) and the run reached
  // warmup's last step, the final one there.
  ASSERT_GE(plans.size(), 1u);
  ASSERT_LE(plans.size(), 2u);
  EXPECT_EQ(plans.back()["final"], true);
  EXPECT_EQ(plans.back()["total_steps"].get<int64_t>(), planned);
  EXPECT_EQ(plans.back()["step"].get<int64_t>(), at);
  const int64_t warmup = c.schedule.warmup_steps;
  if (plans[0]["step"].get<int64_t>() + 5 <= warmup && s.steps >= warmup) {
    ASSERT_EQ(plans.size(), 2u);
    EXPECT_EQ(plans[0]["final"], false);
    EXPECT_EQ(at, warmup);
  }
  // evaluations: at the start, every ceil(total/3) steps of the plan in force, and at the end;
  // under the final plan no more than the 3 points asked for (the last is the final step's)
  EXPECT_GE(evals.size(), 3u);
  EXPECT_LE(evals.size(), 6u);
  const int64_t first_every = (plans[0]["total_steps"].get<int64_t>() + 2) / 3;
  for (size_t i = 1; i + 1 < evals.size(); i++) {
    const int64_t at_step = evals[i]["step"].get<int64_t>();
    EXPECT_EQ(at_step % (at_step < at ? first_every : (planned + 2) / 3), 0) << at_step;
  }
  int64_t late_evals = 0;
  for (const json& e : evals) late_evals += e["step"].get<int64_t>() > at;
  EXPECT_LE(late_evals, 3);
  LrSchedule sched = c.schedule;
  sched.total_steps = planned;
  if (tb["ended_by"] == "plan") {
    EXPECT_EQ(s.steps, planned);
    EXPECT_DOUBLE_EQ(steps.back()["lr"].get<double>(), lr_at(sched, planned - 1));
    if (planned > c.schedule.warmup_steps) {
      EXPECT_NEAR(steps.back()["lr"].get<double>(), c.schedule.min_lr, 0.02 * c.schedule.lr);
    }
  } else {
    EXPECT_EQ(tb["ended_by"], "deadline");  // a slow machine: the deadline came first
    EXPECT_LT(s.steps, planned);
  }
  // The same run by step count: every line equal but the timing fields. It is the same run only
  // when the final plan came inside the warmup or at its last step (until then, the LR does not
  // depend on the total).
  if (at > c.schedule.warmup_steps) {
    std::printf("the plan came at step %lld, after the warmup: no by-step-count comparison\n", (long long)at);
    return;
  }
  TrainConfig again = config(fmt::format("train.steps={} train.threads=1 eval.every={} eval.tokens=512 "
                                         "optim.warmup_steps={} optim.schedule=\"cosine\"", s.steps, planned / 3, warmup));
  again.train.run_dir = (dir_ / "again").string();
  TrainSummary s2;
  ASSERT_TRUE(train_run(again, s2).is_ok());
  std::vector<json> steps2;
  for (const auto& l : metrics(again.train.run_dir))
    if (l.contains("loss")) steps2.push_back(l);
  ASSERT_EQ(steps2.size(), steps.size());
  if (s.steps == planned) {
    // The training fields line for line. The evaluations fall where the plan in force put them
    // (every total/3 of the first plan until the final one), so they are compared where both runs
    // evaluated: the same weights give the same loss.
    auto training = [](json l) {
      for (const char* k : {"eval_loss", "eval_entropy", "eval_ppl", "eval_tokens", "eval_bpb", "eval_bytes", "eval_tokens_per_s"}) l.erase(k);
      return l;
    };
    int common = 0;
    for (size_t i = 0; i < steps.size(); i++) {
      EXPECT_EQ(deterministic(training(steps[i])).dump(), deterministic(training(steps2[i])).dump()) << "step " << i + 1;
      if (steps[i].contains("eval_loss") && steps2[i].contains("eval_loss")) {
        common++;
        EXPECT_EQ(steps[i]["eval_loss"], steps2[i]["eval_loss"]) << "step " << i + 1;
      }
    }
    EXPECT_GE(common, 1) << "no step evaluated in both runs (the last one should be)";
  }
}

}  // namespace
