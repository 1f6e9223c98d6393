// Downstream tasks over a run (obs/task_trend.hpp) on hand-made evaluation lines: first, last and
// best by the metric's direction, the chance level or none, the regression rule (2 standard errors
// of the last), the summary and warning lines, and lines that carry no tasks or no value.
// (tests/obs/health_cmd_test.cpp reads the same from a run folder through `smelt health`.)
#include <cmath>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "smelt/obs/task_trend.hpp"

using json = nlohmann::json;
using namespace smelt;

namespace {

json task(const char* metric, double value, double stderr_, json chance) {
  return {{"metric", metric}, {"value", value}, {"stderr", stderr_}, {"chance", chance}, {"items", 200}};
}

// Three evaluations of two tasks: arc rises then falls back by 0.1125 (more than 2 x 0.03); wiki's
// bits per byte fall (lower is better) and it has no chance level.
TaskTrends three_evaluations() {
  TaskTrends t;
  t.observe({{"step", 0}, {"tasks", {{"arc", task("acc_norm", 0.25, 0.03, 0.25)}, {"wiki", task("bits_per_byte", 2.5, 0.05, nullptr)}}}});
  t.observe({{"step", 50}, {"loss", 3.0}});  // a step line without tasks changes nothing
  t.observe({{"step", 100}, {"tasks", {{"arc", task("acc_norm", 0.4125, 0.0348, 0.25)}, {"wiki", task("bits_per_byte", 2.1, 0.05, nullptr)}}}});
  t.observe({{"step", 200}, {"tasks", {{"arc", task("acc_norm", 0.30, 0.03, 0.25)}, {"wiki", task("bits_per_byte", 1.9, 0.05, nullptr)}}}});
  return t;
}

TEST(TaskTrend, FirstLastBestAndChance) {
  const TaskTrends t = three_evaluations();
  ASSERT_EQ(t.trends().size(), 2u);
  const TaskTrend& arc = t.trends()[0];
  EXPECT_EQ(arc.name, "arc");
  EXPECT_EQ(arc.metric, "acc_norm");
  EXPECT_FALSE(arc.lower_is_better);
  EXPECT_EQ(arc.first, 0.25);
  EXPECT_EQ(arc.first_step, 0);
  EXPECT_EQ(arc.last, 0.30);
  EXPECT_EQ(arc.last_step, 200);
  EXPECT_EQ(arc.last_stderr, 0.03);
  EXPECT_EQ(arc.best, 0.4125);
  EXPECT_EQ(arc.best_step, 100);
  EXPECT_EQ(arc.chance, 0.25);
  EXPECT_EQ(arc.evaluations, 3);
  EXPECT_EQ(arc.items, 200);
  const TaskTrend& wiki = t.trends()[1];
  EXPECT_TRUE(wiki.lower_is_better);
  EXPECT_EQ(wiki.best, 1.9);  // the lowest
  EXPECT_EQ(wiki.best_step, 200);
  EXPECT_TRUE(std::isnan(wiki.chance));
}

TEST(TaskTrend, RegressionIsMoreThanTwoStderrBehindTheBest) {
  const TaskTrends t = three_evaluations();
  EXPECT_TRUE(t.trends()[0].regressed());
  EXPECT_FALSE(t.trends()[1].regressed());  // improving
  TaskTrend x = t.trends()[0];
  x.last = x.best - 2 * x.last_stderr + 1e-9;  // just inside the noise
  EXPECT_FALSE(x.regressed());
  x.last = x.best - 2 * x.last_stderr - 1e-9;
  EXPECT_TRUE(x.regressed());
  x.last_stderr = NAN;  // no stderr: cannot tell
  EXPECT_FALSE(x.regressed());
  // Lower is better: above the best is behind it.
  TaskTrend w = t.trends()[1];
  w.last = w.best + 0.11;
  EXPECT_TRUE(w.regressed());
}

TEST(TaskTrend, SummaryAndWarningLines) {
  const TaskTrends t = three_evaluations();
  EXPECT_EQ(t.trends()[0].summary(), "task arc: acc_norm 0.2500 -> 0.3000 (+-0.030) over 3 evaluations, chance 0.25");
  EXPECT_EQ(t.trends()[1].summary(), "task wiki: bits_per_byte 2.5000 -> 1.9000 (+-0.050) over 3 evaluations");
  EXPECT_EQ(t.trends()[0].warning(),
            "task arc: acc_norm 0.3000 at step 200 is below its best 0.4125 at step 100 by more than 2 stderr (2 x 0.030)");
  TaskTrend w = t.trends()[1];
  w.last = 2.2;
  w.last_step = 300;
  EXPECT_NE(w.warning().find("2.2000 at step 300 is above its best 1.9000 at step 200"), std::string::npos) << w.warning();
}

TEST(TaskTrend, JsonHasEveryFieldAndNullChance) {
  const json j = three_evaluations().to_json();
  ASSERT_TRUE(j.contains("arc") && j.contains("wiki")) << j.dump();
  for (const char* k : {"metric", "first", "last", "last_stderr", "chance", "evaluations", "first_step", "last_step",
                        "best", "best_step", "items", "lower_is_better", "regressed"})
    EXPECT_TRUE(j["arc"].contains(k)) << k;
  EXPECT_EQ(j["arc"]["first"], 0.25);
  EXPECT_EQ(j["arc"]["last"], 0.30);
  EXPECT_EQ(j["arc"]["last_stderr"], 0.03);
  EXPECT_EQ(j["arc"]["chance"], 0.25);
  EXPECT_EQ(j["arc"]["evaluations"], 3);
  EXPECT_EQ(j["arc"]["regressed"], true);
  EXPECT_TRUE(j["wiki"]["chance"].is_null());
  EXPECT_EQ(j["wiki"]["regressed"], false);
}

TEST(TaskTrend, ValuesThatAreNotNumbersAreNotCounted) {
  TaskTrends t;
  t.observe({{"step", 10}, {"tasks", {{"gen", {{"metric", "exact_match"}, {"value", nullptr}, {"stderr", nullptr}, {"chance", nullptr}}}}}});
  EXPECT_TRUE(t.trends().empty());
  t.observe({{"step", 20}, {"tasks", {{"gen", {{"metric", "exact_match"}, {"value", 0.5}, {"stderr", nullptr}, {"chance", nullptr}, {"items", nullptr}}}}}});
  t.observe({{"step", "x"}, {"tasks", {{"gen", task("exact_match", 0.9, 0.01, nullptr)}}}});  // no integer step
  t.observe({{"step", 30}, {"tasks", json::array()}});
  ASSERT_EQ(t.trends().size(), 1u);
  EXPECT_EQ(t.trends()[0].evaluations, 1);
  EXPECT_EQ(t.trends()[0].items, 0);
  EXPECT_TRUE(std::isnan(t.trends()[0].last_stderr));
  EXPECT_EQ(t.trends()[0].summary(), "task gen: exact_match 0.5000 -> 0.5000 over 1 evaluation");
  EXPECT_FALSE(t.trends()[0].regressed());
}

}  // namespace
