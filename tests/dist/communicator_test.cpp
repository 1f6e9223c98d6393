// The communicator under a real `mpirun --oversubscribe`: each test starts itself on 2 or 4 ranks,
// and each rank checks its sub-groups (split), the max all-reduce and point-to-point messages
// (ring, pipeline pair, recv wait); and the single-process communicator's answers. Not the
// trainer's use of the communicator (dp_train_test.cpp).
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <thread>
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

// The point-to-point tests' communicator: a rank left waiting by a failed check ends the job
// after 60 s (a failure, not a hang).
std::unique_ptr<Communicator> world_comm() {
  DistConfig c;
  c.timeout_s = 60;
  std::unique_ptr<Communicator> world;
  EXPECT_TRUE(dist_create(c, world).is_ok());
  return world;
}

// Bit equality (EXPECT_EQ would take -0 for +0).
bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

// Each rank's values differ; the maxima are known by construction, -inf and negatives included.
void child_max() {
  std::unique_ptr<Communicator> world = world_comm();
  ASSERT_EQ(world->size(), 4);
  const int r = world->rank();
  const float inf = std::numeric_limits<float>::infinity();
  const uint64_t bytes0 = world->bytes_sent();
  {
    std::vector<float> x = {(float)r,  -(float)r - 1, -inf, r == 1 ? 5.5f : -inf, -0.1f * (float)(r + 1),
                            r == 0 ? 1e-40f : -3.0f};
    ASSERT_TRUE(world->allreduce_max(x.data(), (int64_t)x.size()).is_ok());
    const std::vector<float> want = {3.0f, -1.0f, -inf, 5.5f, -0.1f * 1.0f, 1e-40f};
    for (size_t i = 0; i < want.size(); i++) EXPECT_TRUE(same_bits(x[i], want[i])) << "element " << i << ": " << x[i];
    EXPECT_GT(world->bytes_sent(), bytes0);
  }
  {
    std::unique_ptr<Communicator> half;  // ranks {0, 2} and {1, 3}
    ASSERT_TRUE(world->split(r % 2, r, half).is_ok());
    auto value = [&](size_t i, int rank) { return (i + rank) % 4 == 0 ? -inf : -(float)(i * 4 + rank); };
    std::vector<float> x(1000);
    for (size_t i = 0; i < x.size(); i++) x[i] = value(i, r);
    ASSERT_TRUE(half->allreduce_max(x.data(), (int64_t)x.size()).is_ok());
    const int a = r % 2, b = r % 2 + 2;  // the group's world ranks
    for (size_t i = 0; i < x.size(); i++)
      ASSERT_TRUE(same_bits(x[i], std::max(value(i, a), value(i, b)))) << "element " << i << ": " << x[i];
  }
  ASSERT_TRUE(world->barrier().is_ok());
}

// Message k of rank `from` on `tag`: k + 3 floats, from * 1000 + tag * 100 + k * 10 + i.
std::vector<float> message(int from, int tag, int k) {
  std::vector<float> m(k + 3);
  for (int i = 0; i < (int)m.size(); i++) m[i] = (float)(from * 1000 + tag * 100 + k * 10 + i);
  return m;
}

