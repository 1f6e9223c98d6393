// Independent references a test needs (npm packages, PyTorch, mpirun, chromium, zstd): where one is
// missing, the test skips on a developer's machine but fails under CI (CI set, as on the CI machine)
// or SMELT_REQUIRE_REFERENCES=1 (as .ci/run sets), naming what to install. So a parity check can
// never vanish from a CI run as a quiet "skipped". Not for CPU features a machine lacks.
#pragma once
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

namespace smelt::test {

// True when a missing reference must fail the test.
inline bool references_required() {
  for (const char* name : {"SMELT_REQUIRE_REFERENCES", "CI"}) {
    const char* v = std::getenv(name);
    if (v && *v && std::string(v) != "0" && std::string(v) != "false") return true;
  }
  return false;
}

}  // namespace smelt::test

// In a test body or SetUp (it returns from the function): when `available` is false, fails under CI
// and skips elsewhere, saying what to install.
#define SMELT_REQUIRE_REFERENCE(available, what_to_install)                                           \
  do {                                                                                                \
    if (!(available)) {                                                                               \
      if (::smelt::test::references_required())                                                       \
        GTEST_FAIL() << "missing reference: " << what_to_install                                      \
                     << " (a failure under CI or SMELT_REQUIRE_REFERENCES=1; a skip elsewhere)";     \
      else                                                                                            \
        GTEST_SKIP() << "missing reference: " << what_to_install;                                     \
    }                                                                                                 \
  } while (0)
