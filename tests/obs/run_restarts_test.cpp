// RunRestarts over metrics lines as `smelt launch` writes them: restart events summed by cause,
// steps and seconds lost, the latest launch_end's goodput; other lines ignored.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "smelt/obs/run_restarts.hpp"

using nlohmann::json;
using smelt::RunRestarts;

TEST(RunRestarts, SumsRestartEventsAndTakesTheLastGoodput) {
  RunRestarts r;
  EXPECT_FALSE(r.any());
  r.observe(json{{"step", 1}, {"loss", 5.0}});
  r.observe(json{{"step", 10}, {"event", "restart"}, {"cause", "killed"}, {"steps_lost", 7}, {"lost_s", 2.5}});
  r.observe(json{{"step", 20}, {"event", "checkpoint_failed"}});
  r.observe(json{{"step", 20}, {"event", "restart"}, {"cause", "hang"}, {"steps_lost", 2}, {"lost_s", 10.0}});
  r.observe(json{{"step", 30}, {"event", "restart"}, {"cause", "killed"}, {"steps_lost", 0}, {"lost_s", 1.0}});
  EXPECT_TRUE(r.any());
  EXPECT_EQ(r.summary(), "restarts       3 (hang 1, killed 2): 9 steps and 13.5 s lost; the supervisor has not ended "
                         "(goodput comes at its end)");
  r.observe(json{{"step", 40}, {"event", "launch_end"}, {"outcome", "completed"}, {"goodput", 0.8}, {"wall_s", 100.0}});
  EXPECT_EQ(r.summary(), "restarts       3 (hang 1, killed 2): 9 steps and 13.5 s lost; goodput 0.800 of 100.0 s (completed)");
  const json j = r.to_json();
  EXPECT_EQ(j["restarts"], 3);
  EXPECT_EQ(j["by_cause"]["killed"], 2);
  EXPECT_EQ(j["steps_lost"], 9);
  EXPECT_DOUBLE_EQ(j["goodput"].get<double>(), 0.8);
  // A launch without failures: no restarts, its goodput.
  RunRestarts clean;
  clean.observe(json{{"step", 5}, {"event", "launch_end"}, {"outcome", "completed"}, {"goodput", 0.95}, {"wall_s", 20.0}});
  EXPECT_EQ(clean.summary(), "restarts       0; goodput 0.950 of 20.0 s (completed)");
}
