// The hosts of `smelt launch --hosts`: the list's syntax, the layout read from --print-config's
// TOML, the shape the hosts that are up hold (the data-parallel degree shrinks with the global
// batch kept: batch_size x grad_accum constant and each rank's micro-batch rows unchanged), where
// each rank runs, when a host is dropped, and a real probe through mpirun (a host that answers and
// one that cannot be reached).
#include <gtest/gtest.h>

#include "smelt/launch/hosts.hpp"

using namespace smelt;

namespace {

std::vector<LaunchHost> hosts(const std::string& spec) {
  std::vector<LaunchHost> h;
  EXPECT_TRUE(launch_hosts_parse(spec, h).is_ok()) << spec;
  return h;
}

LaunchLayout layout(int bs, int ga, int tp = 1, int pp = 1) {
  LaunchLayout l;
  l.batch_size = bs, l.grad_accum = ga, l.tp = tp, l.pp = pp;
  return l;
}

}  // namespace

TEST(LaunchHosts, ParsesHostsAndSlotsAndNamesTheBadItem) {
  auto h = hosts("n01:4,10.0.0.2:2,n03");
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(h[0].name, "n01");
  EXPECT_EQ(h[0].slots, 4);
  EXPECT_EQ(h[1].name, "10.0.0.2");
  EXPECT_EQ(h[1].slots, 2);
  EXPECT_EQ(h[2].slots, 1);
  for (const char* bad : {"a:0", "a:x", ":2", "a:2,,b:2", "a:2,a:1", ""}) {
    std::vector<LaunchHost> out;
    Status s = launch_hosts_parse(bad, out);
    EXPECT_FALSE(s.is_ok()) << bad;
    EXPECT_NE(s.message().find("--hosts"), std::string::npos) << s.message();
  }
  std::vector<LaunchHost> out;
  EXPECT_NE(launch_hosts_parse("a:x", out).message().find("\"a:x\""), std::string::npos);
}

TEST(LaunchHosts, ReadsTheLayoutFromThePrintedConfig) {
  LaunchLayout l;
  ASSERT_TRUE(launch_layout_parse("[data]\nbatch_size = 8\nmode = 'packed'\n[parallel]\ntp = 2\npp = 1\n"
                                  "[train]\ngrad_accum = 3\n", l).is_ok());
  EXPECT_EQ(l.batch_size, 8);
  EXPECT_EQ(l.grad_accum, 3);
  EXPECT_EQ(l.tp, 2);
  EXPECT_TRUE(l.packed);
  ASSERT_TRUE(launch_layout_parse("[data]\nbatch_size = 8\nmode = 'bucketed'\n", l).is_ok());
  EXPECT_FALSE(l.packed);
  EXPECT_FALSE(launch_layout_parse("[data\n", l).is_ok());
}

TEST(LaunchHosts, AllHostsUpGiveTheConfiguredShape) {
  LaunchShape s;
  ASSERT_TRUE(launch_shape(layout(8, 1), 4, 4, hosts("a:2,b:2"), s).is_ok());
  EXPECT_EQ(s.ranks, 4);
  EXPECT_FALSE(s.changed);
  EXPECT_EQ(s.batch_size, 8);
  EXPECT_EQ(s.grad_accum, 1);
  ASSERT_EQ(s.hosts.size(), 2u);
  EXPECT_EQ(launch_rank_host(s, 0), "a");
  EXPECT_EQ(launch_rank_host(s, 1), "a");
  EXPECT_EQ(launch_rank_host(s, 2), "b");
  EXPECT_EQ(launch_rank_host(s, 3), "b");
  EXPECT_EQ(launch_rank_host(s, 4), "");
  // more slots than ranks: the first hosts in order
  ASSERT_TRUE(launch_shape(layout(8, 1), 2, 2, hosts("a:4,b:4"), s).is_ok());
  ASSERT_EQ(s.hosts.size(), 1u);
  EXPECT_EQ(s.hosts[0].second, 2);
}

