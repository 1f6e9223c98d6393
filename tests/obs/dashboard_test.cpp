// The dashboard's data side (obs/dashboard.hpp) on files whose right answer is plain by
// construction: lines read by byte offset (complete lines only, a torn last line left for later,
// the byte limit), malformed lines skipped and counted, a rewritten or shorter file read again from
// 0, the marks' rules, a run's latest values (downstream tasks' too), the Prometheus text (read back
// by a parser written from the format's specification), run names, and the report as one
// self-contained file.
#include "smelt/obs/dashboard.hpp"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "obs/prom_text.hpp"
#include "smelt/obs/dashboard_assets.hpp"
#include "test_files.hpp"
#include "train_test_util.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace smelt;

namespace {

// {"step":S,"loss":L<extra>}\n
std::string line(int64_t step, double loss, const std::string& extra = "") {
  std::string s = json({{"step", step}, {"loss", loss}}).dump();
  s.pop_back();
  return s + extra + "}\n";
}

void append(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary | std::ios::app);
  f << text;
}

class DashboardData : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::fresh_test_dir("smelt_dashboard");
    run_ = dir_ / "run";
    fs::create_directories(run_);
    path_ = (run_ / "metrics.jsonl").string();
  }
  void TearDown() override { fs::remove_all(dir_); }
  MetricsChunk read(int64_t from, const std::string& id = "", size_t max_bytes = 1 << 20) {
    MetricsChunk c;
    EXPECT_TRUE(dashboard_read_metrics(path_, from, id, max_bytes, c).is_ok());
    return c;
  }
  fs::path dir_, run_;
  std::string path_;
};

}  // namespace

TEST_F(DashboardData, ReadsCompleteLinesFromAnOffsetAndLeavesATornLastLine) {
  const std::string a = line(1, 5.0), b = line(2, 4.5), c = line(3, 4.25);
  test::write_file(path_, a + b + c + "{\"step\":4,\"lo");
  MetricsChunk r = read(0);
  EXPECT_FALSE(r.reset);
  ASSERT_EQ(r.lines.size(), 3u);
  EXPECT_EQ(r.lines[2]["loss"].get<double>(), 4.25);
  EXPECT_EQ(r.next, (int64_t)(a.size() + b.size() + c.size()));
  EXPECT_TRUE(r.more()) << "the torn line is still to come";
  EXPECT_EQ(r.bad_lines, 0);
  // Nothing new is complete: no lines, the same offset.
  MetricsChunk again = read(r.next, r.file_id);
  EXPECT_TRUE(again.lines.empty());
  EXPECT_EQ(again.next, r.next);
  EXPECT_FALSE(again.reset);
  // The writer finishes the line and adds one.
  append(path_, "ss\":4.0}\n" + line(5, 3.5));
  MetricsChunk next = read(r.next, r.file_id);
  EXPECT_FALSE(next.reset);
  ASSERT_EQ(next.lines.size(), 2u);
  EXPECT_EQ(next.lines[0]["step"].get<int64_t>(), 4);
  EXPECT_EQ(next.lines[1]["step"].get<int64_t>(), 5);
  EXPECT_EQ(next.next, (int64_t)fs::file_size(path_));
  EXPECT_FALSE(next.more());
  EXPECT_EQ(next.to_json()["lines"].size(), 2u);
}

TEST_F(DashboardData, MalformedLinesAreSkippedAndCounted) {
  test::write_file(path_, line(1, 5.0) + "not json\n" + "[1, 2]\n" + "{\"loss\": 3}\n" + "{\"step\": \"7\"}\n" +
                              "{\"step\": 1.5}\n" + "\n" + "   \n" + "{\"step\":2,\"event\":\"rollback\",\"to_step\":1}\n" +
                              "{\"step\":3,\"loss\":NaN}\n" + line(3, 4.0));
  MetricsChunk r = read(0);
  ASSERT_EQ(r.lines.size(), 3u);
  EXPECT_EQ(r.lines[1]["event"], "rollback");
  EXPECT_EQ(r.bad_lines, 6) << "not json, an array, no step, a string step, a fractional step, NaN (blank lines are not counted)";
  EXPECT_FALSE(r.more());
}

