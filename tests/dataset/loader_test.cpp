// Tests for loader.cpp: blending, determinism, resume (also across blend and rank-count changes),
// prefetching equals synchronous building, the [data] config, the latency window.
// Token values encode (source, document, position) so every batch decodes back to its origin.
#include <gtest/gtest.h>

#include <filesystem>
#include <atomic>
#include <cstdlib>
#include <map>
#include <new>
#include <set>
#include <unistd.h>

#include "smelt/common/config.hpp"
#include "smelt/dataset/loader.hpp"

using namespace smelt;
namespace fs = std::filesystem;

// Counts heap allocations in this process (the "no allocation per step once warm" test).
static std::atomic<uint64_t> g_allocs{0};
void* operator new(size_t n) {
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace {

constexpr int32_t kEod = 1;
int32_t tok(int s, int d, int p) { return (s + 1) * 10000000 + d * 1000 + p; }
int tok_source(int32_t t) { return t / 10000000 - 1; }

class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("smelt_loader_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    for (int s = 0; s < 3; ++s) {
      std::vector<int> lens;
      for (int d = 0; d < 40 + 10 * s; ++d) lens.push_back(1 + (d * 13 + s * 5) % 37);
      lens_.push_back(lens);
      std::string prefix = path(s);
      IndexedWriter w;
      EXPECT_TRUE(w.open(prefix, IndexedDType::kInt32).is_ok());
      for (size_t d = 0; d < lens.size(); ++d) {
        std::vector<uint32_t> ids;
        for (int p = 0; p < lens[d]; ++p) ids.push_back(static_cast<uint32_t>(tok(s, static_cast<int>(d), p)));
        EXPECT_TRUE(w.add_document(ids).is_ok());
      }
      EXPECT_TRUE(w.finish().is_ok());
    }
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(int s) const { return (dir_ / ("s" + std::to_string(s))).string(); }
  // "s0=PATH:w0,..."
  std::string spec(const std::vector<std::pair<int, double>>& parts) const {
    std::string out;
    for (auto [s, w] : parts) out += (out.empty() ? "" : ",") + ("s" + std::to_string(s) + "=" + path(s) + ":" + std::to_string(w));
    return out;
  }
  LoaderConfig config(const std::string& sources) const {
    LoaderConfig c;
    c.sources = sources;
    c.seq_len = 16, c.batch_size = 6, c.eod_id = kEod, c.seed = 11, c.prefetch_threads = 0;
    return c;
  }
  // Consumed tokens per source (packed: the T inputs of each row), in order.
  static void collect(const Batch& b, std::map<int, std::vector<int32_t>>& per_source) {
    for (int r = 0; r < b.B; ++r) {
      int s = -1;
      for (int t = 0; t < b.T && s < 0; ++t)
        if (b.inputs[r * b.T + t] != kEod) s = tok_source(b.inputs[r * b.T + t]);
      auto& v = per_source[s];
      v.insert(v.end(), b.inputs.begin() + r * b.T, b.inputs.begin() + (r + 1) * b.T);
    }
  }
  // Source s's stream: documents in its permutation, EOD after each.
  std::vector<int32_t> stream(int s, size_t n, uint64_t seed = 11) const {
    std::vector<int32_t> out;
    std::vector<uint32_t> perm;
    for (uint64_t e = 0; out.size() < n; ++e) {
      sampler_permutation(seed, "s" + std::to_string(s), e, lens_[s].size(), perm);
      for (uint32_t d : perm) {
        for (int p = 0; p < lens_[s][d]; ++p) out.push_back(tok(s, static_cast<int>(d), p));
        out.push_back(kEod);
      }
    }
    out.resize(n);
    return out;
  }
  std::vector<std::vector<int32_t>> run(const LoaderConfig& c, int steps, const LoaderPosition* resume = nullptr,
                                        LoaderPosition* end = nullptr) {
    Loader l;
    Status st = l.open(c, resume);
    EXPECT_TRUE(st.is_ok()) << st.message();
    std::vector<std::vector<int32_t>> out;
    for (int i = 0; i < steps; ++i) {
      const Batch& b = l.next();
      out.push_back(b.inputs);
      out.back().insert(out.back().end(), b.targets.begin(), b.targets.end());
    }
    if (end) *end = l.position();
    return out;
  }

  fs::path dir_;
  std::vector<std::vector<int>> lens_;
};

}  // namespace

