// RunProgress on a metrics.jsonl written as a run with one restart writes it: appended step lines,
// then the file replaced by a resume (kept lines, a restart event), then the new attempt's lines.
// The steps seen, their times, and the time on kept steps.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "smelt/launch/progress.hpp"

namespace fs = std::filesystem;
using smelt::RunProgress;

namespace {

std::string step_line(int step) { return nlohmann::json{{"step", step}, {"loss", 5.0}, {"step_ms", 500.0}}.dump(); }

void append(const fs::path& p, const std::string& line) {
  std::ofstream f(p, std::ios::app);
  f << line << "\n";
}

}  // namespace

TEST(RunProgress, FollowsAppendsAndARewriteAndCountsTheKeptStepsTime) {
  const fs::path dir = fs::temp_directory_path() / ("smelt_progress_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path m = dir / "metrics.jsonl";
  RunProgress p(m.string());
  p.begin_attempt(1, 0, 0.0);
  EXPECT_FALSE(p.read(0.5));  // no file yet
  for (int s = 1; s <= 6; s++) {
    append(m, step_line(s));
    EXPECT_TRUE(p.read(s)) << s;
  }
  EXPECT_FALSE(p.read(6.5));  // nothing new
  EXPECT_EQ(p.last_step(), 6);
  EXPECT_EQ(p.last_step_time(), 6.0);
  // A torn last line is not read until it is whole.
  { std::ofstream f(m, std::ios::app); f << "{\"step\": 7, \"lo"; }
  EXPECT_FALSE(p.read(7));
  // The job fails; the checkpoint is at step 4. The resume rewrites the file (a new inode): steps
  // 1-4 and the restart event, then steps 5-8 again.
  p.begin_attempt(2, 4, 10.0);
  EXPECT_EQ(p.last_step(), -1);
  EXPECT_EQ(p.seen_at(5), -1);  // the failed attempt's step 5 is lost work
  EXPECT_EQ(p.seen_at(4), 4.0);
  {
    const fs::path tmp = dir / "metrics.tmp";
    std::ofstream f(tmp);
    for (int s = 1; s <= 4; s++) f << step_line(s) << "\n";
    f << R"({"step": 4, "event": "restart", "cause": "killed"})" << "\n";
    f.close();
    fs::rename(tmp, m);
  }
  EXPECT_FALSE(p.read(10.5));  // the kept lines are not new work
  for (int s = 5; s <= 8; s++) {
    append(m, step_line(s));
    EXPECT_TRUE(p.read(6.0 + s)) << s;
  }
  EXPECT_EQ(p.last_step(), 8);
  EXPECT_EQ(p.seen_at(5), 11.0);
  // Kept: steps 1-4 of attempt 1 (0.5 s for its first, the step's own time, then 1 s each) and
  // steps 5-8 of attempt 2 (0.5, then 1 s each).
  EXPECT_DOUBLE_EQ(p.kept_seconds(), 3.5 + 3.5);
  fs::remove_all(dir);
}
