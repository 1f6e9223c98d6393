// `smelt dashboard` and `smelt report` as a user runs them, as real processes of the light binary:
// exit codes (2 for flags, 1 for a folder that is no run, naming it), the dashboard serving the page
// and Prometheus text and ending with 0 on SIGTERM and SIGINT, and the report written whole (an
// existing file is only ever replaced by a complete one; unreadable vital signs leave it without).
#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "obs/prom_text.hpp"
#include "serve/raw_http.hpp"
#include "serve/serve_process.hpp"
#include "test_files.hpp"
#include "train_test_util.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

struct CmdRun {
  int rc = -1;
  std::string out, err;
};

CmdRun run(const std::string& args, const fs::path& dir) {
  const std::string out = (dir / "cmd.out").string(), err = (dir / "cmd.err").string();
  int st = std::system((std::string(SMELT_BINARY) + " " + args + " > " + out + " 2> " + err + " < /dev/null").c_str());
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, smelt::test::read_file(out), smelt::test::read_file(err)};
}

class DashboardCmd : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = smelt::test::fresh_test_dir("smelt_dashboard_cmd");
    run_ = dir_ / "run";
    fs::create_directories(run_);
    smelt::test::write_file((run_ / "metrics.jsonl").string(),
                            "{\"step\":1,\"loss\":5.5,\"tokens\":64}\n{\"step\":2,\"loss\":5.25,\"tokens\":128}\n");
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_, run_;
};

}  // namespace

TEST_F(DashboardCmd, BadFlagsExit2AndAFolderThatIsNoRunExits1NamingIt) {
  for (const char* args : {"dashboard", "dashboard --port abc RUN", "dashboard --port 70000 RUN", "dashboard --nope RUN",
                           "report", "report RUN", "report -o x.html", "report --nope RUN -o x.html"})
    EXPECT_EQ(run(args, dir_).rc, 2) << args;
  EXPECT_EQ(run("dashboard --help", dir_).rc, 0);
  EXPECT_EQ(run("report --help", dir_).rc, 0);
  const fs::path empty = dir_ / "empty";
  fs::create_directories(empty);
  for (const std::string& args : {"dashboard --port 0 " + empty.string(), "report " + empty.string() + " -o " + (dir_ / "r.html").string(),
                                  "dashboard --port 0 " + run_.string() + " " + (dir_ / "missing").string()}) {
    CmdRun r = run(args, dir_);
    EXPECT_EQ(r.rc, 1) << args;
    EXPECT_TRUE(r.err.find(empty.string()) != std::string::npos || r.err.find((dir_ / "missing").string()) != std::string::npos)
        << r.err;
  }
  EXPECT_FALSE(fs::exists(dir_ / "r.html"));
}

TEST_F(DashboardCmd, TheReportIsWrittenWhole) {
  const fs::path out = dir_ / "report.html";
  smelt::test::write_file(out.string(), "an older report");
  CmdRun r = run("report " + run_.string() + " -o " + out.string() + " --title 'Mix A'", dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string html = smelt::test::read_file(out.string());
  EXPECT_EQ(html.rfind("<!doctype html>", 0), 0u);
  EXPECT_NE(html.find("id=\"smelt-data\""), std::string::npos);
  EXPECT_NE(html.find("\"title\":\"Mix A\""), std::string::npos);
  EXPECT_NE(html.rfind("</html>"), std::string::npos);
  for (const auto& e : fs::directory_iterator(dir_)) EXPECT_EQ(e.path().string().find(".tmp-"), std::string::npos) << e.path();
  // A failed report leaves the old file as it was.
  CmdRun bad = run("report " + (dir_ / "missing").string() + " -o " + out.string(), dir_);
  EXPECT_EQ(bad.rc, 1);
  EXPECT_EQ(smelt::test::read_file(out.string()), html);
  EXPECT_EQ(run("report " + run_.string() + " -o " + (dir_ / "no" / "such" / "dir.html").string(), dir_).rc, 1);
}

TEST_F(DashboardCmd, AReportWhoseVitalSignsCannotBeReadStillHasTheCurves) {
  smelt::test::write_file((run_ / "config.toml").string(), "[health.vitals]\npersist = \"often\"\n");
  const fs::path out = dir_ / "report.html";
  CmdRun r = run("report " + run_.string() + " -o " + out.string(), dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("config.toml"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no vital signs"), std::string::npos) << r.err;
  const std::string html = smelt::test::read_file(out.string());
  EXPECT_NE(html.find("\"vitals\":null"), std::string::npos);
  EXPECT_NE(html.find("\"loss\":5.25"), std::string::npos);
}

TEST_F(DashboardCmd, TheDashboardServesAndStopsCleanlyOnSigtermAndSigint) {
  for (int sig : {SIGTERM, SIGINT}) {
    smelt::test::ServeProcess p(run_.string(), dir_ / "dash.err", "dashboard");
    ASSERT_GT(p.port(), 0) << p.log();
    // The light binary serves it itself.
    std::error_code ec;
    EXPECT_EQ(fs::read_symlink("/proc/" + std::to_string(p.pid()) + "/exe", ec).filename(), fs::path(SMELT_BINARY).filename());
    smelt::test::Reply page = smelt::test::http(p.port(), "GET", "/");
    EXPECT_EQ(page.status, 200);
    EXPECT_NE(page.body.find("assets/dashboard.js"), std::string::npos);
    json runs = smelt::test::http(p.port(), "GET", "/api/runs").js();
    ASSERT_EQ(runs["runs"].size(), 1u);
    EXPECT_EQ(runs["runs"][0]["dir"], run_.string());
    smelt::test::PromText m = smelt::test::prom_parse(smelt::test::http(p.port(), "GET", "/metrics").body);
    ASSERT_EQ(m.error, "");
    EXPECT_EQ(m.at("smelt_train_loss{run=run}"), 5.25);
    EXPECT_EQ(p.stop(sig), 0) << p.log();
  }
}
