// lm-evaluation-harness sample files into tasks (src/smelt/eval/harness_samples.cpp): both shapes
// of "arguments", the four kinds, the gold as an index or as a choice's text, every problem named
// by file, line and field, and a written task that loads back with the harness's texts intact
// (prompt = its arg_0, target_delimiter + choice = its arg_1: Smelt scores what the harness scored).
#include "smelt/eval/harness_samples.hpp"

#include <filesystem>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "smelt/eval/run.hpp"
#include "test_files.hpp"
#include "train_test_util.hpp"

using namespace smelt;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// One sample line in the harness's dict shape of "arguments".
std::string sample(int doc, const json& target, const std::string& ctx, const std::vector<json>& arg1) {
  json args = json::object();
  for (size_t i = 0; i < arg1.size(); i++) {
    json a = {{"arg_0", ctx}};
    if (!arg1[i].is_null()) a["arg_1"] = arg1[i];
    args["gen_args_" + std::to_string(i)] = a;
  }
  return json{{"doc_id", doc}, {"doc", {{"q", "x"}}}, {"target", target}, {"arguments", args}, {"resps", json::array()},
              {"filtered_resps", json::array()}, {"filter", "none"}, {"metrics", {"acc", "acc_norm"}}}
             .dump() + "\n";
}

class HarnessSamplesTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::fresh_test_dir("smelt_harness_samples"); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string put(const std::string& name, const std::string& text) {
    const std::string p = (dir_ / name).string();
    test::write_file(p, text);
    return p;
  }
  fs::path dir_;
};

TEST_F(HarnessSamplesTest, MultipleChoiceKeepsTheHarnessTextsAndLoadsBack) {
  const std::string ctx = "Question: Which is a colour?\nAnswer:";
  const std::string p = put("samples_arc_easy_2026.jsonl",
                            sample(0, 2, ctx, {" dog", " run", " blue", " seven"}) +
                                sample(1, "the moon", "Q: What orbits the earth?\nA:", {" the sun", " the moon"}) +
                                sample(2, "0", "Q: 1+1?\nA:", {" 2", " 3"}));
  Task t;
  ASSERT_TRUE(harness_samples_read(p, t).is_ok());
  EXPECT_EQ(t.name, "arc_easy_2026");
  EXPECT_EQ(t.kind, TaskKind::kMultipleChoice);
  EXPECT_EQ(t.target_delimiter, " ");  // the common leading space, so acc_norm divides the choice text alone
  ASSERT_EQ(t.items.size(), 3u);
  EXPECT_EQ(t.items[0].choices, (std::vector<std::string>{"dog", "run", "blue", "seven"}));
  EXPECT_EQ(t.items[0].gold, 2);
  EXPECT_EQ(t.items[1].gold, 1);  // the target as the text of a choice
  EXPECT_EQ(t.items[2].gold, 0);  // as digits
  ASSERT_TRUE(task_write((dir_ / "out" / "arc").string(), t).is_ok());
  Task back;
  ASSERT_TRUE(task_load((dir_ / "out" / "arc.toml").string(), back).is_ok());
  EXPECT_EQ(back.kind, TaskKind::kMultipleChoice);
  EXPECT_EQ(back.metric, "acc_norm");
  EXPECT_EQ(back.num_fewshot, 0);  // the harness's prompts hold their examples already
  ASSERT_EQ(back.items.size(), 3u);
  EXPECT_EQ(eval_prompt(back, 0, back.num_fewshot, 1234), ctx);
  EXPECT_EQ(back.target_delimiter + back.items[0].choices[2], " blue");
  EXPECT_EQ(back.items[1].gold, 1);
}

TEST_F(HarnessSamplesTest, TheOtherKindsAndTheOlderListShape) {
  // loglikelihood (LAMBADA), in the older [[arg_0, arg_1], ...] shape.
  json old = {{"doc_id", 0}, {"target", " word"}};
  old["arguments"] = json::array({json::array({"He said the last", " word"})});
  Task ll;
  ASSERT_TRUE(harness_samples_read(put("ll.jsonl", old.dump() + "\n"), ll).is_ok());
  EXPECT_EQ(ll.kind, TaskKind::kLoglikelihood);
  EXPECT_EQ(ll.target_delimiter + ll.items[0].continuation, " word");
  // generate_until (GSM8K): arg_1 the generation settings, the answer in "target".
  Task gen;
  json settings = json::object();
  settings["until"] = {"Question:", "\n\n"};
  settings["do_sample"] = false;
  Status gs = harness_samples_read(put("gen.jsonl", sample(0, "#### 15", "Q: 3*5?\nA:", {settings})), gen);
  ASSERT_TRUE(gs.is_ok()) << gs.message();
  EXPECT_EQ(gen.kind, TaskKind::kGenerate);
  EXPECT_EQ(gen.items[0].answer, "#### 15");
  EXPECT_EQ(gen.items[0].until, (std::vector<std::string>{"Question:", "\n\n"}));
  EXPECT_EQ(gen.target_delimiter, "");
  // loglikelihood_rolling (WikiText): arg_0 alone.
  Task ppl;
  ASSERT_TRUE(harness_samples_read(put("ppl.jsonl", sample(0, "", "A whole document.\nTwo lines.", {json()})), ppl).is_ok());
  EXPECT_EQ(ppl.kind, TaskKind::kPerplexity);
  EXPECT_EQ(ppl.items[0].text, "A whole document.\nTwo lines.");
  ASSERT_TRUE(task_write((dir_ / "w" / "ppl").string(), ppl).is_ok());
  Task back;
  ASSERT_TRUE(task_load((dir_ / "w" / "ppl.jsonl").string(), back).is_ok());
  EXPECT_EQ(back.items[0].text, ppl.items[0].text);
}

TEST_F(HarnessSamplesTest, BadLinesAreNamedByFileLineAndField) {
  Task t;
  Status s = harness_samples_read(put("a.jsonl", sample(0, 1, "c", {" x", " y"}) + sample(1, 5, "c", {" x", " y"})), t);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("a.jsonl line 2: field \"target\": 5 is not one of the 2 choices"), std::string::npos)
      << s.message();
  s = harness_samples_read(put("b.jsonl", sample(0, 1, "c", {" x", " y"}) + sample(1, "z", "c", {" z"})), t);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("b.jsonl line 2: field \"arguments\": a loglikelihood request in a multiple_choice file"),
            std::string::npos) << s.message();
  s = harness_samples_read(put("c.jsonl", "{\"doc_id\": 0}\n"), t);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("c.jsonl line 1: field \"arguments\": missing"), std::string::npos) << s.message();
  s = harness_samples_read(put("d.jsonl", "not json\n"), t);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("d.jsonl line 1: not a JSON object"), std::string::npos) << s.message();
}

}  // namespace