TEST(LaunchHosts, ShrinksTheDataParallelDegreeKeepingTheGlobalBatch) {
  auto h = hosts("a:2,b:2");
  h[1].up = false, h[1].why = "not reached";
  LaunchShape s;
  ASSERT_TRUE(launch_shape(layout(8, 1), 4, 2, h, s).is_ok());
  EXPECT_EQ(s.ranks, 2);
  EXPECT_TRUE(s.changed);
  EXPECT_EQ(s.batch_size, 4);  // each rank keeps its 2 rows per micro-batch ...
  EXPECT_EQ(s.grad_accum, 2);  // ... and takes two: 4 x 2 = 8 x 1 rows per step
  EXPECT_EQ(s.batch_size * s.grad_accum, 8);
  // 3 of 4 slots free: 3 does not divide 4 x 1, so 2 ranks
  auto h3 = hosts("a:2,b:1,c:1");
  h3[2].up = false;
  ASSERT_TRUE(launch_shape(layout(8, 1), 4, 1, h3, s).is_ok());
  EXPECT_EQ(s.ranks, 2);
  // 6 ranks with grad_accum 2: 4 free -> 4 (6 x 2 = 12 divisible by 4): rows 2 per rank kept
  auto h6 = hosts("a:2,b:2,c:2");
  h6[0].up = false;
  ASSERT_TRUE(launch_shape(layout(12, 2), 6, 1, h6, s).is_ok());
  EXPECT_EQ(s.ranks, 4);
  EXPECT_EQ(s.batch_size, 8);
  EXPECT_EQ(s.grad_accum, 3);
  EXPECT_EQ(launch_rank_host(s, 0), "b");
  // tensor parallelism stays: 2 x tp 2 on 4 ranks, 2 free -> dp 1
  ASSERT_TRUE(launch_shape(layout(4, 1, 2), 4, 2, h, s).is_ok());
  EXPECT_EQ(s.ranks, 2);
  EXPECT_EQ(s.batch_size, 2);
  EXPECT_EQ(s.grad_accum, 2);
}

TEST(LaunchHosts, RefusesBelowMinRanksNamingTheHostsDown) {
  auto h = hosts("a:2,b:2");
  h[1].up = false, h[1].why = "not reached";
  LaunchShape s;
  Status st = launch_shape(layout(8, 1), 4, 4, h, s);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("b (not reached)"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("--min-ranks 4"), std::string::npos) << st.message();
  LaunchLayout bucketed = layout(8, 1);
  bucketed.packed = false;  // only a packed batch re-splits
  st = launch_shape(bucketed, 4, 1, h, s);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("packed"), std::string::npos) << st.message();
  EXPECT_FALSE(launch_shape(layout(8, 1, 3), 4, 1, hosts("a:4"), s).is_ok());  // 4 ranks, tp 3
}

TEST(LaunchHosts, DropsAHostNotReachedAtOnceAndOneFailingTwiceInARow) {
  auto h = hosts("a:2,b:2");
  LaunchShape s;
  ASSERT_TRUE(launch_shape(layout(8, 1), 4, 4, h, s).is_ok());
  Failure killed;
  killed.cause = "killed", killed.rank = 3;
  EXPECT_EQ(launch_hosts_failed(h, s, killed, 10.0), "");  // b's first
  EXPECT_EQ(h[1].failures_in_row, 1);
  Failure other;
  other.cause = "hang", other.rank = 0;
  EXPECT_EQ(launch_hosts_failed(h, s, other, 11.0), "");  // a's first; b starts again
  EXPECT_EQ(h[1].failures_in_row, 0);
  EXPECT_EQ(launch_hosts_failed(h, s, killed, 12.0), "");
  EXPECT_EQ(launch_hosts_failed(h, s, killed, 13.0), "b");  // twice in a row
  EXPECT_FALSE(h[1].up);
  EXPECT_EQ(h[1].down_since, 13.0);
  EXPECT_NE(h[1].why.find("2 times in a row"), std::string::npos) << h[1].why;
  EXPECT_TRUE(h[0].up);
  // not reached: dropped at the first, by the host name mpirun gave when no rank is known
  auto h2 = hosts("a:2,b:2");
  Failure lost;
  lost.cause = "launch", lost.host = "a";
  EXPECT_EQ(launch_hosts_failed(h2, s, lost, 1.0), "a");
  EXPECT_EQ(h2[0].why, "not reached");
  // no host known: nobody is blamed
  Failure bare;
  bare.cause = "exit";
  auto h3 = hosts("a:2,b:2");
  EXPECT_EQ(launch_hosts_failed(h3, s, bare, 1.0), "");
  EXPECT_EQ(h3[0].failures_in_row + h3[1].failures_in_row, 0);
}

TEST(LaunchHosts, ProbesThroughMpirun) {
  ASSERT_EQ(std::system("command -v mpirun > /dev/null 2>&1"), 0) << "mpirun is missing: scripts/install-deps";
  const std::vector<std::string> args = {"--allow-run-as-root", "--oversubscribe", "--mca", "btl", "self,vader"};
  const auto why = launch_probe_hosts({"localhost", "no-such-host.invalid"}, "mpirun", args, 20);
  ASSERT_EQ(why.size(), 2u);
  EXPECT_EQ(why[0], "");
  EXPECT_NE(why[1], "");
  std::fprintf(stderr, "the unreachable host's probe: %s\n", why[1].c_str());
}
