// `smelt tokenizer train` as a user runs it: exit codes for bad usage, tokenizer.json and its
// .info.json provenance, byte-identical output for 1 and 2 threads, and the same tokenizer and
// corpus hash from text files and from a JSONL.zst shard holding the same texts.
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../test_files.hpp"
#include "test_references.hpp"

namespace fs = std::filesystem;

namespace {

const std::string kData = std::string(SMELT_TEST_DATA) + "/tokenizer_train/";

struct CmdResult {
  int rc;
  std::string err;
};

CmdResult run_train(const std::string& args, const fs::path& dir) {
  std::string err = (dir / "stderr.txt").string();
  int st = std::system((std::string(SMELT_BINARY) + " tokenizer train " + args + " 2> " + err).c_str());
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, smelt::test::read_file(err)};
}

class TokenizerTrainCmd : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("smelt_tokenizer_train_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    CmdResult probe = run_train("--help > /dev/null", dir_);
    ASSERT_EQ(probe.rc, 0) << "`smelt tokenizer train --help` failed: " << probe.err;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string inputs() const {
    return kData + "en_coding_style.rst " + kData + "zh_coding_style.rst " + kData + "zh_fortunes_head.u8";
  }
  fs::path dir_;
};

}  // namespace

TEST_F(TokenizerTrainCmd, UsageErrorsExitTwo) {
  EXPECT_EQ(run_train("--input " + inputs(), dir_).rc, 2);                                        // no --output
  EXPECT_EQ(run_train("--input " + (dir_ / "missing.txt").string() + " -o x.json", dir_).rc, 2);  // no such input
  CmdResult r = run_train("--input " + inputs() + " --vocab-size 100 -o " + (dir_ / "t.json").string(), dir_);
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("vocab-size"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "t.json"));
}

TEST_F(TokenizerTrainCmd, WritesTokenizerAndProvenanceIdenticallyForAnyThreadCount) {
  std::string out1 = (dir_ / "t1.json").string(), out2 = (dir_ / "t2.json").string();
  CmdResult r1 = run_train("--input " + inputs() + " --vocab-size 1200 --threads 1 -o " + out1, dir_);
  ASSERT_EQ(r1.rc, 0) << r1.err;
  EXPECT_NE(r1.err.find("distinct kept"), std::string::npos) << r1.err;
  CmdResult r2 = run_train("--input " + inputs() + " --vocab-size 1200 --threads 2 -o " + out2, dir_);
  ASSERT_EQ(r2.rc, 0) << r2.err;
  EXPECT_EQ(smelt::test::read_file(out1), smelt::test::read_file(out2));
  EXPECT_EQ(smelt::test::read_file(out1 + ".info.json"), smelt::test::read_file(out2 + ".info.json"));

  auto tok = nlohmann::json::parse(smelt::test::read_file(out1));
  EXPECT_EQ(tok["model"]["type"], "BPE");
  EXPECT_EQ(tok["model"]["vocab"].size(), 1200u);
  EXPECT_EQ(tok["added_tokens"][0]["content"], "<|endoftext|>");
  EXPECT_EQ(tok["added_tokens"][0]["id"], 0);
  auto info = nlohmann::json::parse(smelt::test::read_file(out1 + ".info.json"));
  EXPECT_EQ(info["corpus"]["documents"], 3);
  EXPECT_EQ(info["corpus"]["hash"].get<std::string>().substr(0, 5), "xxh3:");
  EXPECT_EQ(info["settings"]["vocab_size"], 1200);
  EXPECT_EQ(info["settings"]["pretokenizer"], "gpt2");
  EXPECT_EQ(info["counts"]["merges"], 1200 - 257);
  EXPECT_GT(info["counts"]["distinct_kept"].get<int>(), 1000);
}

TEST_F(TokenizerTrainCmd, JsonlZstShardGivesTheSameTokenizerAsTheTextFiles) {
  SMELT_REQUIRE_REFERENCE(std::system("zstd --version > /dev/null 2>&1") == 0, "zstd (scripts/install-deps)");
  std::string jsonl;
  for (const char* f : {"en_coding_style.rst", "zh_coding_style.rst", "zh_fortunes_head.u8"})
    jsonl += nlohmann::json({{"id", f}, {"text", smelt::test::read_file(kData + f)}}).dump() + "\n";
  smelt::test::write_file((dir_ / "shard.jsonl").string(), jsonl);
  ASSERT_EQ(std::system(("zstd -q " + (dir_ / "shard.jsonl").string()).c_str()), 0);
  fs::remove(dir_ / "shard.jsonl");
  std::string a = (dir_ / "a.json").string(), b = (dir_ / "b.json").string();
  ASSERT_EQ(run_train("--input " + inputs() + " --vocab-size 1000 --special-tokens '<s>,</s>' -o " + a, dir_).rc, 0);
  CmdResult r = run_train("--input " + (dir_ / "shard.jsonl.zst").string() +
                    " --vocab-size 1000 --special-tokens '<s>,</s>' -o " + b, dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(smelt::test::read_file(a), smelt::test::read_file(b));
  auto ia = nlohmann::json::parse(smelt::test::read_file(a + ".info.json"));
  auto ib = nlohmann::json::parse(smelt::test::read_file(b + ".info.json"));
  EXPECT_EQ(ia["corpus"]["hash"], ib["corpus"]["hash"]);
  EXPECT_EQ(ia["settings"]["special_tokens"], nlohmann::json({"<s>", "</s>"}));
}