TEST_F(LoaderTest, BlendSharesFollowWeights) {
  LoaderConfig c = config(spec({{0, 0.6}, {1, 0.3}, {2, 0.1}}));
  Loader l;
  ASSERT_TRUE(l.open(c).is_ok());
  std::map<int, int> rows;
  for (int i = 0; i < 100; ++i) {
    const Batch& b = l.next();
    for (int r = 0; r < b.B; ++r) rows[b.sources[r * b.T]]++;
  }
  EXPECT_NEAR(rows[0], 360, 1);
  EXPECT_NEAR(rows[1], 180, 1);
  EXPECT_NEAR(rows[2], 60, 1);
}

TEST_F(LoaderTest, EverySourceReadsItsStreamWithoutGaps) {
  LoaderConfig c = config(spec({{0, 0.5}, {1, 0.3}, {2, 0.2}}));
  Loader l;
  ASSERT_TRUE(l.open(c).is_ok());
  std::map<int, std::vector<int32_t>> got;
  for (int i = 0; i < 60; ++i) collect(l.next(), got);  // several epochs of each source
  for (auto& [s, v] : got) EXPECT_EQ(v, stream(s, v.size())) << "source " << s;
}

// Quarantined documents (the trainer's rollback) are never read again, in any epoch, in both modes;
// the rest of the stream is the same order without them.
TEST_F(LoaderTest, QuarantinedDocumentsAreNeverReadAgain) {
  for (BatchMode mode : {BatchMode::kPacked, BatchMode::kBucketed}) {
    LoaderConfig c = config(spec({{0, 1}}));
    c.mode = mode;
    c.buckets = {8, 16, 32, 64};
    c.max_tokens_per_batch = 128;
    c.exclude = {{"s0", 3}, {"s0", 17}, {"s0", 0}, {"other", 5}};
    Loader l;
    ASSERT_TRUE(l.open(c).is_ok()) << enum_name(mode);
    std::set<int> seen;
    for (int i = 0; i < 80; ++i) {  // several epochs
      const Batch& b = l.next();
      for (int n = 0; n < b.B * b.T; ++n)
        if (b.inputs[n] > kEod) seen.insert((b.inputs[n] % 10000000) / 1000);
    }
    EXPECT_EQ(seen.count(3) + seen.count(17) + seen.count(0), 0u) << enum_name(mode);
    EXPECT_EQ(seen.size(), lens_[0].size() - 3) << enum_name(mode);  // every other document was read
  }
  // The packed stream equals the plain one with the three documents cut out.
  LoaderConfig c = config(spec({{0, 1}}));
  c.exclude = {{"s0", 3}, {"s0", 17}, {"s0", 0}};
  Loader l;
  ASSERT_TRUE(l.open(c).is_ok());
  std::map<int, std::vector<int32_t>> got;
  for (int i = 0; i < 30; ++i) collect(l.next(), got);
  std::vector<int32_t> want;
  std::vector<uint32_t> perm;
  for (uint64_t e = 0; want.size() < got[0].size(); ++e) {
    sampler_permutation(11, "s0", e, lens_[0].size(), perm);
    for (uint32_t d : perm) {
      if (d == 3 || d == 17 || d == 0) continue;
      for (int p = 0; p < lens_[0][d]; ++p) want.push_back(tok(0, static_cast<int>(d), p));
      want.push_back(kEod);
    }
  }
  want.resize(got[0].size());
  EXPECT_EQ(got[0], want);
  // Quarantining every document is refused, not a hang.
  for (size_t d = 0; d < lens_[0].size(); ++d) c.exclude.push_back({"s0", d});
  Loader all;
  EXPECT_FALSE(all.open(c).is_ok());
}

TEST_F(LoaderTest, SameSeedSameBatchesOtherSeedOther) {
  LoaderConfig c = config(spec({{0, 1}, {1, 1}}));
  auto a = run(c, 10), b = run(c, 10);
  EXPECT_EQ(a, b);
  c.seed = 12;
  auto d = run(c, 10);
  EXPECT_NE(a, d);
  c = config(spec({{0, 1}, {1, 1}}));
  c.mode = BatchMode::kBucketed, c.buckets = {8, 16, 32, 64}, c.max_tokens_per_batch = 128;
  EXPECT_EQ(run(c, 10), run(c, 10));
}

