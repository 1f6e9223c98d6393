// The communicator's sub-groups (Communicator::split) under a real `mpirun --oversubscribe`: the
// test starts itself on 4 ranks, each rank checks its groups' ranks, sizes and sums; and the
// single-process split. Not the trainer's use of the communicator (dp_train_test.cpp).
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "smelt/dist/communicator.hpp"

using namespace smelt;

namespace {

const char* kMpirun =
    "mpirun --allow-run-as-root --oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none";
const char* kChildEnv = "SMELT_COMM_TEST_CHILD";

// One rank's checks: two groups by rank parity (ranked by rank), and one group of all ranks ranked
// backwards; each sums its members' rank + 1 in floats and doubles.
void child_checks() {
  std::unique_ptr<Communicator> world;
  ASSERT_TRUE(dist_create(DistConfig{}, world).is_ok());
  ASSERT_EQ(world->size(), 4);
  const int r = world->rank();
  {
    std::unique_ptr<Communicator> half, back;
    ASSERT_TRUE(world->split(r % 2, r, half).is_ok());
    EXPECT_EQ(half->size(), 2);
    EXPECT_EQ(half->rank(), r / 2);
    std::vector<float> x = {(float)(r + 1), 1.0f};
    ASSERT_TRUE(half->allreduce_sum(x.data(), 2).is_ok());
    EXPECT_EQ(x[0], r % 2 == 0 ? 1.0f + 3.0f : 2.0f + 4.0f);  // ranks {0, 2} and {1, 3}
    EXPECT_EQ(x[1], 2.0f);
    ASSERT_TRUE(world->split(0, -r, back).is_ok());
    EXPECT_EQ(back->size(), 4);
    EXPECT_EQ(back->rank(), 3 - r);
    double d = r + 1;
    ASSERT_TRUE(back->allreduce_sum(&d, 1).is_ok());
    EXPECT_EQ(d, 10.0);
    ASSERT_TRUE(half->barrier().is_ok());
  }  // the groups go before their parent
  ASSERT_TRUE(world->barrier().is_ok());
}

}  // namespace

TEST(Communicator, SplitFormsGroupsOverFourRanks) {
  if (std::getenv(kChildEnv)) return child_checks();
  ASSERT_EQ(std::system("command -v mpirun > /dev/null 2>&1"), 0) << "mpirun is missing: scripts/install-deps";
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string cmd = fmt::format("{} -np 4 -x {}=1 {} --gtest_filter=Communicator.SplitFormsGroupsOverFourRanks",
                                      kMpirun, kChildEnv, self);
  const int st = std::system(cmd.c_str());
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << cmd;
}

TEST(Communicator, SingleProcessSplitIsOneRank) {
  if (std::getenv(kChildEnv)) GTEST_SKIP();
  std::unique_ptr<Communicator> world, group;
  ASSERT_TRUE(dist_create(DistConfig{}, world).is_ok());
  ASSERT_EQ(world->size(), 1);
  ASSERT_TRUE(world->split(3, 7, group).is_ok());
  EXPECT_EQ(group->size(), 1);
  EXPECT_EQ(group->rank(), 0);
  float x = 2.5f;
  ASSERT_TRUE(group->allreduce_sum(&x, 1).is_ok());
  EXPECT_EQ(x, 2.5f);
}