TEST_F(DashboardData, AFileRewrittenShorterOrReplacedIsReadAgainFromTheStart) {
  std::string text;
  for (int s = 1; s <= 6; s++) text += line(s, 10.0 - s);
  test::write_file(path_, text);
  MetricsChunk r = read(0);
  ASSERT_EQ(r.lines.size(), 6u);
  // A resume truncates the file to its checkpoint's step (here in place: shorter than the offset).
  std::string kept;
  for (int s = 1; s <= 3; s++) kept += line(s, 10.0 - s);
  test::write_file(path_, kept);
  MetricsChunk t = read(r.next, r.file_id);
  EXPECT_TRUE(t.reset);
  EXPECT_EQ(t.from, 0);
  ASSERT_EQ(t.lines.size(), 3u);
  EXPECT_EQ(t.lines[2]["step"].get<int64_t>(), 3);
  // The trainer's way: a new file renamed over the old, here longer than the old offset.
  std::string longer = kept;
  for (int s = 4; s <= 9; s++) longer += line(s, 20.0 - s, ",\"tokens_per_s\":123.5");
  test::write_file(path_ + ".new", longer);
  fs::rename(path_ + ".new", path_);
  MetricsChunk n = read(t.next, t.file_id);
  EXPECT_TRUE(n.reset) << "another inode";
  EXPECT_NE(n.file_id, t.file_id);
  EXPECT_EQ(n.lines.size(), 9u);
  // An offset that does not follow a newline cannot be where a line starts.
  MetricsChunk mid = read(5, n.file_id);
  EXPECT_TRUE(mid.reset);
  EXPECT_EQ(mid.lines.size(), 9u);
  // Past the end of the file.
  EXPECT_TRUE(read((int64_t)longer.size() + 10, n.file_id).reset);
  EXPECT_FALSE(read((int64_t)longer.size(), n.file_id).reset);
}

TEST_F(DashboardData, TheByteLimitSplitsTheFileIntoChunksThatJoinUp) {
  std::string text;
  for (int s = 1; s <= 200; s++) text += line(s, 1.0 / s, ",\"fetch_ms\":{\"p50\":0.5,\"p95\":1.5,\"p99\":2.5}");
  test::write_file(path_, text);
  int64_t from = 0, expect_step = 1;
  std::string id;
  int chunks = 0;
  while (true) {
    MetricsChunk c = read(from, id, 1000);
    EXPECT_FALSE(c.reset);
    EXPECT_EQ(c.from, from);
    ASSERT_FALSE(c.lines.empty());
    EXPECT_LE(c.next - c.from, 1000 + 200) << "about max_bytes (a line may cross it)";
    for (const auto& l : c.lines) EXPECT_EQ(l["step"].get<int64_t>(), expect_step++);
    from = c.next;
    id = c.file_id;
    chunks++;
    if (!c.more()) break;
  }
  EXPECT_EQ(expect_step, 201);
  EXPECT_GT(chunks, 10);
}

TEST_F(DashboardData, ALineLongerThanTheLimitIsSkippedWithoutHoldingIt) {
  std::string huge = "{\"step\":2,\"junk\":\"" + std::string(17u << 20, 'x') + "\"}\n";
  test::write_file(path_, line(1, 2.0) + huge + line(3, 1.0));
  MetricsChunk r = read(0, "", 64u << 20);
  ASSERT_EQ(r.lines.size(), 2u);
  EXPECT_EQ(r.lines[1]["step"].get<int64_t>(), 3);
  EXPECT_EQ(r.bad_lines, 1);
  EXPECT_EQ(r.next, (int64_t)fs::file_size(path_));
}