TEST_F(LoaderTest, ResumeGivesExactlyTheContinuation) {
  for (std::string mode : {"packed", "bucketed"}) {
    LoaderConfig c = config(spec({{0, 0.5}, {1, 0.3}, {2, 0.2}}));
    ASSERT_TRUE(enum_parse(mode, c.mode));
    c.buckets = {8, 16, 32}, c.max_tokens_per_batch = 96;
    auto whole = run(c, 25);
    LoaderPosition mid;
    run(c, 11, nullptr, &mid);
    EXPECT_EQ(mid.step, 11u);
    LoaderPosition back;  // through JSON, as a checkpoint stores it
    ASSERT_TRUE(LoaderPosition::from_json(nlohmann::json::parse(mid.to_json().dump()), back).is_ok());
    auto rest = run(c, 14, &back);
    for (int i = 0; i < 14; ++i) ASSERT_EQ(rest[i], whole[11 + i]) << mode << " step " << 11 + i;
  }
}

// Adding, removing or reweighting sources: the sources that stay continue their streams exactly.
TEST_F(LoaderTest, ResumeAcrossBlendChangesNeverRepeatsOrSkips) {
  struct Case { std::vector<std::pair<int, double>> before, after; };
  std::vector<Case> cases = {
      {{{0, 0.5}, {1, 0.5}}, {{0, 0.5}, {1, 0.3}, {2, 0.2}}},  // add
      {{{0, 0.5}, {1, 0.3}, {2, 0.2}}, {{0, 0.7}, {2, 0.3}}},  // remove
      {{{0, 0.5}, {1, 0.5}}, {{1, 0.9}, {0, 0.1}}},            // reweight (and reorder)
      {{{0, 0.5}, {1, 0.5}}, {{0, 1.0}}},                      // remove, then add back below
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    LoaderConfig a = config(spec(cases[k].before)), b = config(spec(cases[k].after));
    std::map<int, std::vector<int32_t>> got;
    Loader l1;
    ASSERT_TRUE(l1.open(a).is_ok());
    for (int i = 0; i < 9; ++i) collect(l1.next(), got);
    LoaderPosition p = l1.position();
    l1.close();
    Loader l2;
    ASSERT_TRUE(l2.open(b, &p).is_ok());
    for (int i = 0; i < 9; ++i) collect(l2.next(), got);
    LoaderPosition p2 = l2.position();
    if (k == 3) {  // source 1 comes back: it continues where it stopped
      EXPECT_TRUE(p2.sources.count("s1"));
      Loader l3;
      ASSERT_TRUE(l3.open(a, &p2).is_ok());
      for (int i = 0; i < 9; ++i) collect(l3.next(), got);
    }
    for (auto& [s, v] : got) EXPECT_EQ(v, stream(s, v.size())) << "case " << k << " source " << s;
    if (k == 0) {
      EXPECT_GT(got[2].size(), 0u);
    }
  }
}

// Bucketed: rows leave in bucket order, so check sets: the documents emitted plus those still
// pending are exactly the first (epoch * N + docs) documents of each source's order.
TEST_F(LoaderTest, BucketedResumeAcrossBlendChangesKeepsEveryDocumentOnce) {
  auto cfg = [&](const std::vector<std::pair<int, double>>& parts) {
    LoaderConfig c = config(spec(parts));
    c.mode = BatchMode::kBucketed, c.buckets = {8, 16, 32}, c.max_tokens_per_batch = 96;
    return c;
  };
  std::vector<LoaderConfig> phases = {cfg({{0, 0.5}, {1, 0.5}}), cfg({{0, 1.0}}), cfg({{1, 0.2}, {0, 0.3}, {2, 0.5}})};
  std::map<int, std::multiset<int>> seen;
  LoaderPosition p;
  for (size_t k = 0; k < phases.size(); ++k) {
    Loader l;
    ASSERT_TRUE(l.open(phases[k], k ? &p : nullptr).is_ok());
    for (int i = 0; i < 12; ++i) {
      const Batch& b = l.next();
      for (int r = 0; r < b.B; ++r) {
        int32_t t = b.inputs[r * b.T];
        seen[tok_source(t)].insert((t % 10000000) / 1000);
      }
    }
    p = l.position();
  }
  for (const auto& d : p.pending) seen[d.source[1] - '0'].insert(static_cast<int>(d.doc));
  for (int s = 0; s < 3; ++s) {
    const SourceCursor& c = p.sources.at("s" + std::to_string(s));
    std::multiset<int> want;
    std::vector<uint32_t> perm;
    for (uint64_t e = 0; e <= c.epoch; ++e) {
      sampler_permutation(11, "s" + std::to_string(s), e, lens_[s].size(), perm);
      for (uint64_t i = 0; i < (e < c.epoch ? perm.size() : c.docs); ++i) want.insert(static_cast<int>(perm[i]));
    }
    EXPECT_EQ(seen[s], want) << "source " << s;
    EXPECT_GT(want.size(), 0u);
  }
}

