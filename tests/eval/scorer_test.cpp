// The task scorer (src/smelt/eval/scorer.cpp) against the plainest computation of the same numbers:
// one sequence fed one token at a time through the decoder, log-softmax of each row in double.
// Prefix reuse (the context read once, copied to each continuation's slot) must give what reading
// every (context, continuation) pair whole gives, and rolling windows what the definition says.
#include "smelt/eval/scorer.hpp"

#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "smelt/model/model.hpp"

using namespace smelt;

namespace {

ModelConfig tiny() {
  ModelConfig c;
  c.vocab_size = 96;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_hidden = 64;
  c.max_seq_len = 24;
  c.init_std = 0.3;  // sharp, varied distributions (0.02 is nearly uniform)
  return c;
}

struct Fixture {
  ModelConfig c = tiny();
  Model m;
  std::vector<float> params;
  Fixture() {
    EXPECT_TRUE(m.init(c, 1, c.max_seq_len, 1, 7).is_ok());
    params.assign(m.params(), m.params() + param_layout(c).total);
  }
};

// log p(ids[i] | ids[<i]) for i in [from, ids.size()), one token per decoder step, over ids < vocab.
std::vector<double> teacher_forced(const Fixture& f, const std::vector<int32_t>& ids, size_t from, int vocab) {
  Decoder d;
  DecoderOptions o;
  EXPECT_TRUE(d.init(f.c, f.params.data(), o).is_ok());
  std::vector<float> z(f.c.vocab_size);
  std::vector<double> out;
  for (size_t i = 0; i + 1 < ids.size(); i++) {
    DecodeRow r{0, ids[i], true};
    EXPECT_TRUE(d.step(&r, 1, z.data()).is_ok());
    if (i + 1 < from) continue;
    double mx = -1e30, s = 0;
    for (int v = 0; v < vocab; v++) mx = std::max(mx, (double)z[v]);
    for (int v = 0; v < vocab; v++) s += std::exp((double)z[v] - mx);
    out.push_back((double)z[ids[i + 1]] - mx - std::log(s));
  }
  return out;
}

std::vector<int32_t> random_ids(std::mt19937& g, size_t n, int vocab) {
  std::vector<int32_t> v(n);
  for (auto& x : v) x = (int32_t)(g() % (unsigned)vocab);
  return v;
}

double sum(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}

TEST(ScorerTest, LoglikelihoodsEqualTeacherForcingWithAndWithoutPrefixReuse) {
  Fixture f;
  const int vocab = 90;  // ids 90..95: padding the tokenizer never produces, left out of every softmax
  std::mt19937 g(3);
  const std::vector<int32_t> ctx = random_ids(g, 9, vocab);
  std::vector<std::vector<int32_t>> conts = {random_ids(g, 1, vocab), random_ids(g, 4, vocab), random_ids(g, 7, vocab),
                                             random_ids(g, 3, vocab), random_ids(g, 2, vocab)};
  for (bool reuse : {true, false})
    for (int max_choices : {2, 8}) {  // 2: the continuations in waves of two
      ScorerOptions o;
      o.prefix_reuse = reuse;
      o.max_choices = max_choices;
      o.max_rows = 5;  // steps split mid-continuation
      Scorer sc;
      ASSERT_TRUE(sc.init(f.c, f.params.data(), vocab, o).is_ok());
      std::vector<LlScore> got;
      ASSERT_TRUE(sc.loglikelihood(ctx, conts, got).is_ok());
      ASSERT_EQ(got.size(), conts.size());
      for (size_t j = 0; j < conts.size(); j++) {
        std::vector<int32_t> all = ctx;
        all.insert(all.end(), conts[j].begin(), conts[j].end());
        const double want = sum(teacher_forced(f, all, ctx.size(), vocab));
        EXPECT_NEAR(got[j].logprob, want, 1e-4 * std::max(1.0, std::fabs(want))) << "reuse " << reuse << " choice " << j;
      }
      // Prefix reuse reads the context once: fewer rows than every pair whole.
      const uint64_t pairs_rows = 5 * 9 + (0 + 3 + 6 + 2 + 1);
      if (reuse) EXPECT_EQ(sc.rows_run(), 9u + (0 + 3 + 6 + 2 + 1));
      else EXPECT_EQ(sc.rows_run(), pairs_rows);
    }
}

TEST(ScorerTest, GreedyIsTrueExactlyWhenEveryTokenIsTheArgmax) {
  Fixture f;
  Scorer sc;
  ASSERT_TRUE(sc.init(f.c, f.params.data(), f.c.vocab_size, ScorerOptions{}).is_ok());
  std::vector<int32_t> ctx = {1, 2, 3}, gen;
  ASSERT_TRUE(sc.greedy(ctx, 4, -1, [](const std::vector<int32_t>&) { return false; }, gen).is_ok());
  ASSERT_EQ(gen.size(), 4u);
  std::vector<int32_t> other = gen;
  other[2] = (other[2] + 1) % f.c.vocab_size;
  std::vector<LlScore> s;
  ASSERT_TRUE(sc.loglikelihood(ctx, {gen, other}, s).is_ok());
  EXPECT_TRUE(s[0].greedy);
  EXPECT_FALSE(s[1].greedy);
  EXPECT_GT(s[0].logprob, s[1].logprob);
}

TEST(ScorerTest, LongContextsAreCutFromTheLeftAndRollingWindowsFollowTheDefinition) {
  Fixture f;
  const int T = f.c.max_seq_len, vocab = f.c.vocab_size;
  std::mt19937 g(5);
  Scorer sc;
  ASSERT_TRUE(sc.init(f.c, f.params.data(), vocab, ScorerOptions{}).is_ok());
  // A context of 40 tokens and a continuation of 5: the inputs are the last T of context + cont[:-1].
  const std::vector<int32_t> ctx = random_ids(g, 40, vocab), cont = random_ids(g, 5, vocab);
  std::vector<LlScore> s;
  ASSERT_TRUE(sc.loglikelihood(ctx, {cont}, s).is_ok());
  std::vector<int32_t> kept(ctx.end() - (T - 4), ctx.end());
  const size_t from = kept.size();
  kept.insert(kept.end(), cont.begin(), cont.end());
  EXPECT_NEAR(s[0].logprob, sum(teacher_forced(f, kept, from, vocab)), 1e-4 * std::fabs(s[0].logprob));
  std::vector<LlScore> too_long;
  EXPECT_FALSE(sc.loglikelihood(ctx, {random_ids(g, T, vocab)}, too_long).is_ok());

  // Rolling over 60 tokens with windows of T = 24 predictions: [1,25) from ids[0..24), [25,49)
  // from ids[24..48) with its own full context ids[24-24+... ], as the harness's disjoint windows.
  const std::vector<int32_t> doc = random_ids(g, 60, vocab);
  double got = 0;
  ASSERT_TRUE(sc.rolling(doc, got).is_ok());
  double want = 0;
  for (size_t s0 = 1; s0 < doc.size();) {
    const size_t e = std::min(s0 + T, doc.size()), b = e - 1 > (size_t)T ? e - 1 - T : 0;
    std::vector<int32_t> w(doc.begin() + b, doc.begin() + e);
    want += sum(teacher_forced(f, w, s0 - b, vocab));
    s0 = e;
  }
  EXPECT_NEAR(got, want, 1e-4 * std::fabs(want));
}

}  // namespace