TEST(DashboardMarks, EventsSkippedStepsSpikesAndCheckpoints) {
  DashboardMarks m;
  auto marks = [&](const std::string& s) { return m.next(json::parse(s)); };
  using V = std::vector<std::string>;
  EXPECT_EQ(marks(R"({"step":1,"loss":3})"), V{});
  // an async save: the first has no write rate yet; the step after waits for its staging copy
  EXPECT_EQ(marks(R"({"step":2,"loss":3,"ckpt_stall_ms":0.5})"), V{"checkpoint"});
  EXPECT_EQ(marks(R"({"step":3,"loss":3,"ckpt_stall_ms":2.5})"), V{}) << "the staging wait of step 2's save";
  EXPECT_EQ(marks(R"({"step":4,"loss":3})"), V{});
  EXPECT_EQ(marks(R"({"step":5,"loss":3,"ckpt_stall_ms":0.5,"ckpt_write_mb_s":900})"), V{"checkpoint"});
  EXPECT_EQ(marks(R"({"step":6,"loss":3,"ckpt_stall_ms":0.5,"ckpt_write_mb_s":900})"), V{"checkpoint"}) << "save_every = 1";
  EXPECT_EQ(marks(R"({"step":7,"loss":null,"grad_norm":null,"skipped":"nonfinite"})"), (V{"skipped"}));
  EXPECT_EQ(marks(R"({"step":8,"loss":9,"loss_spike":1})"), V{"loss_spike"});
  EXPECT_EQ(marks(R"({"step":8,"event":"rollback","to_step":5,"documents":12})"), V{"rollback"});
  EXPECT_EQ(marks(R"({"step":9,"event":"lr_restart"})"), V{"lr_restart"});
  EXPECT_EQ(marks(R"({"step":9,"event":7})"), V{"event"});
}

TEST_F(DashboardData, LatestValuesFollowTheFileIncrementally) {
  test::write_file(path_, "{\"step\":0,\"eval_loss\":9.5}\n" + line(1, 5.0, ",\"tokens\":100,\"fetch_ms\":{\"p95\":1.5}") +
                              line(2, 4.0, ",\"tokens\":200,\"ckpt_stall_ms\":1,\"loss_by_source\":{\"web\":4.5}"));
  DashboardLatest l;
  ASSERT_TRUE(l.update(path_).is_ok());
  EXPECT_EQ(l.step, 2);
  EXPECT_EQ(l.values["loss"], 4.0);
  EXPECT_EQ(l.values["eval_loss"], 9.5) << "the last line holding it";
  EXPECT_EQ(l.values["tokens"], 200);
  EXPECT_EQ(l.values["fetch_ms.p95"], 1.5);
  EXPECT_EQ(l.values["loss_by_source.web"], 4.5);
  EXPECT_EQ(l.events["checkpoint"], 1);
  EXPECT_EQ(l.lines, 3);
  const int64_t at = l.offset;
  append(path_, "garbage\n" + line(3, 3.0, ",\"grad_norm\":null,\"skipped\":\"nonfinite\"") + line(2, 3.5));
  ASSERT_TRUE(l.update(path_).is_ok());
  EXPECT_GT(l.offset, at);
  EXPECT_EQ(l.bad_lines, 1);
  EXPECT_EQ(l.step, 2) << "file order";
  EXPECT_EQ(l.values["loss"], 3.5);
  EXPECT_TRUE(std::isnan(l.values["grad_norm"]));
  EXPECT_EQ(l.events["skipped"], 1);
  EXPECT_EQ(l.events["restart"], 1) << "step 2 after step 3";
  // Rewritten: everything is read again.
  test::write_file(path_ + ".new", line(1, 7.0));
  fs::rename(path_ + ".new", path_);
  ASSERT_TRUE(l.update(path_).is_ok());
  EXPECT_EQ(l.step, 1);
  EXPECT_EQ(l.values["loss"], 7.0);
  EXPECT_EQ(l.values.count("eval_loss"), 0u);
  EXPECT_EQ(l.bad_lines, 0);
  EXPECT_TRUE(l.events.empty());
}