// A ring: every rank sends to rank + 1 and receives from rank - 1.
void child_ring() {
  std::unique_ptr<Communicator> world = world_comm();
  ASSERT_EQ(world->size(), 4);
  const int r = world->rank(), next = (r + 1) % 4, prev = (r + 3) % 4;
  const uint64_t bytes0 = world->bytes_sent();
  // Three messages on tag 1 and two on tag 2, interleaved; all are sent before any recv is posted
  // (the barrier), so they wait at the receiver.
  std::vector<std::vector<float>> out;  // kept unchanged until wait_sends
  out.reserve(8);
  uint64_t sent = 0;
  for (int k = 0; k < 3; k++)
    for (int tag : {1, 2}) {
      if (tag == 2 && k == 2) continue;
      out.push_back(message(r, tag, k));
      sent += out.back().size() * sizeof(float);
      ASSERT_TRUE(world->send_async(out.back().data(), (int64_t)out.back().size(), next, tag).is_ok());
    }
  // Wrong lengths on tag 3: 4 floats where the receiver expects 6, then 20000 (80 KB, past the
  // eager limit: its send completes only once it is received) where it expects 2; then one float
  // that must still arrive. The wrong ones are received, so wait_sends below returns.
  const std::vector<float> four(4, 1.0f), many(20000, 2.0f), last = {(float)(42 + r)};
  for (const std::vector<float>* m : {&four, &many, &last}) {
    ASSERT_TRUE(world->send_async(m->data(), (int64_t)m->size(), next, 3).is_ok());
    sent += m->size() * sizeof(float);
  }
  EXPECT_EQ(world->bytes_sent() - bytes0, sent);
  ASSERT_TRUE(world->barrier().is_ok());
  // Tag 2 first: the other tag's messages do not stand in the way.
  for (int tag : {2, 1})
    for (int k = 0; k < (tag == 1 ? 3 : 2); k++) {
      const std::vector<float> want = message(prev, tag, k);
      std::vector<float> got(want.size(), -1.0f);
      ASSERT_TRUE(world->recv(got.data(), (int64_t)got.size(), prev, tag).is_ok());
      EXPECT_EQ(got, want) << "tag " << tag << " message " << k;
    }
  std::vector<float> buf(6, -1.0f);
  Status s = world->recv(buf.data(), 6, prev, 3);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("expected 6 floats, the message sent holds 4"), std::string::npos) << s.message();
  s = world->recv(buf.data(), 2, prev, 3);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("expected 2 floats, the message sent holds 20000"), std::string::npos) << s.message();
  float one = -1.0f;
  ASSERT_TRUE(world->recv(&one, 1, prev, 3).is_ok());
  EXPECT_EQ(one, (float)(42 + prev));
  // A rank has no messages to itself; tags stay in MPI's guaranteed range.
  EXPECT_FALSE(world->send_async(&one, 1, r, 1).is_ok());
  EXPECT_FALSE(world->recv(&one, 1, 4, 1).is_ok());
  EXPECT_FALSE(world->send_async(&one, 1, next, -1).is_ok());
  ASSERT_TRUE(world->wait_sends().is_ok());
  ASSERT_TRUE(world->wait_sends().is_ok());  // nothing left: returns at once
  ASSERT_TRUE(world->barrier().is_ok());
}

// Pipeline neighbours in split() pairs {0, 1} and {2, 3} exchange 4 MB each way at once: two
// blocking sends of this size (rendezvous) would wait for each other forever.
void child_pipeline_pair() {
  std::unique_ptr<Communicator> world = world_comm();
  ASSERT_EQ(world->size(), 4);
  const int r = world->rank();
  {
    std::unique_ptr<Communicator> pair;
    ASSERT_TRUE(world->split(r / 2, r, pair).is_ok());
    ASSERT_EQ(pair->size(), 2);
    const int other = 1 - pair->rank(), other_world = r ^ 1;
    const int64_t n = 1 << 20;  // 4 MB
    std::vector<float> out(n), in(n, -1.0f);
    for (int64_t i = 0; i < n; i++) out[i] = (float)(r * 10000 + i % 10000);
    ASSERT_TRUE(pair->send_async(out.data(), n, other, 5).is_ok());
    ASSERT_TRUE(pair->recv(in.data(), n, other, 5).is_ok());
    ASSERT_TRUE(pair->wait_sends().is_ok());
    for (int64_t i = 0; i < n; i++) ASSERT_EQ(in[i], (float)(other_world * 10000 + i % 10000)) << "float " << i;
    EXPECT_EQ(pair->bytes_sent(), (uint64_t)n * sizeof(float));
    ASSERT_TRUE(pair->barrier().is_ok());
  }
  ASSERT_TRUE(world->barrier().is_ok());
}

// Rank 1 sleeps 50 ms before it sends: rank 0's recv waits, and take_recv_wait_ms says so once.
void child_recv_wait() {
  std::unique_ptr<Communicator> world = world_comm();
  ASSERT_EQ(world->size(), 2);
  float x = 7.0f;
  ASSERT_TRUE(world->barrier().is_ok());
  if (world->rank() == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_TRUE(world->send_async(&x, 1, 0, 0).is_ok());
    ASSERT_TRUE(world->wait_sends().is_ok());
    EXPECT_EQ(world->take_recv_wait_ms(), 0.0);  // never received
  } else {
    EXPECT_EQ(world->take_recv_wait_ms(), 0.0);
    float y = 0;
    ASSERT_TRUE(world->recv(&y, 1, 1, 0).is_ok());
    EXPECT_EQ(y, 7.0f);
    const double waited = world->take_recv_wait_ms();
    EXPECT_GT(waited, 10.0);  // about 50 (a recv whose message is there takes microseconds)
    EXPECT_LT(waited, 10000.0);
    EXPECT_EQ(world->take_recv_wait_ms(), 0.0);  // reset by the call
  }
  ASSERT_TRUE(world->barrier().is_ok());
}

