// Lineage sidecar (.docs): round trip for every sequence, random access, resume after a cut, and
// damaged files refused with the file and offset named.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "smelt/dataset/lineage.hpp"
#include "test_files.hpp"

namespace fs = std::filesystem;
using namespace smelt;

namespace {

class LineageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("smelt_lineage_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "tokens.docs").string();
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
  std::string path_;
};

std::vector<std::string> make_ids(int n) {
  std::vector<std::string> v;
  for (int i = 0; i < n; ++i) v.push_back("<urn:uuid:" + std::to_string(i * 7919) + ">");
  v.push_back("");                                  // an empty id
  v.push_back("part-00000.jsonl.zst:12");            // file:line
  v.push_back(std::string("中文 id\0with nul", 17));  // any bytes
  return v;
}

void write_ids(const std::string& path, const std::vector<std::string>& ids) {
  LineageWriter w;
  ASSERT_TRUE(w.open(path).is_ok());
  for (const auto& id : ids) ASSERT_TRUE(w.add(id).is_ok());
  Status s = w.finish();
  ASSERT_TRUE(s.is_ok()) << s.message();
}

TEST_F(LineageTest, RoundTripEverySequence) {
  auto ids = make_ids(1000);
  write_ids(path_, ids);
  EXPECT_FALSE(fs::exists(path_ + ".partial"));
  LineageReader r;
  Status s = r.open(path_);
  ASSERT_TRUE(s.is_ok()) << s.message();
  ASSERT_EQ(r.size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(r.id_of(i), ids[i]) << i;
  // random order
  for (size_t i : {502u, 0u, 1002u, 17u}) EXPECT_EQ(r.id_of(i), ids[i]);
  std::string_view v;
  EXPECT_FALSE(r.id_checked(ids.size(), v).is_ok());
}

TEST_F(LineageTest, ExactLayout) {
  write_ids(path_, {"ab", "c"});
  std::string f = test::read_file(path_);
  std::string want("SMELTDOC", 8);
  auto u32 = [&](uint32_t v) { want.append(reinterpret_cast<const char*>(&v), 4); };
  auto u64 = [&](uint64_t v) { want.append(reinterpret_cast<const char*>(&v), 8); };
  u32(1); u32(0); u64(2); u64(32 + 6 + 5);
  u32(2); want += "ab";
  u32(1); want += "c";
  u64(32); u64(38); u64(43);
  EXPECT_EQ(f, want);
}

TEST_F(LineageTest, Empty) {
  write_ids(path_, {});
  LineageReader r;
  ASSERT_TRUE(r.open(path_).is_ok());
  EXPECT_EQ(r.size(), 0u);
}

TEST_F(LineageTest, ResumeCutsBack) {
  auto ids = make_ids(50);
  LineageWriter w;
  ASSERT_TRUE(w.open(path_).is_ok());
  for (size_t i = 0; i < 20; ++i) ASSERT_TRUE(w.add(ids[i]).is_ok());
  ASSERT_TRUE(w.sync().is_ok());
  uint64_t bytes = w.bytes(), count = w.count();
  ASSERT_TRUE(w.add("written after the checkpoint").is_ok());
  ASSERT_TRUE(w.sync().is_ok());
  LineageWriter w2;
  Status s = w2.resume(path_, bytes, count);
  ASSERT_TRUE(s.is_ok()) << s.message();
  for (size_t i = 20; i < ids.size(); ++i) ASSERT_TRUE(w2.add(ids[i]).is_ok());
  ASSERT_TRUE(w2.finish().is_ok());
  std::string resumed = test::read_file(path_);
  write_ids(path_, ids);
  EXPECT_EQ(resumed, test::read_file(path_));
  // a resume point that does not end on an entry is refused
  LineageWriter w3;
  ASSERT_TRUE(w3.open(path_).is_ok());
  ASSERT_TRUE(w3.add("abc").is_ok());
  ASSERT_TRUE(w3.sync().is_ok());
  LineageWriter w4;
  EXPECT_FALSE(w4.resume(path_, 32 + 5, 1).is_ok());
}

TEST_F(LineageTest, DamagedFilesNamed) {
  write_ids(path_, {"ab", "c", "def"});
  std::string good = test::read_file(path_);
  LineageReader r;
  test::write_file(path_, good.substr(0, good.size() - 3));
  Status s = r.open(path_);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find(path_), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.message();
  std::string bad = good;
  bad[0] = 'X';
  test::write_file(path_, bad);
  s = r.open(path_);
  EXPECT_NE(s.message().find("offset 0: not a Smelt lineage file"), std::string::npos) << s.message();
  bad = good;
  uint64_t t;
  std::memcpy(&t, &good[24], 8);
  bad[t + 8] = 99;  // table entry 1
  test::write_file(path_, bad);
  s = r.open(path_);
  EXPECT_NE(s.message().find("offset " + std::to_string(t + 8) + ": table entry 1"), std::string::npos) << s.message();
  // an unfinished file (header still zero) is refused
  LineageWriter w;
  ASSERT_TRUE(w.open(path_ + "2").is_ok());
  ASSERT_TRUE(w.add("x").is_ok());
  ASSERT_TRUE(w.sync().is_ok());
  EXPECT_FALSE(r.open(path_ + "2.partial").is_ok());
}

}  // namespace