TEST_F(LoaderTest, RankCountChangeKeepsTheSampleOrder) {
  LoaderConfig c = config(spec({{0, 0.6}, {1, 0.4}}));
  auto one = run(c, 12);
  // the union of two ranks' rows is the one-rank batch
  std::vector<std::vector<std::vector<int32_t>>> parts;
  for (int r = 0; r < 2; ++r) {
    LoaderConfig cr = c;
    cr.rank = r, cr.ranks = 2;
    Loader l;
    ASSERT_TRUE(l.open(cr).is_ok());
    std::vector<std::vector<int32_t>> steps;
    for (int i = 0; i < 12; ++i) steps.push_back(l.next().inputs);
    parts.push_back(steps);
  }
  for (int i = 0; i < 12; ++i) {
    std::vector<int32_t> joined = parts[0][i];
    joined.insert(joined.end(), parts[1][i].begin(), parts[1][i].end());
    std::vector<int32_t> whole(one[i].begin(), one[i].begin() + 6 * 16);
    ASSERT_EQ(joined, whole) << "step " << i;
  }
  // 5 steps on 1 rank, then resume on 3 ranks: the union continues exactly
  LoaderPosition p;
  run(c, 5, nullptr, &p);
  std::vector<std::vector<int32_t>> joined(7);
  for (int r = 0; r < 3; ++r) {
    LoaderConfig cr = c;
    cr.rank = r, cr.ranks = 3;
    Loader l;
    ASSERT_TRUE(l.open(cr, &p).is_ok());
    for (int i = 0; i < 7; ++i) {
      const Batch& b = l.next();
      EXPECT_EQ(b.B, 2);
      joined[i].insert(joined[i].end(), b.inputs.begin(), b.inputs.end());
    }
  }
  for (int i = 0; i < 7; ++i)
    ASSERT_EQ(joined[i], std::vector<int32_t>(one[5 + i].begin(), one[5 + i].begin() + 6 * 16)) << "step " << 5 + i;
}

TEST_F(LoaderTest, PrefetchThreadsGiveTheSameBatches) {
  for (std::string mode : {"packed", "bucketed"}) {
    LoaderConfig c = config(spec({{0, 0.5}, {1, 0.3}, {2, 0.2}}));
    ASSERT_TRUE(enum_parse(mode, c.mode));
    c.buckets = {8, 16, 32}, c.max_tokens_per_batch = 96, c.doc_mask = true;
    auto sync = run(c, 30);
    for (int threads = 1; threads <= 3; ++threads) {
      c.prefetch_threads = threads, c.prefetch_depth = 3;
      LoaderPosition p;
      auto got = run(c, 30, nullptr, &p);
      ASSERT_EQ(got, sync) << mode << " threads " << threads;
      EXPECT_EQ(p.step, 30u);
      // the position is that of the last batch handed out, not of what was prefetched
      c.prefetch_threads = 0;
      LoaderPosition q;
      run(c, 30, nullptr, &q);
      EXPECT_TRUE(p == q) << p.to_json().dump() << "\n" << q.to_json().dump();
    }
  }
}

TEST_F(LoaderTest, WaitAndLatencyAreRecorded) {
  LoaderConfig c = config(spec({{0, 1}}));
  c.prefetch_threads = 2;
  Loader l;
  ASSERT_TRUE(l.open(c).is_ok());
  for (int i = 0; i < 20; ++i) {
    l.next();
    EXPECT_GE(l.last_wait_ms(), 0.0);
    EXPECT_GE(l.last_fetch_ms(), l.last_wait_ms());
  }
  EXPECT_EQ(l.fetch_latency().stats().count, 20u);
}

