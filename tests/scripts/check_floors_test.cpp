// scripts/check-floors, the build's floor check (docs/architecture.md): the tree passes, and in a
// temporary tree an upward include, a loop in the table and a folder with no row each fail with
// the file, the line and the rule. Not a test of the build wiring (CMakeLists.txt runs the script).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "test_files.hpp"

namespace fs = std::filesystem;
using smelt::test::run_command;
using smelt::test::write_file;

namespace {

const std::string kScript = std::string(SMELT_SOURCE_DIR) + "/scripts/check-floors";
const std::string kTable = std::string(SMELT_SOURCE_DIR) + "/cmake/floors.txt";

// A temporary src/smelt/ with files FLOOR/NAME holding the given text, and a table.
struct Tree {
  fs::path root = fs::path(::testing::TempDir()) / ("smelt_floors_" + std::to_string(getpid()));
  Tree() {
    fs::remove_all(root);
    fs::create_directories(root / "smelt");
  }
  ~Tree() { fs::remove_all(root); }
  void file(const std::string& rel, const std::string& text) {
    fs::create_directories((root / "smelt" / rel).parent_path());
    write_file((root / "smelt" / rel).string(), text);
  }
  std::string src() const { return (root / "smelt").string(); }
  // The script's output (stdout and stderr); rc its exit status.
  std::string check(const std::string& table, int& rc) const {
    const std::string out = run_command(kScript + " " + src() + " " + table + " 2>&1", rc);
    rc = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    return out;
  }
};

}  // namespace

TEST(CheckFloors, TheTreePasses) {
  int rc = 0;
  const std::string out = run_command(kScript + " 2>&1", rc);
  EXPECT_EQ(rc, 0) << out;
}

TEST(CheckFloors, IncludesThatLookDownPass) {
  Tree t;
  t.file("common/status.hpp", "#pragma once\n");
  t.file("hw/cpu_info.hpp", "#include \"smelt/common/status.hpp\"\n");
  t.file("kernels/cpu/gemm.cpp", "#include \"smelt/hw/cpu_info.hpp\"\n#include <vector>\n");
  // model/ stands on kernels/, which stands on hw/: a floor below a floor below is allowed
  t.file("model/model.cpp", "#include \"smelt/kernels/kernels.hpp\"\n#include \"smelt/hw/cpu_info.hpp\"\n");
  int rc = 0;
  const std::string out = t.check(kTable, rc);
  EXPECT_EQ(rc, 0) << out;
}

// The two knots of issue 31 written again: each fails, naming the file, the line and the rule.
TEST(CheckFloors, AnUpwardIncludeFailsWithItsFileLineAndRule) {
  Tree t;
  t.file("kernels/cpu/decode_linear.cpp", "// a kernel\n#include <cstdint>\n#include \"smelt/machine/cpu_info.hpp\"\n");
  t.file("model/model.hpp", "#pragma once\n#include \"smelt/dataset/batch.hpp\"\n");
  t.file("dataset/batch.hpp", "#pragma once\n");
  t.file("machine/cpu_info.hpp", "#pragma once\n");
  int rc = 0;
  const std::string out = t.check(kTable, rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("kernels/cpu/decode_linear.cpp:3: error: kernels/ may not include machine/"), std::string::npos)
      << out;
  EXPECT_NE(out.find("kernels/ may include common/ hw/"), std::string::npos) << out;
  EXPECT_NE(out.find("model/model.hpp:2: error: model/ may not include dataset/"), std::string::npos) << out;
  EXPECT_NE(out.find("2 error(s)"), std::string::npos) << out;
}

TEST(CheckFloors, RelativeAndUnknownIncludesFail) {
  Tree t;
  t.file("model/a.cpp", "#include \"../dataset/batch.hpp\"\n");
  t.file("model/b.cpp", "#include \"smelt/nowhere/x.hpp\"\n");
  int rc = 0;
  const std::string out = t.check(kTable, rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("model/a.cpp:1: error:"), std::string::npos) << out;
  EXPECT_NE(out.find("model/b.cpp:1: error:"), std::string::npos) << out;
  EXPECT_NE(out.find("smelt/nowhere/ is not a floor"), std::string::npos) << out;
}

TEST(CheckFloors, AFolderWithNoRowFails) {
  Tree t;
  t.file("dedup_global/stage.hpp", "#pragma once\n");
  int rc = 0;
  const std::string out = t.check(kTable, rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("dedup_global/: error: a folder with no row"), std::string::npos) << out;
}

TEST(CheckFloors, ATableWithALoopFails) {
  Tree t;
  t.file("a/a.hpp", "#include \"smelt/b/b.hpp\"\n");
  t.file("b/b.hpp", "#include \"smelt/a/a.hpp\"\n");
  const std::string table = (t.root / "floors.txt").string();
  write_file(table, "a: b\nb: a\n");
  int rc = 0;
  const std::string out = t.check(table, rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("floors.txt:1: error: a/ stands on b/, which is not a row above it"), std::string::npos) << out;
}