// A 4 MB message reaches its receiver while the sender computes, calling only progress(): rank 0
// sends, then loops on progress() until rank 1 says, through a file (not MPI), that the message is
// in. Over shared memory without single-copy transfers (the tests' mpirun) a message of this size
// moves only while its sender is inside MPI, so without progress() the loop would never end.
void child_progress() {
  std::unique_ptr<Communicator> world = world_comm();
  ASSERT_EQ(world->size(), 2);
  const char* dir = std::getenv("SMELT_COMM_TEST_DIR");
  ASSERT_NE(dir, nullptr);
  const std::filesystem::path flag = std::filesystem::path(dir) / "received";
  const int64_t n = 1 << 20;
  ASSERT_TRUE(world->barrier().is_ok());
  if (world->rank() == 0) {
    world->progress();  // nothing started: nothing to do
    std::vector<float> out(n);
    for (int64_t i = 0; i < n; i++) out[i] = (float)(i % 9973);
    ASSERT_TRUE(world->send_async(out.data(), n, 1, 9).is_ok());
    const auto t0 = std::chrono::steady_clock::now();
    while (!std::filesystem::exists(flag) && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30)) {
      world->progress();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // "compute"
    }
    EXPECT_TRUE(std::filesystem::exists(flag)) << "the message did not arrive in 30 s of progress()";
    ASSERT_TRUE(world->wait_sends().is_ok());
  } else {
    std::vector<float> in(n, -1.0f);
    ASSERT_TRUE(world->recv(in.data(), n, 0, 9).is_ok());
    for (int64_t i = 0; i < n; i++) ASSERT_EQ(in[i], (float)(i % 9973)) << "float " << i;
    std::FILE* f = std::fopen(flag.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fclose(f);
  }
  ASSERT_TRUE(world->barrier().is_ok());
}

// Starts this binary on np ranks under mpirun, running only `test` (whose body, seeing the child
// variable, runs its rank's checks); every rank must pass.
void run_on_ranks(const char* test, int np) {
  ASSERT_EQ(std::system("command -v mpirun > /dev/null 2>&1"), 0) << "mpirun is missing: scripts/install-deps";
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string cmd = fmt::format("{} -np {} -x {}=1 -x SMELT_COMM_TEST_DIR {} --gtest_filter=Communicator.{}",
                                      kMpirun, np, kChildEnv, self, test);
  const int st = std::system(cmd.c_str());
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << cmd;
}

}  // namespace

TEST(Communicator, SplitFormsGroupsOverFourRanks) {
  if (std::getenv(kChildEnv)) return child_checks();
  run_on_ranks("SplitFormsGroupsOverFourRanks", 4);
}

TEST(Communicator, MaxOverFourRanksAndAGroup) {
  if (std::getenv(kChildEnv)) return child_max();
  run_on_ranks("MaxOverFourRanksAndAGroup", 4);
}

TEST(Communicator, RingMessagesArriveInOrderPerTag) {
  if (std::getenv(kChildEnv)) return child_ring();
  run_on_ranks("RingMessagesArriveInOrderPerTag", 4);
}

TEST(Communicator, PipelinePairExchangesWithoutDeadlock) {
  if (std::getenv(kChildEnv)) return child_pipeline_pair();
  run_on_ranks("PipelinePairExchangesWithoutDeadlock", 4);
}

TEST(Communicator, RecvWaitIsMeasuredAndReset) {
  if (std::getenv(kChildEnv)) return child_recv_wait();
  run_on_ranks("RecvWaitIsMeasuredAndReset", 2);
}

TEST(Communicator, ProgressMovesASendWhileTheSenderComputes) {
  if (std::getenv(kChildEnv)) return child_progress();
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("smelt-comm-progress-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ::setenv("SMELT_COMM_TEST_DIR", dir.c_str(), 1);
  run_on_ranks("ProgressMovesASendWhileTheSenderComputes", 2);
  std::filesystem::remove_all(dir);
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

TEST(Communicator, SingleProcessHasNoPeers) {
  if (std::getenv(kChildEnv)) GTEST_SKIP();
  std::unique_ptr<Communicator> world;
  ASSERT_TRUE(dist_create(DistConfig{}, world).is_ok());
  ASSERT_EQ(world->size(), 1);
  std::vector<float> x = {-std::numeric_limits<float>::infinity(), -2.0f, 3.0f};
  const std::vector<float> before = x;
  ASSERT_TRUE(world->allreduce_max(x.data(), 3).is_ok());
  EXPECT_EQ(x, before);
  for (Status s : {world->send_async(x.data(), 3, 0, 0), world->recv(x.data(), 3, 0, 0)}) {
    ASSERT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find("no peer on one process"), std::string::npos) << s.message();
  }
  EXPECT_TRUE(world->wait_sends().is_ok());
  EXPECT_EQ(world->take_recv_wait_ms(), 0.0);
  EXPECT_EQ(world->bytes_sent(), 0u);
}