TEST_F(LoaderTest, NoAllocationPerStepOnceWarm) {
  for (std::string mode : {"packed", "bucketed"})
    for (int threads : {0, 2}) {
      LoaderConfig c = config(spec({{0, 0.5}, {1, 0.3}, {2, 0.2}}));
      ASSERT_TRUE(enum_parse(mode, c.mode));
      c.buckets = {8, 16, 32}, c.max_tokens_per_batch = 96, c.prefetch_threads = threads;
      Loader l;
      ASSERT_TRUE(l.open(c).is_ok());
      for (int i = 0; i < 200; ++i) l.next();  // warm: every buffer at its largest, permutations cached
      uint64_t before = g_allocs.load();
      uint64_t steps = 0;
      for (int i = 0; i < 50; ++i) steps += l.next().step > 0;
      uint64_t after = g_allocs.load();
      EXPECT_EQ(after - before, 0u) << mode << ", " << threads << " threads (" << steps << " steps)";
    }
}

TEST(LoaderConfigTest, ReadsTomlAndNamesBadKeys) {
  toml::table root = toml::parse(R"(
[data]
sources = ["a:0.7", "b:0.3"]
mode = "bucketed"
buckets = [128, 256, 512]
max_tokens_per_batch = 4096
eod_id = 50256
prefetch_threads = 3
)");
  LoaderConfig c;
  toml::table resolved;
  Status s = loader_config_read(root, c, &resolved);
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(c.sources, "a:0.7,b:0.3");
  EXPECT_EQ(c.mode, BatchMode::kBucketed);
  EXPECT_EQ(c.buckets, (std::vector<int>{128, 256, 512}));
  EXPECT_EQ(c.max_tokens_per_batch, 4096u);
  EXPECT_EQ(c.prefetch_threads, 3);
  EXPECT_TRUE(resolved.contains("seq_len"));

  auto bad = [](const char* text, const char* want) {
    toml::table r = toml::parse(text);
    LoaderConfig c;
    Status s = loader_config_read(r, c);
    EXPECT_FALSE(s.is_ok()) << text;
    EXPECT_NE(s.message().find(want), std::string::npos) << s.message();
  };
  bad("[data]\nsources = \"a\"\neod_id = 0\nmode = \"fixed\"\n", "mode = \"fixed\": expected \"packed\" or \"bucketed\"");
  bad("[data]\nsources = \"a\"\neod_id = 0\nbuckets = [256, 128]\n", "strictly ascending");
  bad("[data]\nsources = \"a\"\neod_id = 0\nseq_lenn = 5\n", "seq_lenn");
  bad("[data]\nsources = \"a\"\n", "eod_id");
  bad("[data]\nsources = \"a:x\"\neod_id = 0\n", "weight");
  bad("[data]\nsources = \"a\"\neod_id = 0\nmode = \"bucketed\"\nmax_tokens_per_batch = 100\n", "max_tokens_per_batch = 100");
  bad("[data]\nsources = \"a\"\neod_id = 0\nmode = \"bucketed\"\nspan_tokens = 1024\n", "span_tokens = 1024: spans are for packed rows");
  // --set data.buckets=64,128 arrives as a string
  toml::table r;
  ASSERT_TRUE(config_apply_set(r, "data.sources=a").is_ok());
  ASSERT_TRUE(config_apply_set(r, "data.eod_id=0").is_ok());
  ASSERT_TRUE(config_apply_set(r, "data.buckets=\"64,128\"").is_ok());
  LoaderConfig c2;
  s = loader_config_read(r, c2);
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(c2.buckets, (std::vector<int>{64, 128}));
}

TEST(LatencyWindowTest, PercentilesOverTheLastSamples) {
  LatencyWindow w(100);
  for (int i = 1; i <= 100; ++i) w.add(i);
  auto s = w.stats();
  EXPECT_EQ(s.count, 100u);
  EXPECT_DOUBLE_EQ(s.p50, 50);
  EXPECT_DOUBLE_EQ(s.p95, 95);
  EXPECT_DOUBLE_EQ(s.p99, 99);
  EXPECT_DOUBLE_EQ(s.max, 100);
  for (int i = 0; i < 100; ++i) w.add(1000);  // the window forgets the old ones
  EXPECT_DOUBLE_EQ(w.stats().p50, 1000);
  EXPECT_EQ(w.total(), 200u);
}