TEST_F(DashboardData, LatestTaskValuesAndMetrics) {
  const std::string tasks = R"(,"tasks":{"arc":{"metric":"acc_norm","value":0.25,"stderr":0.03,"chance":0.25,"items":200},)"
                            R"("wiki":{"metric":"bits_per_byte","value":2.5,"stderr":0.05,"chance":null,"items":50}})";
  test::write_file(path_, line(10, 5.0, tasks) + line(11, 4.9) +
                              line(20, 4.0, R"(,"tasks":{"arc":{"metric":"acc_norm","value":0.4125,"stderr":0.0348,"chance":0.25},)"
                                            R"("wiki":{"metric":"bits_per_byte","value":null,"stderr":null,"chance":null}})"));
  DashboardLatest l;
  ASSERT_TRUE(l.update(path_).is_ok());
  EXPECT_EQ(l.values["tasks.arc.value"], 0.4125);
  EXPECT_EQ(l.values["tasks.arc.stderr"], 0.0348);
  EXPECT_TRUE(std::isnan(l.values["tasks.wiki.value"])) << "the last evaluation's value was null";
  EXPECT_EQ(l.values.count("tasks.arc.chance"), 0u) << "only the value and its error";
  EXPECT_EQ(l.task_metrics["arc"], "acc_norm");
  EXPECT_EQ(l.task_metrics["wiki"], "bits_per_byte");
}

