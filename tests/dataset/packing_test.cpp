// Tests for packing.cpp: the planner and the fill, on shards whose token values encode
// (source, document, position), so every batch decodes back to where it came from.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <unistd.h>

#include "smelt/dataset/blend.hpp"

using namespace smelt;
namespace fs = std::filesystem;

namespace {

constexpr int32_t kEod = 1;
int32_t tok(int s, int d, int p) { return (s + 1) * 10000000 + d * 1000 + p; }
int tok_doc(int32_t t) { return (t % 10000000) / 1000; }

class PackingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("smelt_packing_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Source s with documents of the given lengths; returns the opened shard.
  IndexedDataset& make(int s, const std::vector<int>& lens) {
    std::string prefix = (dir_ / ("src" + std::to_string(s))).string();
    IndexedWriter w;
    EXPECT_TRUE(w.open(prefix, IndexedDType::kInt32).is_ok());
    for (size_t d = 0; d < lens.size(); ++d) {
      std::vector<uint32_t> ids;
      for (int p = 0; p < lens[d]; ++p) ids.push_back(static_cast<uint32_t>(tok(s, static_cast<int>(d), p)));
      EXPECT_TRUE(w.add_document(ids).is_ok());
    }
    EXPECT_TRUE(w.finish().is_ok());
    shards_.push_back(std::make_unique<IndexedDataset>());
    EXPECT_TRUE(shards_.back()->open(prefix).is_ok());
    return *shards_.back();
  }

  // The token stream of one source: documents in the sampler's order, EOD after each, epochs on.
  static std::vector<int32_t> stream(int s, const std::string& name, const std::vector<int>& lens, uint64_t seed,
                                     bool shuffle, bool eod, size_t n) {
    std::vector<int32_t> out;
    std::vector<uint32_t> perm;
    for (uint64_t e = 0; out.size() < n; ++e) {
      sampler_permutation(seed, name, e, lens.size(), perm);
      for (size_t i = 0; i < lens.size() && out.size() < n; ++i) {
        uint32_t d = shuffle ? perm[i] : static_cast<uint32_t>(i);
        for (int p = 0; p < lens[d]; ++p) out.push_back(tok(s, static_cast<int>(d), p));
        if (eod) out.push_back(kEod);
      }
    }
    return out;
  }

  fs::path dir_;
  std::vector<std::unique_ptr<IndexedDataset>> shards_;
};

}  // namespace

TEST_F(PackingTest, PackedRowsAreTheStreamShiftedByOne) {
  std::vector<int> lens = {5, 3, 7, 1, 12, 4, 2, 9};
  const IndexedDataset& ds = make(0, lens);
  for (bool shuffle : {false, true}) {
    LoaderConfig o;
    o.seq_len = 8, o.batch_size = 3, o.eod_id = kEod, o.shuffle = shuffle, o.seed = 5;
    Planner pl;
    ASSERT_TRUE(pl.init(o, {{"a", "a", 1.0}}, {&ds}, nullptr).is_ok());
    std::vector<int32_t> ref = stream(0, "a", lens, 5, shuffle, true, 1000);
    BatchPlan plan;
    Batch b;
    loader_batch_reserve(b, pl.max_rows(), pl.max_cols());
    for (int step = 0; step < 10; ++step) {
      pl.next(plan);
      packing_fill(plan, {&ds}, kEod, false, b);
      ASSERT_EQ(b.B, 3);
      ASSERT_EQ(b.T, 8);
      // Without doc masking the segments are still there (sources, lineage) but attention spans them.
      EXPECT_FALSE(b.mask_segments);
      EXPECT_EQ(b.step, static_cast<uint64_t>(step));
      EXPECT_EQ(b.target_tokens, 24u);
      for (int r = 0; r < 3; ++r) {
        size_t at = static_cast<size_t>(step * 3 + r) * 8;  // rows consume T tokens each
        for (int t = 0; t < 8; ++t) {
          ASSERT_EQ(b.inputs[r * 8 + t], ref[at + t]) << "step " << step << " row " << r << " t " << t;
          ASSERT_EQ(b.targets[r * 8 + t], ref[at + t + 1]);
          ASSERT_EQ(b.positions[r * 8 + t], t);
          ASSERT_EQ(b.sources[r * 8 + t], 0);
        }
        // segments: a new one starts after each EOD
        int seg = 0;
        for (int t = 0; t < 8; ++t) {
          ASSERT_EQ(b.segments[r * 8 + t], seg);
          if (b.inputs[r * 8 + t] == kEod) ++seg;
        }
      }
    }
  }
}

