// Task files (src/smelt/eval/task.cpp): the four kinds read from JSONL with or without a TOML beside
// them, folders, the few-shot split by convention, and every bad input refused naming the file,
// the line and the field.
#include "smelt/eval/task.hpp"

#include <filesystem>

#include <gtest/gtest.h>

#include "test_files.hpp"
#include "train_test_util.hpp"

using namespace smelt;
namespace fs = std::filesystem;

namespace {

class TaskTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::fresh_test_dir("smelt_task"); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string put(const std::string& name, const std::string& text) {
    const std::string p = (dir_ / name).string();
    test::write_file(p, text);
    return p;
  }
  // The message of loading `jsonl` (a multiple-choice task), which must fail.
  std::string refusal(const std::string& jsonl) {
    Task t;
    Status s = task_load(put("bad.jsonl", jsonl), t);
    EXPECT_FALSE(s.is_ok());
    return s.message();
  }
  fs::path dir_;
};

TEST_F(TaskTest, KindsAreInferredFromTheFieldsAndTheTomlSetsTheRest) {
  Task mc, ll, gen, ppl;
  ASSERT_TRUE(task_load(put("mc.jsonl", "{\"context\":\"a\",\"choices\":[\"x\",\"y\",\"z\"],\"gold\":2}\n\n"
                                        "{\"context\":\"b\",\"choices\":[\"x\",\"y\"],\"gold\":0}\n"), mc).is_ok());
  EXPECT_EQ(mc.kind, TaskKind::kMultipleChoice);
  ASSERT_EQ(mc.items.size(), 2u);
  EXPECT_EQ(mc.items[1].line, 3);  // blank lines are skipped, lines still counted
  EXPECT_EQ(mc.metric, "acc_norm");
  EXPECT_NEAR(task_chance(mc), (1.0 / 3 + 1.0 / 2) / 2, 1e-12);
  ASSERT_TRUE(task_load(put("ll.jsonl", "{\"context\":\"a\",\"continuation\":\" b\"}\n"), ll).is_ok());
  EXPECT_EQ(ll.kind, TaskKind::kLoglikelihood);
  EXPECT_EQ(task_chance(ll), -1);
  put("gen.toml", "[task]\nname = \"arith\"\nkind = \"generate\"\nuntil = [\"\\n\"]\nnum_fewshot = 2\n"
                  "normalise = [\"strip\", \"lower\"]\nmax_gen_tokens = 8\n");
  ASSERT_TRUE(task_load(put("gen.jsonl", "{\"context\":\"1+1=\",\"answer\":\"2\"}\n"), gen).is_ok());
  EXPECT_EQ(gen.name, "arith");
  EXPECT_EQ(gen.kind, TaskKind::kGenerate);
  EXPECT_EQ(gen.num_fewshot, 2);
  EXPECT_EQ(gen.until, std::vector<std::string>{"\n"});
  EXPECT_TRUE(gen.normalise.lower);
  EXPECT_EQ(gen.metric, "exact_match");
  put("gen.fewshot.jsonl", "{\"context\":\"2+2=\",\"answer\":\"4\"}\n");
  ASSERT_TRUE(task_load((dir_ / "gen.toml").string(), gen).is_ok());  // the .toml itself, the split by convention
  ASSERT_EQ(gen.fewshot.size(), 1u);
  EXPECT_EQ(gen.fewshot[0].answer, "4");
  ASSERT_TRUE(task_load(put("doc.jsonl", "{\"text\":\"a document\"}\n"), ppl).is_ok());
  EXPECT_EQ(ppl.kind, TaskKind::kPerplexity);
  EXPECT_EQ(ppl.metric, "bits_per_byte");
}