TEST_F(DashboardData, PrometheusTextFollowsTheFormatAndCarriesTheLatestValues) {
  test::write_file(path_, "{\"step\":0,\"eval_loss\":9.5,\"eval_bpb\":3.25,\"tasks\":{\"arc \\\"e\\\"\":{\"metric\":\"acc_norm\","
                         "\"value\":0.4125,\"stderr\":0.0348,\"chance\":0.25},\"wiki\":{\"metric\":\"bits_per_byte\","
                         "\"value\":null,\"stderr\":null,\"chance\":null}}}\n" +
                              line(1, 5.0, ",\"lr\":0.001,\"grad_norm\":1.5,\"grad_norm_ratio\":0.75,\"tokens\":4096,"
                                           "\"tokens_per_s\":1000,\"mfu\":0.5,\"mfu_peak\":0.05,\"step_ms\":250,"
                                           "\"data_wait_ms\":12.5,\"fetch_ms\":{\"p50\":0.5,\"p95\":1.5,\"p99\":2.5},"
                                           "\"loss_by_source\":{\"web \\\"en\\\"\":5.5},\"ckpt_stall_ms\":1,"
                                           "\"ckpt_write_mb_s\":800,\"allreduce_wait_ms\":4") +
                              "bad\n{\"step\":2,\"loss\":null}\n");
  const fs::path other = dir_ / "b\\\"q";
  fs::create_directories(other);
  test::write_file((other / "metrics.jsonl").string(), line(7, 2.5));
  std::vector<DashboardRun> runs;
  ASSERT_TRUE(dashboard_runs({run_.string(), other.string()}, runs).is_ok());
  std::vector<DashboardLatest> latest(2);
  for (int i = 0; i < 2; i++) ASSERT_TRUE(latest[i].update(runs[i].metrics_path()).is_ok());
  const json vitals = {{"run", run_.string()}, {"state", "warn"}, {"signs", {{{"name", "data_wait"}, {"state", "warn"}, {"value", 12.5}},
                                                                              {{"name", "attn_sparsity"}, {"state", "unknown"}, {"value", nullptr}},
                                                                              {{"name", "grad_norm_ratio"}, {"state", "bad"}, {"value", 6.0}}}}};
  const std::string text = dashboard_prometheus(runs, latest, {vitals, json()});
  const test::PromText p = test::prom_parse(text);
  ASSERT_EQ(p.error, "") << text;
  const std::string a = "run=run", b = "run=b\\\"q";
  EXPECT_EQ(p.at("smelt_train_step{" + a + "}"), 2);
  EXPECT_EQ(p.at("smelt_train_step{" + b + "}"), 7) << "the label value's quote and backslash escaped";
  EXPECT_TRUE(std::isnan(p.at("smelt_train_loss{" + a + "}"))) << "the last step's loss was null";
  EXPECT_EQ(p.at("smelt_train_loss{" + b + "}"), 2.5);
  EXPECT_EQ(p.at("smelt_train_eval_loss{" + a + "}"), 9.5);
  EXPECT_EQ(p.at("smelt_train_eval_bits_per_byte{" + a + "}"), 3.25);
  EXPECT_EQ(p.at("smelt_train_learning_rate{" + a + "}"), 0.001);
  EXPECT_EQ(p.at("smelt_train_grad_norm{" + a + "}"), 1.5);
  EXPECT_EQ(p.at("smelt_train_grad_norm_ratio{" + a + "}"), 0.75);
  EXPECT_EQ(p.at("smelt_train_tokens_total{" + a + "}"), 4096);
  EXPECT_EQ(p.at("smelt_train_tokens_per_second{" + a + "}"), 1000);
  EXPECT_EQ(p.at("smelt_train_mfu_ratio{" + a + "}"), 0.5);
  EXPECT_EQ(p.at("smelt_train_mfu_peak_ratio{" + a + "}"), 0.05);
  EXPECT_DOUBLE_EQ(p.at("smelt_train_step_seconds{" + a + "}"), 0.25);
  EXPECT_DOUBLE_EQ(p.at("smelt_train_data_wait_seconds{" + a + "}"), 0.0125);
  EXPECT_DOUBLE_EQ(p.at("smelt_train_allreduce_wait_seconds{" + a + "}"), 0.004);
  EXPECT_DOUBLE_EQ(p.at("smelt_train_checkpoint_write_bytes_per_second{" + a + "}"), 8e8);
  EXPECT_DOUBLE_EQ(p.at("smelt_train_data_fetch_seconds{quantile=0.95," + a + "}"), 0.0015);
  EXPECT_DOUBLE_EQ(p.at("smelt_train_data_fetch_seconds{quantile=0.5," + a + "}"), 0.0005);
  EXPECT_EQ(p.at("smelt_train_source_loss{" + a + ",source=web \"en\"}"), 5.5);
  EXPECT_EQ(p.at("smelt_train_task_value{metric=acc_norm," + a + ",task=arc \"e\"}"), 0.4125);
  EXPECT_EQ(p.at("smelt_train_task_stderr{metric=acc_norm," + a + ",task=arc \"e\"}"), 0.0348);
  EXPECT_TRUE(std::isnan(p.at("smelt_train_task_value{metric=bits_per_byte," + a + ",task=wiki}")));
  EXPECT_FALSE(p.has("smelt_train_task_value{metric=acc_norm," + b + ",task=arc \"e\"}"));
  EXPECT_EQ(p.at("smelt_train_events_total{kind=checkpoint," + a + "}"), 1);
  EXPECT_EQ(p.at("smelt_train_metrics_bad_lines{" + a + "}"), 1);
  EXPECT_GT(p.at("smelt_train_last_update_timestamp_seconds{" + a + "}"), 1.6e9);
  EXPECT_EQ(p.at("smelt_train_vitals_state{" + a + "}"), 1);
  EXPECT_FALSE(p.has("smelt_train_vitals_state{" + b + "}")) << "no vital signs for it";
  EXPECT_EQ(p.at("smelt_train_vital_sign_state{" + a + ",sign=data_wait}"), 1);
  EXPECT_EQ(p.at("smelt_train_vital_sign_state{" + a + ",sign=grad_norm_ratio}"), 2);
  EXPECT_EQ(p.at("smelt_train_vital_sign_state{" + a + ",sign=attn_sparsity}"), -1);
  EXPECT_EQ(p.at("smelt_train_vital_sign_value{" + a + ",sign=data_wait}"), 12.5);
  EXPECT_FALSE(p.has("smelt_train_vital_sign_value{" + a + ",sign=attn_sparsity}"));
  for (const auto& [name, fam] : p.families) {
    EXPECT_FALSE(fam.help.empty()) << name;
    EXPECT_TRUE(fam.type == "gauge" || fam.type == "counter") << name;
    EXPECT_EQ(name.rfind("smelt_train_", 0), 0u) << name;
    if (fam.type == "counter") {
      EXPECT_NE(name.find("_total"), std::string::npos) << name;
    }
  }
  // The parser is strict: it refuses what the format does not allow.
  EXPECT_NE(test::prom_parse("a 1\nb 2\na 3\n").error, "");
  EXPECT_NE(test::prom_parse("a{x=\"1\"} nan\n").error, "");
  EXPECT_NE(test::prom_parse("a{x=\"\\t\"} 1\n").error, "");
  EXPECT_NE(test::prom_parse("a 1\n# TYPE a gauge\n").error, "");
  EXPECT_NE(test::prom_parse("a 1\na 2\n").error, "");
  EXPECT_EQ(test::prom_parse("# TYPE a gauge\na{x=\"\\\"\"} -Inf 17\n").error, "");
}