TEST_F(PackingTest, DocMaskRestartsPositionsAndMasksTheCrossDocumentTarget) {
  std::vector<int> lens = {3, 2, 6};
  const IndexedDataset& ds = make(0, lens);
  LoaderConfig o;
  o.seq_len = 6, o.batch_size = 1, o.eod_id = kEod, o.shuffle = false;
  Planner pl;
  ASSERT_TRUE(pl.init(o, {{"a", "a", 1.0}}, {&ds}, nullptr).is_ok());
  BatchPlan plan;
  Batch b;
  pl.next(plan);
  packing_fill(plan, {&ds}, kEod, true, b);
  // stream: d0p0 d0p1 d0p2 EOD d1p0 d1p1 | EOD ...
  std::vector<int32_t> in = {tok(0, 0, 0), tok(0, 0, 1), tok(0, 0, 2), kEod, tok(0, 1, 0), tok(0, 1, 1)};
  std::vector<int32_t> tg = {tok(0, 0, 1), tok(0, 0, 2), kEod, -1, tok(0, 1, 1), kEod};
  EXPECT_EQ(b.inputs, in);
  EXPECT_EQ(b.targets, tg);
  EXPECT_EQ(b.segments, (std::vector<int32_t>{0, 0, 0, 0, 1, 1}));
  EXPECT_TRUE(b.mask_segments);
  EXPECT_EQ(b.positions, (std::vector<int32_t>{0, 1, 2, 3, 0, 1}));
  EXPECT_EQ(b.target_tokens, 5u);
  // next row starts with the EOD of d1 (a continued document: positions restart at the row start)
  pl.next(plan);
  packing_fill(plan, {&ds}, kEod, true, b);
  EXPECT_EQ(b.inputs, (std::vector<int32_t>{kEod, tok(0, 2, 0), tok(0, 2, 1), tok(0, 2, 2), tok(0, 2, 3), tok(0, 2, 4)}));
  EXPECT_EQ(b.targets, (std::vector<int32_t>{-1, tok(0, 2, 1), tok(0, 2, 2), tok(0, 2, 3), tok(0, 2, 4), tok(0, 2, 5)}));
  EXPECT_EQ(b.segments, (std::vector<int32_t>{0, 1, 1, 1, 1, 1}));
  EXPECT_EQ(b.positions, (std::vector<int32_t>{0, 0, 1, 2, 3, 4}));
}

TEST_F(PackingTest, WithoutEodDocumentsAreStillSegments) {
  std::vector<int> lens = {3, 4};
  const IndexedDataset& ds = make(0, lens);
  LoaderConfig o;
  o.seq_len = 5, o.batch_size = 1, o.append_eod = false, o.shuffle = false;
  Planner pl;
  ASSERT_TRUE(pl.init(o, {{"a", "a", 1.0}}, {&ds}, nullptr).is_ok());
  BatchPlan plan;
  Batch b;
  pl.next(plan);
  packing_fill(plan, {&ds}, -1, true, b);
  EXPECT_EQ(b.inputs, (std::vector<int32_t>{tok(0, 0, 0), tok(0, 0, 1), tok(0, 0, 2), tok(0, 1, 0), tok(0, 1, 1)}));
  EXPECT_EQ(b.targets, (std::vector<int32_t>{tok(0, 0, 1), tok(0, 0, 2), -1, tok(0, 1, 1), tok(0, 1, 2)}));
  EXPECT_EQ(b.segments, (std::vector<int32_t>{0, 0, 0, 1, 1}));
}

TEST_F(PackingTest, BucketedRowsPadToTheBucketWithMinusOneTargets) {
  // lengths chosen to land in each bucket, and one longer than the largest
  std::vector<int> lens = {3, 4, 7, 8, 9, 15, 16, 40, 2, 5, 6, 10, 12, 1, 11, 3};
  const IndexedDataset& ds = make(0, lens);
  LoaderConfig o;
  o.mode = BatchMode::kBucketed, o.buckets = {4, 8, 16}, o.max_tokens_per_batch = 32;
  o.eod_id = kEod, o.shuffle = false;
  Planner pl;
  ASSERT_TRUE(pl.init(o, {{"a", "a", 1.0}}, {&ds}, nullptr).is_ok());
  BatchPlan plan;
  Batch b;
  loader_batch_reserve(b, pl.max_rows(), pl.max_cols());
  std::map<int, int> seen;  // doc -> times
  for (int step = 0; step < 4; ++step) {  // the first epoch fills 4 batches (3 of 16, 1 of 8)
    pl.next(plan);
    packing_fill(plan, {&ds}, kEod, false, b);
    ASSERT_TRUE(b.T == 4 || b.T == 8 || b.T == 16) << b.T;
    ASSERT_EQ(b.B, 32 / b.T);
    for (int r = 0; r < b.B; ++r) {
      const int32_t* in = &b.inputs[r * b.T];
      const int32_t* tg = &b.targets[r * b.T];
      int d = tok_doc(in[0]);
      seen[d]++;
      int len = lens[d];
      int L = std::min(len + 1, 16 + 1);  // tokens with EOD, truncated to the largest bucket + 1
      int pairs = L - 1;
      // the smallest bucket that holds the pairs
      int want = pairs <= 4 ? 4 : pairs <= 8 ? 8 : 16;
      ASSERT_EQ(b.T, want) << "doc " << d << " len " << len;
      for (int t = 0; t < b.T; ++t) {
        if (t < pairs) {
          ASSERT_EQ(in[t], tok(0, d, t));
          int32_t next = t + 1 < len ? tok(0, d, t + 1) : kEod;
          ASSERT_EQ(tg[t], next) << "doc " << d << " t " << t;
          ASSERT_EQ(b.segments[r * b.T + t], 0);
          ASSERT_EQ(b.positions[r * b.T + t], t);
        } else {
          ASSERT_EQ(in[t], 0);
          ASSERT_EQ(tg[t], -1);
          ASSERT_EQ(b.segments[r * b.T + t], -1);
        }
      }
    }
  }
  // 16 documents, one (len 1 -> 2 tokens with EOD, one pair) included; within the first epoch each once
  for (auto& [d, n] : seen) EXPECT_EQ(n, 1) << "doc " << d;
}

