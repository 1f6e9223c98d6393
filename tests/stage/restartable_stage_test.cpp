// The restartable-stage skeleton (stage/restartable_stage.hpp) through a toy stage that lists every
// line's id and length: inputs split by task, a stop then a resume equal to a straight run, already
// complete, another run's state refused. Not prep or tokenize themselves (their own tests).
#include "smelt/stage/restartable_stage.hpp"

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "smelt/common/files.hpp"
#include "test_files.hpp"

namespace fs = std::filesystem;

namespace smelt {
namespace {

struct LineItem : StageItem {
  std::string id, text;
  size_t length = 0;
};

struct LineCounters {
  uint64_t lines = 0, files_done = 0;
  std::map<std::string, uint64_t> issues;
};

struct ToyConfig {
  std::vector<std::string> inputs;
  std::string output;
  int task = 0, tasks = 1;
  bool overwrite = false;
  uint64_t stop_after = 0;  // raise the stop flag when this many lines are committed (0: never)
  std::string settings = "a";
};

class ToyRun : public RestartableStage<LineItem, LineCounters> {
 public:
  explicit ToyRun(const ToyConfig& c) : RestartableStage(spec_of(c)), c_(c) {}
  Status run(StageSummary& out) {
    if (Status s = select_inputs(c_.inputs, c_.task, c_.tasks); !s) return s;
    set_fingerprint(c_.settings + "\n" + std::to_string(files_.size()));
    return run_stage(out);
  }
  std::string lines_path() const { return stats_path(); }

 private:
  static StageSpec spec_of(const ToyConfig& c) {
    StageSpec s;
    s.name = "toy";
    s.output = c.output;
    s.complete_for = "these inputs";
    s.threads = 3;
    s.overwrite = c.overwrite;
    s.chunk_docs = 4;
    return s;
  }
  std::string path(const std::string& name) const { return c_.output + "/" + name + suffix_; }
  std::string state_path() const override { return path("state.json"); }
  std::string stats_path() const override { return path("lines.txt"); }
  Status prepare_folder() override {
    fs::create_directories(c_.output);
    return Status::ok();
  }
  Status load_state(const json& st) override {
    n_.lines = st.at("lines");
    lines_ = st.at("text").get<std::string>();
    return Status::ok();
  }
  Status check_no_output() override {
    return fs::exists(stats_path()) ? Status::error("an output without a state") : Status::ok();
  }
  std::string other_run_error() const override { return "another run's output"; }
  Status start_fresh() override {
    n_ = LineCounters{};
    lines_.clear();
    return Status::ok();
  }
  void add_state(json& st, bool) const override {
    st["position"] = position_json();
    st["lines"] = n_.lines;
    st["text"] = lines_;
  }
  ReaderOptions reader_options() const override {
    ReaderOptions o;
    o.text_unit = TextUnit::kLine;
    return o;
  }
  std::string start_note(int threads) const override { return std::to_string(threads) + " thread(s)"; }
  std::string done_note() const override { return std::to_string(n_.lines) + " lines"; }
  size_t take_doc(RawDoc& doc, LineItem& it) override {
    it.id = doc.id;
    it.text = std::move(doc.text);
    return it.text.size();
  }
  std::function<void(LineItem&)> make_worker() override {
    return [](LineItem& it) { it.length = it.text.size(); };
  }
  Status commit_doc(LineItem& it) override {
    lines_ += it.id + " " + std::to_string(it.length) + "\n";
    if (++n_.lines == c_.stop_after) stage_request_stop();
    return n_.lines % 5 == 0 ? persist_state(false) : Status::ok();
  }
  void tick(Progress& p) override { p.tick(n_.lines, bytes_progress_); }
  Status save_on_stop() override { return persist_state(false); }
  Status finish(double, std::string& text) override {
    if (Status s = files_write_atomic(stats_path(), lines_); !s) return s;
    text = done_note();
    return persist_state(true);
  }

  const ToyConfig& c_;
  std::string lines_;
};

class RestartableStageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = fs::temp_directory_path() / ("smelt_stage_" + std::to_string(getpid()));
    fs::remove_all(tmp_);
    fs::create_directories(tmp_ / "in");
    for (int f = 0; f < 5; ++f) {
      std::string text;
      for (int l = 0; l < 20 + f; ++l) text += "file " + std::to_string(f) + " line " + std::string(l, 'x') + "\n";
      test::write_file((tmp_ / "in" / ("f" + std::to_string(f) + ".txt")).string(), text);
    }
  }
  void TearDown() override { fs::remove_all(tmp_); }
  ToyConfig config(const std::string& out) {
    ToyConfig c;
    c.inputs = {(tmp_ / "in").string()};
    c.output = (tmp_ / out).string();
    return c;
  }
  fs::path tmp_;
};

TEST_F(RestartableStageTest, TasksSplitTheInputsAndNameTheirFiles) {
  ToyConfig c = config("task");
  c.task = 1;
  c.tasks = 2;
  ToyRun run(c);
  StageSummary sum;
  Status s = run.run(sum);
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(run.lines_path(), c.output + "/lines.txt-00001");
  const std::string lines = test::read_file(run.lines_path());
  EXPECT_EQ(lines.find("f0.txt"), std::string::npos);
  EXPECT_NE(lines.find("f1.txt"), std::string::npos);
  EXPECT_NE(lines.find("f3.txt"), std::string::npos);
  EXPECT_EQ(sum.text, std::to_string(21 + 23) + " lines");
}

TEST_F(RestartableStageTest, StopThenResumeEqualsAStraightRun) {
  ToyConfig straight = config("straight");
  StageSummary a;
  ToyRun run_a(straight);
  ASSERT_TRUE(run_a.run(a).is_ok());

  ToyConfig c = config("stopped");
  c.stop_after = 37;
  StageSummary b;
  Status s = ToyRun(c).run(b);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("rerun the same command to resume from there"), std::string::npos) << s.message();
  c.stop_after = 0;
  ToyRun run_c(c);
  s = run_c.run(b);
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_TRUE(b.resumed);
  EXPECT_EQ(test::read_file(run_c.lines_path()), test::read_file(run_a.lines_path()));
}

TEST_F(RestartableStageTest, CompleteRunsAreKeptAndOtherRunsRefused) {
  ToyConfig c = config("out");
  StageSummary sum;
  ASSERT_TRUE(ToyRun(c).run(sum).is_ok());
  ASSERT_TRUE(ToyRun(c).run(sum).is_ok());
  EXPECT_TRUE(sum.already_complete);
  EXPECT_EQ(sum.text.rfind("toy " + c.output + ": already complete for these inputs; see ", 0), 0u) << sum.text;
  c.settings = "b";
  StageSummary other;
  Status s = ToyRun(c).run(other);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.message(), "another run's output");
  c.overwrite = true;
  s = ToyRun(c).run(other);
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_FALSE(other.already_complete);
  EXPECT_FALSE(other.resumed);
}

}  // namespace
}  // namespace smelt
