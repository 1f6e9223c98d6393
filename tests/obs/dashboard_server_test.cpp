// The dashboard's HTTP routes (obs/dashboard_server.hpp) in process, over raw loopback HTTP: the
// page and every embedded asset byte for byte, the runs, metrics.jsonl by byte offset as the page
// polls it (bad offsets 400, unknown runs 404), no path in a request reaching the file system
// (traversal in every spelling 404s and never shows a file), 405 with Allow for other methods,
// Prometheus text that follows the format and moves with the file, vital signs read again only
// when the file changed, and a stop right after the start.
#include "smelt/obs/dashboard_server.hpp"

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "obs/prom_text.hpp"
#include "serve/raw_http.hpp"
#include "smelt/obs/dashboard_assets.hpp"
#include "test_files.hpp"
#include "train_test_util.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace smelt;

namespace {

constexpr const char* kSecret = "config-secret-7d1f";  // in the run's config.toml: never to be served

class DashboardServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::fresh_test_dir("smelt_dashboard_server");
    run_ = dir_ / "run";
    fs::create_directories(run_);
    test::write_file((run_ / "config.toml").string(), std::string("# ") + kSecret + "\n");
    test::write_file((run_ / "metrics.jsonl").string(),
                     "{\"step\":1,\"loss\":5.0,\"tokens\":64}\n{\"step\":2,\"loss\":4.5,\"tokens\":128}\n");
  }
  void TearDown() override {
    if (server_) {
      server_->stop();
      server_->join();
      server_.reset();
    }
    fs::remove_all(dir_);
  }
  void start(DashboardServerConfig c = {}) {
    std::vector<DashboardRun> runs;
    ASSERT_TRUE(dashboard_runs({run_.string()}, runs).is_ok());
    c.port = 0;
    server_ = std::make_unique<DashboardServer>(runs, c);
    ASSERT_TRUE(server_->bind().is_ok());
    server_->start();
  }
  test::Reply get(const std::string& path) { return test::http(server_->port(), "GET", path); }
  void append(const std::string& text) {
    std::ofstream f(run_ / "metrics.jsonl", std::ios::app);
    f << text;
  }
  fs::path dir_, run_;
  std::unique_ptr<DashboardServer> server_;
};

}  // namespace

TEST_F(DashboardServerTest, ServesThePageEveryAssetAndTheRuns) {
  start();
  test::Reply page = get("/");
  ASSERT_EQ(page.status, 200);
  EXPECT_EQ(page.headers["content-type"], "text/html; charset=utf-8");
  std::string html;
  ASSERT_TRUE(dashboard_page(nullptr, html).is_ok());
  EXPECT_EQ(page.body, html);
  for (const auto& a : dashboard_assets()) {
    test::Reply r = get(std::string("/assets/") + a.name);
    ASSERT_EQ(r.status, 200) << a.name;
    EXPECT_EQ(r.body, std::string(a.text())) << a.name;
    const std::string n = a.name, type = r.headers["content-type"];
    if (n.ends_with(".js")) {
      EXPECT_EQ(type, "text/javascript; charset=utf-8");
    } else if (n.ends_with(".css")) {
      EXPECT_EQ(type, "text/css; charset=utf-8");
    }
  }
  test::Reply head = test::http(server_->port(), "HEAD", "/");
  EXPECT_EQ(head.status, 200);
  EXPECT_TRUE(head.body.empty());
  json runs = get("/api/runs").js();
  ASSERT_EQ(runs["runs"].size(), 1u);
  EXPECT_EQ(runs["runs"][0]["name"], "run");
  EXPECT_EQ(runs["runs"][0]["dir"], run_.string());
  EXPECT_EQ(runs["title"], "Smelt: run");
  EXPECT_EQ(runs["vitals"], false);
  EXPECT_EQ(get("/health").status, 200);
  EXPECT_EQ(get("/favicon.ico").status, 204);
}

TEST_F(DashboardServerTest, MetricsComeByByteOffsetAsThePagePollsThem) {
  start();
  json c = get("/api/runs/0/metrics?from=0").js();
  ASSERT_EQ(c["lines"].size(), 2u);
  EXPECT_EQ(c["lines"][1]["loss"], 4.5);
  EXPECT_EQ(c["reset"], false);
  EXPECT_EQ(c["more"], false);
  const int64_t next = c["next"];
  EXPECT_EQ(next, (int64_t)fs::file_size(run_ / "metrics.jsonl"));
  const std::string q = "/api/runs/0/metrics?from=" + std::to_string(next) + "&file=" + c["file"].get<std::string>();
  EXPECT_TRUE(get(q).js()["lines"].empty());
  append("{\"step\":3,\"loss\":4.0}\nnot json\n{\"step\":4,");
  json d = get(q).js();
  ASSERT_EQ(d["lines"].size(), 1u);
  EXPECT_EQ(d["lines"][0]["step"], 3);
  EXPECT_EQ(d["bad_lines"], 1);
  EXPECT_EQ(d["more"], true) << "a torn line waits";
  EXPECT_EQ(d["from"], next);
  // A rewritten file (another inode) is read from 0.
  test::write_file((run_ / "m.new").string(), "{\"step\":1,\"loss\":9.0}\n");
  fs::rename(run_ / "m.new", run_ / "metrics.jsonl");
  json e = get("/api/runs/0/metrics?from=" + std::to_string(d["next"].get<int64_t>()) + "&file=" + d["file"].get<std::string>()).js();
  EXPECT_EQ(e["reset"], true);
  ASSERT_EQ(e["lines"].size(), 1u);
  EXPECT_EQ(e["lines"][0]["loss"], 9.0);
  for (const char* bad : {"from=abc", "from=-1", "from=1e3", "from=", "from=99999999999999999999"}) {
    test::Reply r = get(std::string("/api/runs/0/metrics?") + bad);
    EXPECT_EQ(r.status, 400) << bad;
    EXPECT_TRUE(r.js().contains("error")) << bad;
  }
  for (const char* run : {"1", "x", "-1", "00000000000000000001"}) EXPECT_EQ(get(std::string("/api/runs/") + run + "/metrics").status, 404) << run;
}

