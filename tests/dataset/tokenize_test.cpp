// The tokenize stage. In-process runs use stand-in encoders whose output is obvious by construction
// (token = byte value, or byte + 70000 for the int32 dtype), so every token, sequence, id and count
// can be checked exactly; kill-and-resume SIGKILLs a forked run mid-way. The `smelt tokenize`
// binary with a real tokenizer file is tested when tests/data/tokenizer/ holds one.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "smelt/dataset/indexed.hpp"
#include "smelt/dataset/lineage.hpp"
#include "smelt/dataset/tokenize.hpp"
#include "test_files.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace smelt;

namespace {

// token = byte value; EOD 256; vocab 257 -> uint16
TokenEncoder byte_encoder(int sleep_us = 0) {
  TokenEncoder e;
  e.encode = [sleep_us](std::string_view text, std::vector<uint32_t>& ids) {
    if (sleep_us) std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
    for (unsigned char c : text) ids.push_back(c);
  };
  e.vocab_size = 257;
  e.eod_id = 256;
  e.content_hash = 0x1234;
  e.path = "bytes";
  return e;
}

// token = 70000 + byte value; EOD 70256; vocab 70257 -> int32
TokenEncoder wide_encoder() {
  TokenEncoder e;
  e.encode = [](std::string_view text, std::vector<uint32_t>& ids) {
    for (unsigned char c : text) ids.push_back(70000u + c);
  };
  e.vocab_size = 70257;
  e.eod_id = 70256;
  e.content_hash = 0x5678;
  e.path = "wide";
  return e;
}

struct Doc {
  std::string id, text, lang;
};

class TokenizeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("smelt_tokenize_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "in");
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes refined-style JSONL: n documents per file, with quality.lang, plus one malformed line and
  // one line without text in the first file. Returns the good documents in input order.
  std::vector<Doc> write_inputs(int files, int per_file, int text_len = 40) {
    std::vector<Doc> docs;
    for (int f = 0; f < files; ++f) {
      std::string lines;
      for (int i = 0; i < per_file; ++i) {
        Doc d;
        d.id = "<urn:uuid:" + std::to_string(f) + "-" + std::to_string(i) + ">";
        d.lang = i % 3 == 0 ? "zh" : "en";
        d.text = d.lang == "zh" ? "中文文本" : "English text";
        d.text += " #" + std::to_string(f * 100000 + i) + " " + std::string(static_cast<size_t>(text_len + i % 7), 'x');
        json j = {{"id", d.id}, {"source", "x.warc:" + std::to_string(i)}, {"text", d.text},
                  {"quality", {{"lang", d.lang}, {"score", 0.9}}}};
        lines += j.dump() + "\n";
        if (f == 0 && i == 2) lines += "{\"id\": \"broken\", \"text\": \"unterminated\n";
        if (f == 0 && i == 4) lines += "{\"id\": \"no-text\", \"body\": \"x\"}\n";
        docs.push_back(d);
      }
      test::write_file((dir_ / "in" / ("part-" + std::to_string(10000 + f) + ".jsonl")).string(), lines);
    }
    return docs;
  }

  TokenizeConfig config(const std::string& name = "tokens") {
    TokenizeConfig c;
    c.inputs = {(dir_ / "in").string()};
    c.output = (dir_ / "out" / name).string();
    c.append_eod = true;
    c.threads = 2;
    c.log_interval_s = 1000;
    return c;
  }

  fs::path dir_;
};

std::vector<uint32_t> bytes_of(const std::string& s, uint32_t base, std::optional<uint32_t> eod) {
  std::vector<uint32_t> v;
  for (unsigned char c : s) v.push_back(base + c);
  if (eod) v.push_back(*eod);
  return v;
}

void check_output(const std::string& prefix, const std::vector<Doc>& docs, IndexedDType dt, uint32_t base,
                  std::optional<uint32_t> eod) {
  IndexedDataset ds;
  Status s = ds.open(prefix);
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(ds.dtype(), dt);
  ASSERT_EQ(ds.sequences(), docs.size());
  ASSERT_EQ(ds.documents(), docs.size());
  LineageReader lin;
  s = lin.open(lineage_path(prefix));
  ASSERT_TRUE(s.is_ok()) << s.message();
  ASSERT_EQ(lin.size(), docs.size());
  for (size_t i = 0; i < docs.size(); ++i) {
    EXPECT_EQ(ds.sequence(i).to_vector(), bytes_of(docs[i].text, base, eod)) << "sequence " << i;
    EXPECT_EQ(lin.id_of(i), docs[i].id) << "sequence " << i;
  }
}

std::string files_of(const std::string& prefix) {
  return test::read_file(prefix + ".bin") + "|" + test::read_file(prefix + ".idx") + "|" +
         test::read_file(prefix + ".docs");
}

json stats_of(const std::string& prefix) {
  json j = json::parse(test::read_file(tokenize_stats_path(prefix)));
  j.erase("timing");
  return j;
}

TEST_F(TokenizeTest, EveryTokenIdAndCount) {
  auto docs = write_inputs(2, 30);
  TokenizeConfig c = config();
  TokenizeSummary sum;
  Status s = tokenize_run(c, byte_encoder(), sum);
  ASSERT_TRUE(s.is_ok()) << s.message();
  check_output(c.output, docs, IndexedDType::kUInt16, 0, 256u);
  EXPECT_EQ(sum.documents, docs.size());
  // no leftovers
  for (const auto& e : fs::directory_iterator(dir_ / "out")) {
    std::string n = e.path().filename().string();
    EXPECT_TRUE(n == "tokens.bin" || n == "tokens.idx" || n == "tokens.docs" || n == "tokens.stats.json" ||
                n == "tokens.tokenize-state.json") << n;
  }
  json st = stats_of(c.output);
  uint64_t bytes = 0, zh_bytes = 0, zh_docs = 0;
  for (const auto& d : docs) {
    bytes += d.text.size();
    if (d.lang == "zh") zh_bytes += d.text.size(), ++zh_docs;
  }
  EXPECT_EQ(st["documents"], docs.size());
  EXPECT_EQ(st["tokens"], bytes + docs.size());
  EXPECT_EQ(st["eod_tokens"], docs.size());
  EXPECT_EQ(st["text_bytes"], bytes);
  EXPECT_DOUBLE_EQ(st["bytes_per_token"].get<double>(), 1.0);  // one token per byte, EOD not counted
  EXPECT_EQ(st["languages"]["zh"]["documents"], zh_docs);
  EXPECT_EQ(st["languages"]["zh"]["text_bytes"], zh_bytes);
  EXPECT_EQ(st["languages"]["zh"]["tokens"], zh_bytes);
  EXPECT_EQ(st["languages"]["en"]["documents"], docs.size() - zh_docs);
  EXPECT_EQ(st["input_issues"]["invalid_json"], 1);
  EXPECT_EQ(st["input_issues"]["missing_text_field"], 1);
  EXPECT_EQ(st["records_skipped"], 2);
  EXPECT_EQ(st["dtype"], "uint16");
  EXPECT_EQ(st["dtype_code"], 8);
  EXPECT_EQ(st["tokenizer"]["content_hash"], "0000000000001234");
  EXPECT_EQ(st["tokenizer"]["eod_id"], 256);
  EXPECT_NE(sum.text.find("bytes/token by language"), std::string::npos) << sum.text;
}

TEST_F(TokenizeTest, Int32WithoutEod) {
  auto docs = write_inputs(1, 12);
  TokenizeConfig c = config();
  c.append_eod = false;
  TokenizeSummary sum;
  Status s = tokenize_run(c, wide_encoder(), sum);
  ASSERT_TRUE(s.is_ok()) << s.message();
  check_output(c.output, docs, IndexedDType::kInt32, 70000, std::nullopt);
  EXPECT_EQ(stats_of(c.output)["dtype"], "int32");
}

TEST_F(TokenizeTest, PlainTextAndZstdInputs) {
  test::write_file((dir_ / "in" / "a.txt").string(), "plain text file");
  std::string line = json({{"id", "z1"}, {"text", "zstd doc"}}).dump() + "\n";
  test::write_file((dir_ / "b.jsonl").string(), line);
  ASSERT_EQ(std::system(("zstd -q -f '" + (dir_ / "b.jsonl").string() + "' -o '" +
                         (dir_ / "in" / "b.jsonl.zst").string() + "'").c_str()), 0);
  TokenizeConfig c = config();
  TokenizeSummary sum;
  ASSERT_TRUE(tokenize_run(c, byte_encoder(), sum).is_ok());
  IndexedDataset ds;
  ASSERT_TRUE(ds.open(c.output).is_ok());
  ASSERT_EQ(ds.sequences(), 2u);
  EXPECT_EQ(ds.sequence(0).to_vector(), bytes_of("plain text file", 0, 256u));
  EXPECT_EQ(ds.sequence(1).to_vector(), bytes_of("zstd doc", 0, 256u));
  LineageReader lin;
  ASSERT_TRUE(lin.open(lineage_path(c.output)).is_ok());
  EXPECT_EQ(lin.id_of(1), "z1");
  EXPECT_EQ(stats_of(c.output)["languages"]["unknown"]["documents"], 2);
}

TEST_F(TokenizeTest, SameOutputForAnyThreadCount) {
  write_inputs(3, 200);
  TokenizeConfig a = config("one"), b = config("four");
  a.threads = 1;
  b.threads = 4;
  TokenizeSummary sum;
  ASSERT_TRUE(tokenize_run(a, byte_encoder(), sum).is_ok());
  ASSERT_TRUE(tokenize_run(b, byte_encoder(), sum).is_ok());
  EXPECT_EQ(files_of(a.output), files_of(b.output));
  EXPECT_EQ(stats_of(a.output)["tokens"], stats_of(b.output)["tokens"]);
}

TEST_F(TokenizeTest, ZeroDocuments) {
  test::write_file((dir_ / "in" / "bad.jsonl").string(), "not json\n{\"no\": \"text\"}\n");
  TokenizeConfig c = config();
  TokenizeSummary sum;
  Status s = tokenize_run(c, byte_encoder(), sum);
  ASSERT_TRUE(s.is_ok()) << s.message();
  IndexedDataset ds;
  ASSERT_TRUE(ds.open(c.output).is_ok());
  EXPECT_EQ(ds.sequences(), 0u);
  EXPECT_EQ(stats_of(c.output)["records_skipped"], 2);
}

TEST_F(TokenizeTest, RerunAndRefusals) {
  write_inputs(1, 5);
  TokenizeConfig c = config();
  TokenizeSummary sum;
  ASSERT_TRUE(tokenize_run(c, byte_encoder(), sum).is_ok());
  std::string first = files_of(c.output);
  TokenizeSummary again;
  ASSERT_TRUE(tokenize_run(c, byte_encoder(), again).is_ok());
  EXPECT_TRUE(again.already_complete);
  // another tokenizer at the same prefix: refused, then replaced with --overwrite
  Status s = tokenize_run(c, wide_encoder(), sum);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("--overwrite"), std::string::npos) << s.message();
  EXPECT_EQ(files_of(c.output), first);
  c.overwrite = true;
  ASSERT_TRUE(tokenize_run(c, wide_encoder(), sum).is_ok());
  IndexedDataset ds;
  ASSERT_TRUE(ds.open(c.output).is_ok());
  EXPECT_EQ(ds.dtype(), IndexedDType::kInt32);
  // --append-eod with a tokenizer without an end-of-document token
  TokenEncoder no_eod = byte_encoder();
  no_eod.eod_id.reset();
  s = tokenize_run(config("x"), no_eod, sum);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("no end-of-document token"), std::string::npos) << s.message();
}

