// BPE merge engine: the heap path (long pieces) equals the array path and a naive reference, and a
// 100 KB run of Han characters (one pre-token) costs O(n log n) pair look-ups, not O(n^2).
#include "smelt/tokenizer/bpe_encode.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "smelt/tokenizer/tokenizer.hpp"
#include "tok_test_util.hpp"

namespace smelt {
namespace {

using namespace smelt::test;

// The textbook loop: find the lowest-priority adjacent pair, merge it, repeat.
std::vector<uint32_t> naive(const BpeModel& m, std::string_view piece) {
  std::map<std::pair<uint32_t, uint32_t>, std::pair<uint32_t, uint32_t>> pr;
  std::map<std::string, uint32_t> id;
  for (uint32_t i = 0; i < m.vocab.size(); i++) id.emplace(m.vocab[i], i);
  for (uint32_t k = 0; k < m.merges.size(); k++)
    pr[m.merges[k]] = {k, id[m.vocab[m.merges[k].first] + m.vocab[m.merges[k].second]]};
  std::vector<uint32_t> s;
  for (unsigned char c : piece) s.push_back(id[std::string(1, static_cast<char>(c))]);
  for (;;) {
    size_t best = SIZE_MAX;
    uint32_t bp = UINT32_MAX;
    for (size_t i = 0; i + 1 < s.size(); i++) {
      auto it = pr.find({s[i], s[i + 1]});
      if (it != pr.end() && it->second.first < bp) { bp = it->second.first; best = i; }
    }
    if (best == SIZE_MAX) return s;
    s[best] = pr[{s[best], s[best + 1]}].second;
    s.erase(s.begin() + best + 1);
  }
}

// A small model: bytes, then merges of frequent pairs in a Chinese + English text.
BpeModel small_model() {
  BpeModel m;
  for (int b = 0; b < 256; b++) m.vocab.push_back(std::string(1, static_cast<char>(b)));
  std::string text = read_file(std::string(SMELT_TEST_DATA) + "/tokenizer/tang300.txt").substr(0, 20000);
  std::vector<uint32_t> ids;
  for (unsigned char c : text) ids.push_back(c);
  for (int round = 0; round < 300; round++) {
    std::map<std::pair<uint32_t, uint32_t>, int> count;
    for (size_t i = 0; i + 1 < ids.size(); i++) count[{ids[i], ids[i + 1]}]++;
    auto best = std::max_element(count.begin(), count.end(), [](auto& a, auto& b) { return a.second < b.second; });
    if (best == count.end() || best->second < 2) break;
    uint32_t nid = static_cast<uint32_t>(m.vocab.size());
    m.vocab.push_back(m.vocab[best->first.first] + m.vocab[best->first.second]);
    m.merges.push_back(best->first);
    std::vector<uint32_t> nx;
    for (size_t i = 0; i < ids.size(); i++) {
      if (i + 1 < ids.size() && ids[i] == best->first.first && ids[i + 1] == best->first.second) { nx.push_back(nid); i++; }
      else nx.push_back(ids[i]);
    }
    ids.swap(nx);
  }
  m.pretokenizer = "cl100k";
  return m;
}

// Han characters of the Tang poems only, repeated to n bytes: one pre-token under every pattern.
std::string han_run(size_t n) {
  std::string poems = read_file(std::string(SMELT_TEST_DATA) + "/tokenizer/tang300.txt");
  std::string han;
  size_t i = 0;
  while (han.size() < n) {
    if (i >= poems.size()) i = 0;
    unsigned char c = poems[i];
    size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (len == 3 && c >= 0xE4 && c <= 0xE9) han.append(poems, i, 3);
    i += len;
  }
  return han;
}

TEST(BpeEncode, ShortAndLongPathsEqualTheNaiveLoop) {
  BpeModel m = small_model();
  Tokenizer t;
  ASSERT_TRUE(Tokenizer::from_model(m, t));
  std::string text = read_file(std::string(SMELT_TEST_DATA) + "/tokenizer/tang300.txt");
  Status err;
  auto pre = Pretokenizer::create("cl100k", err);
  std::vector<std::string_view> pieces;
  const std::string head = text.substr(0, 30000);  // the pieces view it: it must outlive them
  pre->split(head, pieces);
  size_t long_pieces = 0;
  for (auto p : pieces) {
    std::vector<uint32_t> got;
    t.encode(p, got);
    ASSERT_EQ(got, naive(m, p)) << p;
    long_pieces += p.size() > 128;  // the heap path
  }
  std::string han = han_run(30000);
  for (size_t start = 0, len = 3; start + len <= han.size(); start += len, len = (len * 7 + 3) % 900 / 3 * 3 + 3) {
    std::string p = han.substr(start, len);
    std::vector<uint32_t> got;
    t.encode(p, got);
    ASSERT_EQ(got, naive(m, p)) << p.size();
    long_pieces += p.size() > 128;  // the heap path
  }
  EXPECT_GT(long_pieces, 10u);
}

TEST(BpeEncode, HanRunOf100KBIsNearLinear) {
  BpeModel m = small_model();
  Tokenizer t;
  ASSERT_TRUE(Tokenizer::from_model(m, t));
  std::string han = han_run(100000);
  std::vector<std::string_view> pieces;
  t.pretokenizer().split(han, pieces);
  ASSERT_EQ(pieces.size(), 1u);
  for (size_t n : {size_t(12500), size_t(100000)}) {
    std::string s = han.substr(0, n - n % 3);
    uint64_t before = bpe_debug_pair_lookups();
    std::vector<uint32_t> ids;
    t.encode(s, ids);
    uint64_t ops = bpe_debug_pair_lookups() - before;
    // initial pairs + two per merge: at most 3 per byte
    EXPECT_LE(ops, 3 * s.size()) << n;
    std::string back;
    t.decode(ids.data(), ids.size(), back);
    EXPECT_EQ(back, s);
    if (n == 12500) EXPECT_EQ(ids, naive(m, s));
  }
}

}  // namespace
}  // namespace smelt