TEST_F(DashboardData, RunsNeedMetricsAndGetNamesThatTellThemApart) {
  std::vector<DashboardRun> runs;
  fs::create_directories(dir_ / "x" / "run");
  fs::create_directories(dir_ / "empty");
  test::write_file((dir_ / "x" / "run" / "metrics.jsonl").string(), line(1, 1));
  test::write_file(path_, line(1, 1));
  Status s = dashboard_runs({(dir_ / "empty").string()}, runs);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find((dir_ / "empty").string()), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("metrics.jsonl"), std::string::npos) << s.message();
  s = dashboard_runs({(dir_ / "nowhere").string()}, runs);
  EXPECT_NE(s.message().find("nowhere"), std::string::npos) << s.message();
  EXPECT_FALSE(dashboard_runs({}, runs).is_ok());
  ASSERT_TRUE(dashboard_runs({run_.string() + "/", (dir_ / "x" / "run").string()}, runs).is_ok());
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].name, dir_.filename().string() + "/run");
  EXPECT_EQ(runs[1].name, "x/run");
  ASSERT_TRUE(dashboard_runs({run_.string()}, runs).is_ok());
  EXPECT_EQ(runs[0].name, "run");
  ASSERT_TRUE(dashboard_runs({run_.string(), run_.string()}, runs).is_ok());
  EXPECT_NE(runs[0].name, runs[1].name);
}

TEST_F(DashboardData, TheServedPageNamesOnlyEmbeddedAssets) {
  std::string html;
  ASSERT_TRUE(dashboard_page(nullptr, html).is_ok());
  const std::regex ref("(?:src|href)=\"([^\"]*)\"");
  int n = 0;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), ref); it != std::sregex_iterator(); ++it) {
    const std::string url = (*it)[1];
    ASSERT_EQ(url.rfind("assets/", 0), 0u) << url;
    bool found = false;
    for (const auto& a : dashboard_assets()) found = found || url.substr(7) == a.name;
    EXPECT_TRUE(found) << url << " is not embedded";
    n++;
  }
  EXPECT_EQ(n, 4);
  // The embedded bytes are the files in the tree (the build regenerates them when those change).
  for (const auto& [name, path] : {std::pair{"dashboard.js", "web/dashboard.js"}, {"uPlot.iife.min.js", "third_party/uplot/uPlot.iife.min.js"}}) {
    bool same = false;
    for (const auto& a : dashboard_assets())
      if (a.name == std::string(name)) same = a.text() == test::read_file(std::string(SMELT_SOURCE_DIR) + "/" + path);
    EXPECT_TRUE(same) << name;
  }
}

