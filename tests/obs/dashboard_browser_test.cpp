// The dashboard in a real browser: two tiny real training runs (two data mixes: one source, and
// two blended) are shown by `smelt dashboard`, and tests/reference/dashboard_check.mjs drives
// Debian's chromium (headless, through npm playwright-core) over the page: every chart with data
// draws each run's curve, the numbers shown equal the last lines of metrics.jsonl as the script
// reads them, the vital-sign lights equal the server's verdict, lines appended to a run show within
// a few seconds (a new chart, a new source, skipped steps and a rollback as events, a torn line
// only once finished), a resume's rewritten file is read again with a restart mark, log scale and
// smoothing redraw, and the report from `smelt report` renders the same with every network
// request refused. A hand-made run whose evaluation lines carry two downstream tasks
// (tests/obs/task_lines.hpp) shows a chart per task with its points, error bars and, for the task
// that has one, the chance line, live, after one more evaluation and in the report. Skipped,
// saying so, without chromium or playwright-core.
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "obs/task_lines.hpp"
#include "serve/serve_process.hpp"
#include "test_files.hpp"
#include "train_test_util.hpp"
#include "test_references.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace smelt;

namespace {

const std::string kRef = std::string(SMELT_SOURCE_DIR) + "/tests/reference";

// The browser: $SMELT_CHROMIUM, else Debian's.
std::string chromium_path() {
  const char* env = std::getenv("SMELT_CHROMIUM");
  return env && *env ? env : "/usr/bin/chromium";
}

int sh(const std::string& cmd) {
  const int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

class DashboardBrowser : public ::testing::Test {
 protected:
  void SetUp() override {
    SMELT_REQUIRE_REFERENCE(fs::exists(kRef + "/node_modules/playwright-core/package.json"),
                            "tests/reference/node_modules has no playwright-core: run scripts/install-deps (npm ci "
                            "in tests/reference) to test the dashboard in a browser");
    SMELT_REQUIRE_REFERENCE(sh("node --version > /dev/null 2>&1") == 0, "no node on PATH (scripts/install-deps)");
    SMELT_REQUIRE_REFERENCE(fs::exists(chromium_path()) && sh(chromium_path() + " --version > /dev/null 2>&1") == 0,
                            chromium_path() << " is missing or does not start: apt-get install chromium "
                                               "(scripts/install-deps installs it), or point SMELT_CHROMIUM at one");
    dir_ = test::fresh_test_dir("smelt_dashboard_browser");
    const std::string data = SMELT_TEST_DATA;
    test::write_byte_shard((dir_ / "en").string(), {data + "/tokenizer/english.txt"});
    test::write_byte_shard((dir_ / "code").string(), {data + "/tokenizer_train/en_coding_style.rst"});
    test::write_file((dir_ / "run.toml").string(), test::byte_model_toml(32, true) + R"([data]
seq_len = 32
batch_size = 2
eod_id = 256
[train]
steps = 60
threads = 1
peak_gflops = 50
sparsity_every = 10
[optim]
lr = 3e-3
warmup_steps = 10
[eval]
every = 20
tokens = 512
[ckpt]
save_every = 20
)");
  }
  void TearDown() override {
    if (!dir_.empty() && !std::getenv("SMELT_KEEP")) fs::remove_all(dir_);
  }
  // A real training run into dir_/NAME.
  void train(const std::string& name, const std::string& data, const std::string& lr) {
    const std::string cmd = fmt::format("{} train --config {} --data {} --set optim.lr={} --set eval.data=\\\"{}\\\" --run-dir {} "
                                        "> {} 2>&1", SMELT_BINARY, (dir_ / "run.toml").string(), data, lr,
                                        (dir_ / "code").string(), (dir_ / name).string(), (dir_ / (name + ".log")).string());
    ASSERT_EQ(sh(cmd), 0) << test::read_file((dir_ / (name + ".log")).string());
  }
  // Runs dashboard_check.mjs over spec and expects every check to pass (at least min_checks).
  void check_in_browser(const json& spec, size_t min_checks) {
    test::write_file((dir_ / "spec.json").string(), spec.dump());
    const std::string out = (dir_ / "check.json").string(), err = (dir_ / "check.err").string();
    const int rc = sh("cd " + kRef + " && node dashboard_check.mjs " + (dir_ / "spec.json").string() + " > " + out + " 2> " + err);
    const json result = json::parse(test::read_file(out), nullptr, false);
    ASSERT_FALSE(result.is_discarded()) << test::read_file(out) << test::read_file(err);
    EXPECT_FALSE(result.contains("error")) << result.value("error", "");
    ASSERT_GT(result["checks"].size(), min_checks) << result.dump(1);
    for (const auto& c : result["checks"]) EXPECT_TRUE(c["ok"].get<bool>()) << c["name"] << ": " << c["detail"];
    EXPECT_EQ(rc, 0) << test::read_file(err);
  }
  fs::path dir_;
};

}  // namespace

TEST_F(DashboardBrowser, EachTaskHasAChartWithItsPointsErrorBarsAndChanceLine) {
  const fs::path run = dir_ / "tasks";
  fs::create_directories(run);
  test::write_file((run / "metrics.jsonl").string(), test::task_run_metrics());
  test::ServeProcess dash("--refresh-ms 500 " + run.string(), dir_ / "dashboard.err", "dashboard");
  ASSERT_GT(dash.port(), 0) << dash.log();
  check_in_browser({{"mode", "tasks"},
                    {"url", fmt::format("http://127.0.0.1:{}/", dash.port())},
                    {"smelt", SMELT_BINARY},
                    {"chromium", chromium_path()},
                    {"runs", {run.string()}},
                    {"append", test::task_run_line(40)},
                    {"report", (dir_ / "report.html").string()}},
                   60);
  EXPECT_EQ(dash.stop(), 0) << dash.log();
}

TEST_F(DashboardBrowser, ThePageShowsTheRunsFollowsThemAndTheReportRendersOffline) {
  train("mix-a", "web=" + (dir_ / "en").string(), "3e-3");
  train("mix-b", fmt::format("web={}:0.7,code={}:0.3", (dir_ / "en").string(), (dir_ / "code").string()), "1e-3");
  const std::string a = (dir_ / "mix-a").string(), b = (dir_ / "mix-b").string();
  test::ServeProcess dash("--refresh-ms 500 " + a + " " + b, dir_ / "dashboard.err", "dashboard");
  ASSERT_GT(dash.port(), 0) << dash.log();
  const json spec = {{"url", fmt::format("http://127.0.0.1:{}/", dash.port())},
                     {"smelt", SMELT_BINARY},
                     {"chromium", chromium_path()},
                     {"runs", {a, b}},
                     {"report", (dir_ / "report.html").string()}};
  test::write_file((dir_ / "spec.json").string(), spec.dump());
  const std::string out = (dir_ / "check.json").string(), err = (dir_ / "check.err").string();
  const int rc = sh("cd " + kRef + " && node dashboard_check.mjs " + (dir_ / "spec.json").string() + " > " + out + " 2> " + err);
  const json result = json::parse(test::read_file(out), nullptr, false);
  ASSERT_FALSE(result.is_discarded()) << test::read_file(out) << test::read_file(err);
  EXPECT_FALSE(result.contains("error")) << result.value("error", "");
  ASSERT_GT(result["checks"].size(), 100u) << result.dump(1);
  for (const auto& c : result["checks"]) EXPECT_TRUE(c["ok"].get<bool>()) << c["name"] << ": " << c["detail"];
  for (const auto& c : result["checks"])
    if (c["name"].get<std::string>().rfind("append: shown after", 0) == 0) std::printf("%s\n", c["name"].get<std::string>().c_str());
  EXPECT_EQ(rc, 0) << test::read_file(err);
  EXPECT_EQ(dash.stop(), 0) << dash.log();
  EXPECT_TRUE(fs::exists(dir_ / "report.html"));
}