// Runs the stage in a child process and SIGKILLs it once `checkpoints` resume points are on disk.
void run_and_kill(const TokenizeConfig& c, int min_sequences) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    TokenizeSummary sum;
    Status s = tokenize_run(c, byte_encoder(200), sum);
    _exit(s.is_ok() ? 0 : 1);
  }
  const std::string state = tokenize_state_path(c.output);
  bool killed = false;
  for (int i = 0; i < 6000 && !killed; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    json st = json::parse(test::read_file(state), nullptr, false);
    if (!st.is_discarded() && st.value("sequences", 0) >= min_sequences) {
      kill(pid, SIGKILL);
      killed = true;
    }
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(killed) << "the run ended before reaching " << min_sequences << " checkpointed sequences";
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_FALSE(fs::exists(c.output + ".idx"));
}

TEST_F(TokenizeTest, KillAndResumeIsIdentical) {
  auto docs = write_inputs(3, 400);
  TokenizeConfig straight = config("straight");
  TokenizeSummary sum;
  ASSERT_TRUE(tokenize_run(straight, byte_encoder(), sum).is_ok());

  TokenizeConfig c = config("killed");
  c.checkpoint_bytes = 4000;  // about 40 documents
  run_and_kill(c, 150);
  run_and_kill(c, 500);
  json st = json::parse(test::read_file(tokenize_state_path(c.output)));
  EXPECT_GE(st["sequences"].get<int>(), 500);
  TokenizeSummary resumed;
  c.threads = 3;  // the thread count may change between runs
  Status s = tokenize_run(c, byte_encoder(), resumed);
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_TRUE(resumed.resumed);
  EXPECT_EQ(files_of(c.output), files_of(straight.output));
  json a = stats_of(c.output), b = stats_of(straight.output);
  a.erase("outputs");
  b.erase("outputs");
  EXPECT_EQ(a.dump(), b.dump());
  check_output(c.output, docs, IndexedDType::kUInt16, 0, 256u);
  EXPECT_FALSE(fs::exists(c.output + ".bin.partial"));
  EXPECT_FALSE(fs::exists(c.output + ".docs.partial"));
}

TEST_F(TokenizeTest, StopRequestThenResume) {
  auto docs = write_inputs(2, 300);
  TokenizeConfig c = config();
  c.checkpoint_bytes = 2000;
  std::thread stopper([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    tokenize_request_stop();
  });
  TokenizeSummary sum;
  Status s = tokenize_run(c, byte_encoder(1000), sum);
  stopper.join();
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("rerun the same command to resume"), std::string::npos) << s.message();
  s = tokenize_run(c, byte_encoder(), sum);
  ASSERT_TRUE(s.is_ok()) << s.message();
  check_output(c.output, docs, IndexedDType::kUInt16, 0, 256u);
}

}  // namespace