TEST_F(DashboardData, TheReportIsOneSelfContainedFile) {
  test::write_file(path_, line(1, 5.0) + "oops\n" + line(2, 4.0, ",\"loss_by_source\":{\"</script><script>alert(1)</script>\":4}"));
  std::vector<DashboardRun> runs;
  ASSERT_TRUE(dashboard_runs({run_.string()}, runs).is_ok());
  json data;
  const json vitals = {{"state", "ok"}, {"signs", json::array()}};
  ASSERT_TRUE(dashboard_report_data(runs, {vitals}, "T <b>", data).is_ok());
  ASSERT_EQ(data["runs"].size(), 1u);
  EXPECT_EQ(data["runs"][0]["lines"].size(), 2u);
  EXPECT_EQ(data["runs"][0]["bad_lines"], 1);
  EXPECT_EQ(data["runs"][0]["vitals"], vitals);
  EXPECT_EQ(data["title"], "T <b>");
  std::string html;
  ASSERT_TRUE(dashboard_page(&data, html).is_ok());
  // Nothing to fetch: the markup outside scripts, styles and comments has no src or href
  // attribute, no <link>, no URL; the styles load nothing (url(), @import).
  std::string markup = html, styles;
  for (const auto& [open_tag, close_tag] : {std::pair{"<script", "</script>"}, {"<style", "</style>"}, {"<!--", "-->"}}) {
    for (size_t b; (b = markup.find(open_tag)) != std::string::npos;) {
      const size_t e = markup.find(close_tag, b);
      ASSERT_NE(e, std::string::npos) << open_tag;
      if (std::string(open_tag) == "<style") styles += markup.substr(b, e - b);
      markup.erase(b, e + std::strlen(close_tag) - b);
    }
  }
  EXPECT_FALSE(std::regex_search(markup, std::regex("\\s(src|href)\\s*=", std::regex::icase))) << markup;
  EXPECT_FALSE(std::regex_search(markup, std::regex("<link", std::regex::icase))) << markup;
  EXPECT_FALSE(std::regex_search(markup, std::regex("(https?:)?//", std::regex::icase))) << markup;
  EXPECT_EQ(styles.find("url("), std::string::npos);
  EXPECT_EQ(styles.find("@import"), std::string::npos);
  EXPECT_NE(markup.find("id=\"charts\""), std::string::npos) << "the page's body is left";
  EXPECT_EQ(html.find("<!--smelt:data-->"), std::string::npos);
  // The scripts and styles are there, in full; uPlot's licence with it.
  for (const auto& a : dashboard_assets()) {
    const std::string name = a.name;
    if (name == "dashboard.css" || name == "uPlot.min.css") {
      EXPECT_NE(html.find(std::string(a.text())), std::string::npos) << name;
    }
  }
  EXPECT_NE(html.find("Permission is hereby granted"), std::string::npos);
  EXPECT_NE(html.find("function marksPlugin"), std::string::npos);
  // Three scripts: uPlot, the page's, the data; the data reads back unchanged and the name that
  // holds "</script>" did not end its element.
  const std::regex script("<script([^>]*)>");
  int scripts = 0;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), script); it != std::sregex_iterator(); ++it) scripts++;
  EXPECT_EQ(scripts, 3);
  const std::string open = "<script type=\"application/json\" id=\"smelt-data\">";
  const size_t at = html.find(open);
  ASSERT_NE(at, std::string::npos);
  const size_t end = html.find("</script>", at);
  const json back = json::parse(html.substr(at + open.size(), end - at - open.size()));
  EXPECT_EQ(back, data);
}