TEST_F(PackingTest, RanksSplitTheGlobalBatch) {
  std::vector<int> lens;
  for (int d = 0; d < 50; ++d) lens.push_back(1 + (d * 7) % 23);
  const IndexedDataset& ds = make(0, lens);
  for (BatchMode mode : {BatchMode::kPacked, BatchMode::kBucketed}) {
    LoaderConfig o;
    o.mode = mode, o.seq_len = 16, o.batch_size = 5, o.buckets = {8, 16, 32}, o.max_tokens_per_batch = 96;
    o.eod_id = kEod, o.seed = 3;
    Planner one;
    ASSERT_TRUE(one.init(o, {{"a", "a", 1.0}}, {&ds}, nullptr).is_ok());
    std::vector<Planner> parts(2);
    for (int r = 0; r < 2; ++r) {
      LoaderConfig p = o;
      p.rank = r, p.ranks = 2;
      ASSERT_TRUE(parts[r].init(p, {{"a", "a", 1.0}}, {&ds}, nullptr).is_ok());
    }
    BatchPlan plan;
    Batch whole, half;
    for (int step = 0; step < 8; ++step) {
      one.next(plan);
      packing_fill(plan, {&ds}, kEod, false, whole);
      std::vector<int32_t> joined;
      for (int r = 0; r < 2; ++r) {
        parts[r].next(plan);
        packing_fill(plan, {&ds}, kEod, false, half);
        ASSERT_EQ(half.T, whole.T);
        joined.insert(joined.end(), half.inputs.begin(), half.inputs.end());
      }
      ASSERT_EQ(joined, whole.inputs) << "step " << step;
    }
  }
}

TEST_F(PackingTest, MultiSequenceDocumentsReadAsOne) {
  std::string prefix = (dir_ / "multi").string();
  IndexedWriter w;
  ASSERT_TRUE(w.open(prefix, IndexedDType::kUInt16).is_ok());
  std::vector<uint32_t> a = {10, 11}, b2 = {12, 13, 14}, c = {20, 21};
  ASSERT_TRUE(w.add_sequence(a).is_ok());
  ASSERT_TRUE(w.add_sequence(b2).is_ok());
  w.end_document();
  ASSERT_TRUE(w.add_document(c).is_ok());
  ASSERT_TRUE(w.finish().is_ok());
  IndexedDataset ds;
  ASSERT_TRUE(ds.open(prefix).is_ok());
  EXPECT_EQ(indexed_doc_tokens(ds, 0), 5u);
  LoaderConfig o;
  o.seq_len = 7, o.batch_size = 1, o.eod_id = 1, o.shuffle = false;
  Planner pl;
  ASSERT_TRUE(pl.init(o, {{"m", "m", 1.0}}, {&ds}, nullptr).is_ok());
  BatchPlan plan;
  Batch bt;
  pl.next(plan);
  packing_fill(plan, {&ds}, 1, false, bt);
  EXPECT_EQ(bt.inputs, (std::vector<int32_t>{10, 11, 12, 13, 14, 1, 20}));
  EXPECT_EQ(bt.targets, (std::vector<int32_t>{11, 12, 13, 14, 1, 20, 21}));
}

