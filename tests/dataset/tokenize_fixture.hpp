// The tokenize tests' fixture: stand-in encoders whose output is obvious by construction (token =
// byte value, or byte + 70000 for the int32 dtype), refined-style inputs, and checks of a shard's
// every token and id. Shared by tokenize_test.cpp and tokenize_tasks_test.cpp.
#pragma once
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "smelt/dataset/indexed.hpp"
#include "smelt/dataset/lineage.hpp"
#include "smelt/dataset/tokenize.hpp"
#include "test_files.hpp"

namespace smelt::test_tokenize {

namespace fs = std::filesystem;
using json = nlohmann::json;


// token = byte value; EOD 256; vocab 257 -> uint16
inline TokenEncoder byte_encoder(int sleep_us = 0) {
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
inline TokenEncoder wide_encoder() {
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

inline std::vector<uint32_t> bytes_of(const std::string& s, uint32_t base, std::optional<uint32_t> eod) {
  std::vector<uint32_t> v;
  for (unsigned char c : s) v.push_back(base + c);
  if (eod) v.push_back(*eod);
  return v;
}

inline void check_output(const std::string& prefix, const std::vector<Doc>& docs, IndexedDType dt, uint32_t base,
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

inline std::string files_of(const std::string& prefix) {
  return test::read_file(prefix + ".bin") + "|" + test::read_file(prefix + ".idx") + "|" +
         test::read_file(prefix + ".docs");
}

inline json stats_of(const std::string& prefix) {
  json j = json::parse(test::read_file(tokenize_stats_path(prefix)));
  j.erase("timing");
  return j;
}

}  // namespace smelt::test_tokenize
