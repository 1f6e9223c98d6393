// `smelt tokenize --task I --tasks N` and `smelt tokenize merge`: the tasks' outputs merged are
// byte-identical to a one-task run over the same inputs (so the loader reads the same batches from
// them), for more tasks than files too, on both sides of a held-out split; merges of parts that do
// not make one shard are refused, naming the part and what differs; --concat keeps the order given.
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "smelt/dataset/indexed.hpp"
#include "smelt/dataset/lineage.hpp"
#include "smelt/dataset/tokenize.hpp"
#include "smelt/dataset/tokenize_merge.hpp"
#include "test_files.hpp"
#include "tokenize_fixture.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace smelt;
using namespace smelt::test_tokenize;

namespace {

class TokenizeTasksTest : public TokenizeTest {
 protected:
  // Runs tasks 0..n-1 of `c` (thread counts 1, 2, 3, ...) and returns their prefixes.
  std::vector<std::string> run_tasks(TokenizeConfig c, int n, const TokenEncoder& enc) {
    std::vector<std::string> parts;
    c.tasks = n;
    for (int t = 0; t < n; ++t) {
      c.task = t;
      c.threads = 1 + t % 3;
      TokenizeSummary s;
      Status st = tokenize_run(c, enc, s);
      EXPECT_TRUE(st.is_ok()) << st.message();
      parts.push_back(fmt::format("{}-{:05d}", c.output, t));
    }
    return parts;
  }
  Status merge(std::vector<std::string> parts, const std::string& name, bool concat = false) {
    TokenizeMergeConfig m;
    m.parts = std::move(parts);
    m.output = (dir_ / "out" / name).string();
    m.concat = concat;
    TokenizeMergeSummary s;
    return tokenize_merge(m, s);
  }
};

// The counts a merged shard's stats must share with a one-task run's.
json counts_of(const std::string& prefix) {
  json j = stats_of(prefix), out;
  for (const char* k : {"documents", "sequences", "tokens", "eod_tokens", "text_bytes", "bytes_per_token",
                        "languages", "input_issues", "records_skipped", "holdout", "dtype", "append_eod"})
    if (j.contains(k)) out[k] = j[k];
  for (auto& f : j["task"]["files"]) out["files"].push_back({f["input_index"], f["sequences"]});
  return out;
}

TEST_F(TokenizeTasksTest, MergedTasksAreTheOneTaskRunByteForByte) {
  auto docs = write_inputs(5, 40);
  TokenizeConfig one = config("one");
  TokenizeSummary s;
  ASSERT_TRUE(tokenize_run(one, byte_encoder(), s).is_ok());
  check_output(one.output, docs, IndexedDType::kUInt16, 0, 256u);
  for (int n : {2, 3, 7}) {  // 7: two tasks have no file
    SCOPED_TRACE(n);
    TokenizeConfig c = config(fmt::format("t{}", n));
    std::vector<std::string> parts = run_tasks(c, n, byte_encoder());
    // each task holds its own files' documents only
    EXPECT_EQ(stats_of(parts[1])["task"]["files"].size(), n == 7 ? 1u : (5u + n - 2) / n);
    std::reverse(parts.begin(), parts.end());  // the order of the parts does not matter
    if (n == 3)  // nor whether they are named by prefix or by their files, as a shell glob gives them
      parts = {parts[0] + ".bin", parts[0] + ".idx", parts[1] + ".docs", parts[2] + ".stats.json", parts[2] + ".idx"};
    Status st = merge(parts, fmt::format("m{}", n));
    ASSERT_TRUE(st.is_ok()) << st.message();
    const std::string merged = (dir_ / "out" / fmt::format("m{}", n)).string();
    EXPECT_EQ(files_of(merged), files_of(one.output));
    EXPECT_EQ(counts_of(merged), counts_of(one.output));
    EXPECT_EQ(stats_of(merged)["merged_from"]["order"], "input");
  }
}

// The held-out split is by page, whichever task reads the page: both sides merged equal one task's.
TEST_F(TokenizeTasksTest, HeldOutSplitIsTheSameForAnyTaskCount) {
  write_inputs(4, 60);
  for (bool held : {false, true}) {
    SCOPED_TRACE(held);
    TokenizeConfig one = config(held ? "held" : "rest");
    one.holdout = 0.25;
    one.take_holdout = held;
    TokenizeSummary s;
    ASSERT_TRUE(tokenize_run(one, byte_encoder(), s).is_ok());
    TokenizeConfig c = one;
    c.output += "-tasks";
    std::vector<std::string> parts = run_tasks(c, 3, byte_encoder());
    ASSERT_TRUE(merge(parts, held ? "held-m" : "rest-m").is_ok());
    const std::string merged = (dir_ / "out" / (held ? "held-m" : "rest-m")).string();
    EXPECT_EQ(files_of(merged), files_of(one.output));
    EXPECT_EQ(counts_of(merged), counts_of(one.output));
    EXPECT_EQ(stats_of(merged)["holdout"]["side"], held ? "holdout" : "rest");
  }
}

TEST_F(TokenizeTasksTest, PartsThatAreNotOneShardAreRefused) {
  write_inputs(3, 10);
  TokenizeConfig c = config("t");
  std::vector<std::string> parts = run_tasks(c, 3, byte_encoder());
  auto refused = [&](std::vector<std::string> ps, const std::string& want, bool concat = false) {
    Status st = merge(std::move(ps), "refused", concat);
    ASSERT_FALSE(st.is_ok()) << want;
    EXPECT_NE(st.message().find(want), std::string::npos) << st.message();
    EXPECT_FALSE(fs::exists(dir_ / "out" / "refused.idx"));
  };
  refused({parts[0], parts[2]}, "task(s) 1 are not among the parts");
  // another split of the same inputs
  TokenizeConfig two = config("two");
  std::vector<std::string> halves = run_tasks(two, 2, byte_encoder());
  refused({parts[0], parts[1], halves[1]}, "not one split");
  refused({parts[0], parts[1], parts[2], halves[0]}, "not one split");
  // another tokenizer, at the same task
  TokenizeConfig wide = config("wide");
  std::vector<std::string> wides = run_tasks(wide, 3, wide_encoder());
  refused({parts[0], wides[1], parts[2]}, wides[1] + ": dtype is \"int32\"");
  refused({parts[0], wides[1]}, "share the tokenizer and the settings", true);
  // an incomplete part: its stats are written last but one, so a part without them is not complete
  fs::remove(tokenize_stats_path(parts[1]));
  refused({parts[0], parts[1], parts[2]}, tokenize_stats_path(parts[1]) + ": not found");
  // a damaged one
  std::vector<std::string> again = run_tasks(config("again"), 3, byte_encoder());
  fs::resize_file(indexed_bin_path(again[2]), fs::file_size(indexed_bin_path(again[2])) - 2);
  refused(again, again[2]);
}

TEST_F(TokenizeTasksTest, ConcatKeepsTheOrderGivenAndAnExistingOutputStays) {
  auto docs = write_inputs(2, 15);
  TokenizeConfig a = config("a"), b = config("b");
  a.holdout = b.holdout = 0.3;
  b.take_holdout = true;
  TokenizeSummary s;
  ASSERT_TRUE(tokenize_run(a, byte_encoder(), s).is_ok());
  ASSERT_TRUE(tokenize_run(b, byte_encoder(), s).is_ok());
  // two sides of a split differ in a setting: refused even with --concat
  Status st = merge({a.output, b.output}, "ab", true);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("holdout"), std::string::npos) << st.message();
  // one-task outputs, no split: input order needs task stats of one split; --concat takes them as given
  TokenizeConfig c = config("c"), d = config("d");
  c.inputs = {(dir_ / "in" / "part-10001.jsonl").string()};
  d.inputs = {(dir_ / "in" / "part-10000.jsonl").string()};
  ASSERT_TRUE(tokenize_run(c, byte_encoder(), s).is_ok());
  ASSERT_TRUE(tokenize_run(d, byte_encoder(), s).is_ok());
  st = merge({c.output, d.output}, "cd", true);
  ASSERT_TRUE(st.is_ok()) << st.message();
  std::vector<Doc> want(docs.begin() + 15, docs.end());
  want.insert(want.end(), docs.begin(), docs.begin() + 15);
  check_output((dir_ / "out" / "cd").string(), want, IndexedDType::kUInt16, 0, 256u);
  EXPECT_EQ(stats_of((dir_ / "out" / "cd").string())["documents"], 30);
  EXPECT_EQ(stats_of((dir_ / "out" / "cd").string())["merged_from"]["order"], "as given");
  // the merged output is not replaced without overwrite, and the parts are not outputs
  const std::string before = files_of((dir_ / "out" / "cd").string());
  st = merge({d.output, c.output}, "cd", true);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("--overwrite"), std::string::npos) << st.message();
  EXPECT_EQ(files_of((dir_ / "out" / "cd").string()), before);
  st = merge({c.output, d.output}, "c", true);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("the output is one of the parts"), std::string::npos) << st.message();
}

}  // namespace