// span_tokens: the order is over spans of a document, so a long document's parts are spread over
// the epoch instead of filling consecutive rows. The stream is then exactly the spans in
// sampler_permutation's order, an EOD after each document's last span; every token of the epoch is
// read once; a position taken mid-epoch resumes the same stream; and a position that counts whole
// documents is refused.
TEST_F(PackingTest, SpansShufflePartsOfLongDocumentsApart) {
  std::vector<int> lens = {40, 3, 7, 0, 12, 25, 2, 9};
  const IndexedDataset& ds = make(0, lens);
  const uint64_t S = 5;
  // The reference stream: spans (doc, begin, len, last) in permutation order.
  struct Span { int doc, begin, len; bool last; };
  std::vector<Span> spans;
  for (int d = 0; d < (int)lens.size(); ++d) {
    const int n = std::max(1, (lens[d] + (int)S - 1) / (int)S);
    for (int k = 0; k < n; ++k) spans.push_back({d, k * (int)S, std::min((int)S, lens[d] - k * (int)S), k + 1 == n});
  }
  ASSERT_EQ(spans.size(), 8u + 5 + 1 + 1 + 2 + 4 + 1 + 1);
  std::vector<int32_t> ref;
  std::vector<uint32_t> perm;
  for (uint64_t e = 0; e < 3; ++e) {
    sampler_permutation(9, "a", e, spans.size(), perm);
    for (uint32_t i : perm) {
      const Span& s = spans[i];
      for (int p = 0; p < s.len; ++p) ref.push_back(tok(0, s.doc, s.begin + p));
      if (s.last) ref.push_back(kEod);
    }
  }
  const size_t epoch_tokens = 98 + lens.size();
  LoaderConfig o;
  o.seq_len = 8, o.batch_size = 2, o.eod_id = kEod, o.shuffle = true, o.seed = 9, o.span_tokens = S;
  Planner pl;
  ASSERT_TRUE(pl.init(o, {{"a", "a", 1.0}}, {&ds}, nullptr).is_ok());
  BatchPlan plan;
  Batch b;
  loader_batch_reserve(b, pl.max_rows(), pl.max_cols());
  std::vector<int32_t> got;
  LoaderPosition mid;
  for (int step = 0; step < 12; ++step) {
    if (step == 5) mid = pl.position(pl.state());
    pl.next(plan);
    packing_fill(plan, {&ds}, kEod, false, b);
    for (int r = 0; r < b.B; ++r) {
      for (int t = 0; t < b.T; ++t) ASSERT_EQ(b.targets[r * b.T + t], ref[got.size() + t + 1]) << step << " " << r;
      got.insert(got.end(), b.inputs.begin() + r * b.T, b.inputs.begin() + (r + 1) * b.T);
    }
  }
  ASSERT_GE(got.size(), epoch_tokens);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), ref.begin()));
  // Every token of the first epoch once; the 40-token document's spans are not read back to back.
  std::multiset<int32_t> first(got.begin(), got.begin() + (long)epoch_tokens);
  for (int d = 0; d < (int)lens.size(); ++d)
    for (int p = 0; p < lens[d]; ++p) EXPECT_EQ(first.count(tok(0, d, p)), 1u) << d << " " << p;
  EXPECT_EQ(first.count(kEod), lens.size());
  size_t at0 = 0, at5 = 0;
  for (size_t i = 0; i < epoch_tokens; ++i) {
    if (got[i] == tok(0, 0, 0)) at0 = i;
    if (got[i] == tok(0, 0, 5)) at5 = i;
  }
  EXPECT_NE(at5, at0 + 5) << "the second span of document 0 follows its first";
  // The position counts spans; resuming from it gives the rest of the same stream.
  EXPECT_EQ(mid.to_json().at("span_tokens"), S);
  LoaderPosition back;
  ASSERT_TRUE(LoaderPosition::from_json(mid.to_json(), back).is_ok());
  Planner re;
  ASSERT_TRUE(re.init(o, {{"a", "a", 1.0}}, {&ds}, &back).is_ok());
  for (int step = 5; step < 12; ++step) {
    re.next(plan);
    packing_fill(plan, {&ds}, kEod, false, b);
    for (int r = 0; r < b.B; ++r)
      for (int t = 0; t < b.T; ++t) ASSERT_EQ(b.inputs[r * b.T + t], got[(size_t)(step * 2 + r) * 8 + t]);
  }
  // Whole documents and spans count different things: a resume across them is refused.
  LoaderConfig whole = o;
  whole.span_tokens = 0;
  Planner w;
  Status st = w.init(whole, {{"a", "a", 1.0}}, {&ds}, &back);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("spans of 5 tokens"), std::string::npos) << st.message();
  LoaderConfig bucketed = o;
  bucketed.mode = BatchMode::kBucketed, bucketed.buckets = {8}, bucketed.max_tokens_per_batch = 16;
  EXPECT_FALSE(Planner().init(bucketed, {{"a", "a", 1.0}}, {&ds}, nullptr).is_ok());
}
