// The missing-reference rule (tests/test_references.hpp): a failure under CI or
// SMELT_REQUIRE_REFERENCES=1, never silently skipped there; a skip on a developer's machine.
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>
#include <gtest/gtest-spi.h>

#include "test_references.hpp"

namespace {

// Restores both variables when it goes out of scope.
class EnvGuard {
 public:
  EnvGuard() {
    for (int i = 0; i < 2; ++i) {
      const char* v = std::getenv(kNames[i]);
      had_[i] = v != nullptr;
      if (v) old_[i] = v;
    }
  }
  ~EnvGuard() {
    for (int i = 0; i < 2; ++i) {
      if (had_[i]) setenv(kNames[i], old_[i].c_str(), 1);
      else unsetenv(kNames[i]);
    }
  }
  static constexpr const char* kNames[2] = {"CI", "SMELT_REQUIRE_REFERENCES"};

 private:
  bool had_[2] = {false, false};
  std::string old_[2];
};

void needs_a_missing_reference() { SMELT_REQUIRE_REFERENCE(false, "the npm package left-pad"); }

}  // namespace

TEST(References, RequiredUnderCiOrTheVariable) {
  EnvGuard g;
  unsetenv("CI");
  unsetenv("SMELT_REQUIRE_REFERENCES");
  EXPECT_FALSE(smelt::test::references_required());
  setenv("CI", "true", 1);
  EXPECT_TRUE(smelt::test::references_required());
  setenv("CI", "false", 1);
  EXPECT_FALSE(smelt::test::references_required());
  setenv("SMELT_REQUIRE_REFERENCES", "1", 1);
  EXPECT_TRUE(smelt::test::references_required());
  setenv("SMELT_REQUIRE_REFERENCES", "0", 1);
  EXPECT_FALSE(smelt::test::references_required());
}

TEST(References, AMissingOneFailsNamingItWhenRequired) {
  EnvGuard g;
  unsetenv("CI");
  setenv("SMELT_REQUIRE_REFERENCES", "1", 1);
  EXPECT_FATAL_FAILURE(needs_a_missing_reference(), "missing reference: the npm package left-pad");
}

TEST(References, APresentOneNeitherFailsNorSkips) {
  EnvGuard g;
  setenv("SMELT_REQUIRE_REFERENCES", "1", 1);
  SMELT_REQUIRE_REFERENCE(true, "nothing");
  SUCCEED();
  EXPECT_FALSE(::testing::Test::IsSkipped());
}