TEST_F(DashboardServerTest, NoPathInARequestReachesTheFileSystem) {
  start();
  const std::string run = run_.string();
  for (const std::string& p : std::vector<std::string>{"/assets/../CMakeLists.txt", "/assets/..%2fCMakeLists.txt", "/assets/%2e%2e/%2e%2e/etc/passwd",
                              "/assets/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd", "/assets//etc/passwd", "/assets/", "/../../../../etc/passwd",
                              "/%2e%2e/%2e%2e/etc/passwd", "/etc/passwd", "/api/runs/0/../../../etc/passwd",
                              "/api/runs/0/config.toml", "/api/runs/0/metrics/../config.toml", "/api/runs/0/..%2fconfig.toml",
                              "/run/config.toml", "/run/metrics.jsonl", run + "/config.toml", "/" + run + "/config.toml",
                              "/assets/" + run + "/config.toml", "/assets/dashboard.js/../../config.toml", "/index.html/../config.toml"}) {
    test::Reply r = get(p);
    EXPECT_EQ(r.status, 404) << p;
    EXPECT_EQ(r.body.find("root:"), std::string::npos) << p;
    EXPECT_EQ(r.body.find("cmake_minimum_required"), std::string::npos) << p;
    EXPECT_EQ(r.body.find(kSecret), std::string::npos) << p;
  }
}

TEST_F(DashboardServerTest, OtherMethodsGet405WithAllowUnknownPaths404) {
  start();
  for (const char* p : {"/", "/api/runs", "/api/runs/0/metrics", "/metrics", "/assets/dashboard.js"}) {
    for (const char* m : {"POST", "PUT", "DELETE", "PATCH"}) {
      test::Reply r = test::http(server_->port(), m, p, "{}");
      EXPECT_EQ(r.status, 405) << m << " " << p;
      EXPECT_EQ(r.headers["allow"], "GET, HEAD") << m << " " << p;
    }
  }
  EXPECT_EQ(test::http(server_->port(), "POST", "/nowhere", "{}").status, 404);
  EXPECT_EQ(get("/nowhere").status, 404);
  EXPECT_TRUE(get("/nowhere").js().contains("error"));
}

TEST_F(DashboardServerTest, PrometheusTextMovesWithTheFile) {
  start();
  test::Reply r = get("/metrics");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["content-type"], "text/plain; version=0.0.4; charset=utf-8");
  test::PromText p = test::prom_parse(r.body);
  ASSERT_EQ(p.error, "") << r.body;
  EXPECT_EQ(p.at("smelt_train_step{run=run}"), 2);
  EXPECT_EQ(p.at("smelt_train_loss{run=run}"), 4.5);
  EXPECT_EQ(p.at("smelt_train_tokens_total{run=run}"), 128);
  append("{\"step\":3,\"loss\":4.25,\"eval_loss\":4.75,\"data_wait_ms\":20}\n");
  p = test::prom_parse(get("/metrics").body);
  ASSERT_EQ(p.error, "");
  EXPECT_EQ(p.at("smelt_train_step{run=run}"), 3);
  EXPECT_EQ(p.at("smelt_train_loss{run=run}"), 4.25);
  EXPECT_EQ(p.at("smelt_train_eval_loss{run=run}"), 4.75);
  EXPECT_DOUBLE_EQ(p.at("smelt_train_data_wait_seconds{run=run}"), 0.02);
}

TEST_F(DashboardServerTest, VitalSignsAreReadAgainOnlyWhenTheFileChanged) {
  DashboardServerConfig c;
  int calls = 0;
  // A stand-in for the vitals reader that counts its calls (what it returns is beside the point).
  c.vitals = [&calls](const DashboardRun& r, json& out) {
    calls++;
    out = {{"run", r.dir}, {"state", "ok"}, {"signs", json::array()}, {"calls", calls}};
    return Status::ok();
  };
  start(c);
  EXPECT_EQ(get("/api/runs").js()["vitals"], true);
  EXPECT_EQ(get("/api/runs/0/vitals").js()["calls"], 1);
  EXPECT_EQ(get("/api/runs/0/vitals").js()["calls"], 1);
  (void)get("/metrics");
  EXPECT_EQ(calls, 1) << "/metrics shares the cache";
  append("{\"step\":3,\"loss\":4.0}\n");
  EXPECT_EQ(get("/api/runs/0/vitals").js()["calls"], 2);
  EXPECT_EQ(get("/api/runs/1/vitals").status, 404);
  test::PromText p = test::prom_parse(get("/metrics").body);
  EXPECT_EQ(p.at("smelt_train_vitals_state{run=run}"), 0);
}

TEST_F(DashboardServerTest, NoVitalsFunctionMeans404) {
  start();
  EXPECT_EQ(get("/api/runs/0/vitals").status, 404);
}

TEST_F(DashboardServerTest, AStopRightAfterTheStartEnds) {
  std::vector<DashboardRun> runs;
  ASSERT_TRUE(dashboard_runs({run_.string()}, runs).is_ok());
  for (int i = 0; i < 20; i++) {
    DashboardServerConfig c;
    c.port = 0;
    DashboardServer s(runs, c);
    ASSERT_TRUE(s.bind().is_ok());
    s.start();
    s.stop();
    EXPECT_TRUE(s.join()) << "round " << i;
  }
}
