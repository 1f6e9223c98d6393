// `make demo` installs and builds only what the demo runs: the demo's packages and the two
// binaries, never the test executables (a new user waits for the demo, not for the test suite to
// compile). Read from make's dry run.
#include <cstdio>
#include <regex>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "test_files.hpp"

TEST(DemoTarget, BuildsTheBinariesAndNoTest) {
  std::string cmd = std::string("make -n -C ") + SMELT_SOURCE_DIR + " demo BUILD=/tmp/smelt-demo-dry 2>&1";
  int rc = 0;
  const std::string out = smelt::test::run_command(cmd, rc);
  ASSERT_EQ(rc, 0) << out;
  std::istringstream in(out);
  std::string line;
  int builds = 0;
  while (std::getline(in, line)) {
    if (line.find("cmake --build") == std::string::npos) continue;
    builds++;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(line, m, std::regex("--target ([^;&|\\\\]*)"))) << "builds every target: " << line;
    std::istringstream targets(m[1].str());
    std::string t;
    while (targets >> t) EXPECT_TRUE(t == "smelt" || t == "smelt-full") << "the demo builds " << t;
  }
  EXPECT_EQ(builds, 1) << out;
  EXPECT_NE(out.find("scripts/demo"), std::string::npos) << out;
  EXPECT_NE(out.find("scripts/install-deps --demo"), std::string::npos) << "the demo's own, smaller install: " << out;
  EXPECT_EQ(out.find("ctest"), std::string::npos) << out;
}