TEST_F(TaskTest, AFolderLoadsEachTaskOnceInNameOrder) {
  put("b.jsonl", "{\"text\":\"x\"}\n");
  put("a.toml", "[task]\nkind = \"loglikelihood\"\nmetric = \"perplexity\"\n");
  put("a.jsonl", "{\"context\":\"a\",\"continuation\":\" b\"}\n");
  put("b.fewshot.jsonl", "{\"text\":\"y\"}\n");
  std::vector<Task> ts;
  ASSERT_TRUE(tasks_load({dir_.string()}, ts).is_ok());
  ASSERT_EQ(ts.size(), 2u);
  EXPECT_EQ(ts[0].name, "a");
  EXPECT_EQ(ts[0].metric, "perplexity");
  EXPECT_EQ(ts[1].name, "b");
  Status twice = tasks_load({dir_.string(), (dir_ / "a.toml").string()}, ts);
  ASSERT_FALSE(twice.is_ok());
  EXPECT_NE(twice.message().find("a second task named \"a\""), std::string::npos) << twice.message();
}

TEST_F(TaskTest, BadItemsAreRefusedWithTheFileLineAndField) {
  const std::string ok = "{\"context\":\"a\",\"choices\":[\"x\",\"y\"],\"gold\":1}\n";
  std::string m = refusal(ok + "{\"context\":\"a\",\"choices\":[\"x\",\"y\"]}\n");
  EXPECT_NE(m.find("bad.jsonl line 2: field \"gold\": missing"), std::string::npos) << m;
  m = refusal(ok + ok + "{\"context\":\"a\",\"choices\":[\"x\",\"y\",\"z\",\"w\"],\"gold\":4}\n");
  EXPECT_NE(m.find("line 3: field \"gold\": 4 is outside the 4 choices (0..3)"), std::string::npos) << m;
  m = refusal(ok + "{\"context\":\"a\",\"choices\":[],\"gold\":0}\n");
  EXPECT_NE(m.find("line 2: field \"choices\": 0 choice(s)"), std::string::npos) << m;
  m = refusal("{\"context\":\"a\",\"choices\":[\"x\",\"\"],\"gold\":0}\n");
  EXPECT_NE(m.find("line 1: field \"choices[1]\": empty"), std::string::npos) << m;
  m = refusal(ok + "{\"choices\":[\"x\",\"y\"],\"gold\":0}\n");
  EXPECT_NE(m.find("line 2: field \"context\": missing"), std::string::npos) << m;
  m = refusal(ok + "{\"context\":7,\"choices\":[\"x\",\"y\"],\"gold\":0}\n");
  EXPECT_NE(m.find("line 2: field \"context\": want a string, got number"), std::string::npos) << m;
  m = refusal(ok + "{\"context\":\"a\",\"choices\":[\"x\",\"y\"],\"gold\":\"x\"}\n");
  EXPECT_NE(m.find("line 2: field \"gold\": want an integer"), std::string::npos) << m;
  m = refusal(ok + "{not json\n");
  EXPECT_NE(m.find("line 2: not valid JSON"), std::string::npos) << m;
  m = refusal("{\"question\":\"a\"}\n");
  EXPECT_NE(m.find("line 1: cannot tell the task's kind"), std::string::npos) << m;
  m = refusal("\n\n");
  EXPECT_NE(m.find("no items"), std::string::npos) << m;
}

TEST_F(TaskTest, BadTomlIsRefusedNamingTheKey) {
  put("t.jsonl", "{\"context\":\"a\",\"choices\":[\"x\",\"y\"],\"gold\":1}\n");
  Task t;
  put("t.toml", "[task]\nkind = \"multiple_choice\"\nmetric = \"exact_match\"\n");
  Status s = task_load((dir_ / "t.toml").string(), t);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("metric \"exact_match\" is not one of a multiple_choice task's (acc_norm, acc)"),
            std::string::npos) << s.message();
  put("t.toml", "[task]\nkind = \"choice\"\n");
  s = task_load((dir_ / "t.toml").string(), t);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("kind = \"choice\""), std::string::npos) << s.message();
  put("t.toml", "[task]\nkind = \"multiple_choice\"\nnum_fewshots = 3\n");
  s = task_load((dir_ / "t.toml").string(), t);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("num_fewshots"), std::string::npos) << s.message();
  put("t.toml", "[task]\nkind = \"multiple_choice\"\ndata = \"missing.jsonl\"\n");
  s = task_load((dir_ / "t.toml").string(), t);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("missing.jsonl not found"), std::string::npos) << s.message();
}

}  // namespace
