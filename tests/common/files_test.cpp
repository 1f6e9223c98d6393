// files.hpp: input expansion (folders, globs, hidden entries, errors) and atomic writes.
#include "smelt/common/files.hpp"

#include <unistd.h>

#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "test_files.hpp"

namespace fs = std::filesystem;
using namespace smelt;

namespace {

class FilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("smelt-files-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "sub" / ".hidden");
    for (const char* f : {"a.txt", "b.jsonl", "sub/c.txt", ".state.json", "sub/.hidden/d.txt"})
      test::write_file((dir_ / f).string(), f);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(FilesTest, FoldersExpandRecursivelyInSortedOrderWithoutHiddenEntries) {
  std::vector<std::string> out;
  ASSERT_TRUE(files_expand_inputs({dir_.string()}, out));
  std::vector<std::string> want = {(dir_ / "a.txt").string(), (dir_ / "b.jsonl").string(),
                                   (dir_ / "sub/c.txt").string()};
  EXPECT_EQ(out, want);
}

TEST_F(FilesTest, GlobsAndDuplicates) {
  std::vector<std::string> out;
  ASSERT_TRUE(files_expand_inputs({(dir_ / "*.txt").string(), (dir_ / "a.txt").string()}, out));
  EXPECT_EQ(out, std::vector<std::string>{(dir_ / "a.txt").string()});
}

TEST_F(FilesTest, MissingInputIsAnErrorNamingIt) {
  std::vector<std::string> out;
  Status s = files_expand_inputs({(dir_ / "nope").string()}, out);
  EXPECT_FALSE(s);
  EXPECT_NE(s.message().find("nope"), std::string::npos);
  s = files_expand_inputs({(dir_ / "*.zzz").string()}, out);
  EXPECT_FALSE(s);
  EXPECT_NE(s.message().find("matches no file"), std::string::npos);
}

TEST_F(FilesTest, AtomicFileReplacesOnlyOnCommit) {
  std::string path = (dir_ / "out.txt").string();
  test::write_file(path, "old");
  {
    AtomicFile f;
    ASSERT_TRUE(f.open(path));
    ASSERT_TRUE(f.write("new"));
    EXPECT_EQ(test::read_file(path), "old");  // not yet
  }  // destroyed without commit: the old file stays, no temporary is left
  EXPECT_EQ(test::read_file(path), "old");
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos);
  ASSERT_TRUE(files_write_atomic(path, "new"));
  EXPECT_EQ(test::read_file(path), "new");
}

TEST_F(FilesTest, TwoThreadsReplacingOneFileBothSucceed) {
  // a background checkpoint and a synchronous one update `latest` at the same time: each write
  // has its own temporary, so neither rename finds its temporary taken by the other
  std::string path = (dir_ / "latest").string();
  auto writer = [&](const char* text, int* failures) {
    for (int i = 0; i < 300; ++i)
      if (!files_write_atomic(path, text)) ++*failures;
  };
  int fa = 0, fb = 0;
  std::thread a(writer, "a\n", &fa), b(writer, "b\n", &fb);
  a.join();
  b.join();
  EXPECT_EQ(fa, 0);
  EXPECT_EQ(fb, 0);
  std::string last = test::read_file(path);
  EXPECT_TRUE(last == "a\n" || last == "b\n") << last;
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos);
}

}  // namespace
