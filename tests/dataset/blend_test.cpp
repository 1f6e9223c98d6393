// Tests for blend.cpp and sampler.cpp: the --data parser, position JSON, the weighted schedule,
// per-source permutations.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "smelt/dataset/blend.hpp"

using namespace smelt;

TEST(BlendParse, PrefixesWeightsNames) {
  std::vector<DataSource> s;
  ASSERT_TRUE(blend_parse_sources("data/web:0.7, data/code:0.3,wiki=data/wiki", s).is_ok());
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].name, "data/web");
  EXPECT_EQ(s[0].prefix, "data/web");
  EXPECT_DOUBLE_EQ(s[0].weight, 0.7);
  EXPECT_EQ(s[1].prefix, "data/code");
  EXPECT_DOUBLE_EQ(s[1].weight, 0.3);
  EXPECT_EQ(s[2].name, "wiki");
  EXPECT_EQ(s[2].prefix, "data/wiki");
  EXPECT_DOUBLE_EQ(s[2].weight, 1.0);
}

TEST(BlendParse, ErrorsNameTheEntry) {
  std::vector<DataSource> s;
  Status st = blend_parse_sources("a:0.5,b:zero", s);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("b:zero"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("> 0"), std::string::npos) << st.message();
  EXPECT_FALSE(blend_parse_sources("a:-1", s).is_ok());
  EXPECT_FALSE(blend_parse_sources("a:0", s).is_ok());
  st = blend_parse_sources("a,a", s);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("twice"), std::string::npos);
  EXPECT_FALSE(blend_parse_sources("", s).is_ok());
  EXPECT_FALSE(blend_parse_sources("a,,b", s).is_ok());
}

TEST(BlendPosition, JsonRoundTrip) {
  LoaderPosition p;
  p.step = 42;
  p.blend = "a=1;b=2;";
  p.sources["a"] = {3, 17, 5, 100};
  p.sources["b"] = {0, 2, 0, 7};
  p.pending.push_back({256, "a", 9, 200, true});
  LoaderPosition q;
  ASSERT_TRUE(LoaderPosition::from_json(nlohmann::json::parse(p.to_json().dump()), q).is_ok());
  EXPECT_TRUE(p == q);
  EXPECT_EQ(q.sources["a"].offset, 5u);
  EXPECT_EQ(q.pending[0].bucket, 256);
  EXPECT_FALSE(LoaderPosition::from_json(nlohmann::json::parse("{\"version\":2}"), q).is_ok());
  EXPECT_FALSE(LoaderPosition::from_json(nlohmann::json::parse("{\"version\":1}"), q).is_ok());
}

TEST(BlendSchedule, SharesConvergeToWeights) {
  std::vector<double> w = {0.5, 0.3, 0.2};
  std::vector<SourceCursor> c(3);
  for (int i = 0; i < 1000; ++i) c[blend_pick(w, c)].units += 1;
  EXPECT_NEAR(static_cast<double>(c[0].units), 500, 1);
  EXPECT_NEAR(static_cast<double>(c[1].units), 300, 1);
  EXPECT_NEAR(static_cast<double>(c[2].units), 200, 1);
  // Error feedback: at every prefix the share is within one unit of the weight.
  std::vector<SourceCursor> d(3);
  for (int i = 1; i <= 997; ++i) {
    d[blend_pick(w, d)].units += 1;
    for (int k = 0; k < 3; ++k) EXPECT_LE(std::abs(static_cast<double>(d[k].units) - w[k] * i), 1.0 + 1e-9);
  }
}

TEST(Sampler, PermutationIsSeededByNameNotIndex) {
  std::vector<uint32_t> a, b, c, d;
  sampler_permutation(7, "web", 0, 1000, a);
  sampler_permutation(7, "web", 0, 1000, b);
  EXPECT_EQ(a, b);
  std::vector<uint32_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (uint32_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  sampler_permutation(8, "web", 0, 1000, c);
  EXPECT_NE(a, c);
  sampler_permutation(7, "code", 0, 1000, c);
  EXPECT_NE(a, c);
  sampler_permutation(7, "web", 1, 1000, d);  // the next epoch reshuffles
  EXPECT_NE(a, d);
  DocSampler s(7, "web", 1000);
  for (uint64_t i = 0; i < 1000; ++i) ASSERT_EQ(s.doc_at(0, i), a[i]);
  for (uint64_t i = 0; i < 1000; ++i) ASSERT_EQ(s.doc_at(1, i), d[i]);
  EXPECT_EQ(s.doc_at(0, 5), a[5]);  // both epochs cached
  DocSampler plain(7, "web", 10, false);
  EXPECT_EQ(plain.doc_at(3, 4), 4u);
}
