// dedup.hpp on real documents (tests/data/dedup: kernel and Python docs, English and Chinese) and
// variants made from them whose verdict is known by construction. Not a speed test (bench/prep).
#include "smelt/refine/dedup.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>

#include "smelt/common/hash.hpp"
#include "smelt/common/utf8.hpp"
#include "test_files.hpp"

using namespace smelt;
using V = DedupIndex::Verdict;

namespace {

std::string read_data(const std::string& name) {
  std::string s = smelt::test::read_file(std::string(SMELT_TEST_DATA) + "/dedup/" + name);
  EXPECT_FALSE(s.empty()) << name;
  return s;
}

const std::string& en_a() { static std::string s = read_data("en_kernel_howto.txt"); return s; }
const std::string& en_b() { static std::string s = read_data("en_python_floatingpoint.txt"); return s; }
const std::string& zh_a() { static std::string s = read_data("zh_kernel_howto.txt"); return s; }
const std::string& zh_b() { static std::string s = read_data("zh_kernel_management_style.txt"); return s; }

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> w;
  std::istringstream in(s);
  for (std::string x; in >> x;) w.push_back(x);
  return w;
}

std::string join(const std::vector<std::string>& w) {
  std::string out;
  for (size_t i = 0; i < w.size(); ++i) {
    if (i) out += (i % 13 == 0) ? "\n" : " ";
    out += w[i];
  }
  return out;
}

bool chance(uint64_t seed, uint64_t i, double p) { return hash_unit(hash_mix(seed * 0x100000001ULL + i)) < p; }

// Replaces each whitespace-separated word with probability p by a word of the unrelated document.
std::string edit_words(const std::string& text, double p, uint64_t seed) {
  static const std::vector<std::string> pool = split_words(en_b());
  std::vector<std::string> w = split_words(text);
  for (size_t i = 0; i < w.size(); ++i)
    if (chance(seed, i, p)) w[i] = pool[hash_mix(seed + i * 7919) % pool.size()];
  return join(w);
}

std::vector<char32_t> code_points(const std::string& s) {
  std::vector<char32_t> cps;
  for (size_t i = 0; i < s.size();) cps.push_back(utf8_next(s, i));
  return cps;
}

bool is_han(char32_t c) { return c >= 0x4E00 && c <= 0x9FFF; }

// Replaces each Han character with probability p by a Han character of the other Chinese document.
std::string edit_han(const std::string& text, double p, uint64_t seed) {
  static const std::vector<char32_t> pool = [] {
    std::vector<char32_t> v;
    for (char32_t c : code_points(zh_b())) if (is_han(c)) v.push_back(c);
    return v;
  }();
  std::string out;
  std::vector<char32_t> cps = code_points(text);
  for (size_t i = 0; i < cps.size(); ++i) {
    char32_t c = cps[i];
    if (is_han(c) && chance(seed, i, p)) c = pool[hash_mix(seed + i * 7919) % pool.size()];
    utf8_append(c, out);
  }
  return out;
}

// Same words, differently dressed: case, whitespace, extra punctuation, full-width letters.
std::string restyle(const std::string& text) {
  std::vector<std::string> w = split_words(text);
  std::string out;
  for (size_t i = 0; i < w.size(); ++i) {
    std::string x = w[i];
    if (i % 7 == 0) for (char& ch : x) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    if (i % 11 == 0) {  // ASCII letters and digits -> full-width forms (NFKC folds them back)
      std::string fw;
      for (char ch : x) {
        unsigned char u = static_cast<unsigned char>(ch);
        if (std::isalnum(u)) utf8_append(0xFF00 + (u - 0x20), fw); else fw += ch;
      }
      x = fw;
    }
    if (i % 5 == 0) x += ",";
    if (i % 9 == 0) x = "\"" + x + "\"!";
    out += x;
    out += (i % 3 == 0) ? "  \n\t " : " ";
  }
  return out;
}

std::vector<uint64_t> shingle_set(const std::string& text, bool cjk, const DedupConfig& c) {
  std::vector<uint64_t> v;
  dedup_shingles(text, cjk, c, v);
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

double jaccard(const std::string& x, const std::string& y, bool cjk, const DedupConfig& c) {
  std::vector<uint64_t> a = shingle_set(x, cjk, c), b = shingle_set(y, cjk, c), i;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(i));
  return static_cast<double>(i.size()) / static_cast<double>(a.size() + b.size() - i.size());
}

DedupSignature sig_of(const std::string& text, bool cjk, const DedupConfig& c) {
  DedupSignature s;
  dedup_signature(text, cjk, c, s);
  return s;
}

bool any_band_equal(const DedupSignature& x, const DedupSignature& y) {
  for (size_t j = 0; j < x.bands.size() && j < y.bands.size(); ++j)
    if (x.bands[j] != 0 && x.bands[j] == y.bands[j]) return true;
  return false;
}

V judge_second(const std::string& first, const std::string& second, bool cjk, const DedupConfig& c) {
  DedupIndex idx(c);
  EXPECT_EQ(idx.check_and_insert(sig_of(first, cjk, c)), V::kUnique);
  return idx.check_and_insert(sig_of(second, cjk, c));
}

std::string norm(std::string_view s) {
  std::string out;
  dedup_normalise(s, out);
  return out;
}

}  // namespace

TEST(DedupNormalise, CaseWhitespacePunctuationAndUnicodeForms) {
  EXPECT_EQ(norm("Hello,   World!!\n\t\u00C9COLE"), "hello world \u00e9cole");
  EXPECT_EQ(norm("e\u0301cole"), norm("\u00e9cole"));          // NFD and NFC agree
  EXPECT_EQ(norm("\uFF21\uFF22\uFF23\uFF11\uFF12\uFF13"), "abc123");  // full-width forms
  EXPECT_EQ(norm("hy\u00ADphen foo\u200Bbar"), "hyphen foobar");  // soft hyphen, zero width space
  EXPECT_EQ(norm("Stra\u00DFe"), "strasse");                    // case fold, not just lowercase
  EXPECT_EQ(norm("version 6.1-rc2"), "version 6 1 rc2");        // digits kept
  EXPECT_EQ(norm("ab\xff" "cd"), "ab cd");                      // an invalid byte separates
  EXPECT_EQ(norm("\xEF\xBB\xBFhello"), "hello");                // BOM ignored
  EXPECT_EQ(norm("\u4E2D\u6587\uFF0C\u6D4B\u8BD5 Linux\u5185\u6838"),
            "\u4E2D \u6587 \u6D4B \u8BD5 linux \u5185 \u6838");  // each Han character a token
  EXPECT_EQ(norm("\uF900"), "\u8C48");                          // compatibility ideograph
  EXPECT_EQ(norm("  ... --- !!! "), "");
}

TEST(DedupExact, RestyledEnglishDocumentIsAnExactDuplicate) {
  DedupConfig c;
  std::string v = restyle(en_a());
  ASSERT_NE(v, en_a());
  EXPECT_EQ(norm(v), norm(en_a()));
  EXPECT_EQ(sig_of(v, false, c).exact, sig_of(en_a(), false, c).exact);
  EXPECT_EQ(judge_second(en_a(), v, false, c), V::kExact);
}

TEST(DedupExact, RestyledChineseDocumentIsAnExactDuplicate) {
  DedupConfig c;
  // spaces between characters, ASCII punctuation for full-width, no BOM
  std::string v;
  for (char32_t cp : code_points(zh_a().substr(3))) {
    if (cp == 0xFF0C) { v += " , "; continue; }
    if (cp == 0x3002) { v += ". "; continue; }
    utf8_append(cp, v);
    if (is_han(cp)) v += ' ';
  }
  EXPECT_EQ(judge_second(zh_a(), v, true, c), V::kExact);
}

TEST(DedupNear, EnglishWithOnePercentOfWordsEditedIsFoundForEverySeed) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    DedupConfig c;
    c.seed = seed;
    std::string v = edit_words(en_a(), 0.01, seed);
    double j = jaccard(en_a(), v, false, c);
    EXPECT_GT(j, 0.85) << seed;
    EXPECT_LT(j, 0.97) << seed;  // really edited, not an exact copy
    EXPECT_EQ(judge_second(en_a(), v, false, c), V::kNear) << "seed " << seed << " jaccard " << j;
  }
}

TEST(DedupNear, ChineseWithOnePercentOfCharactersEditedIsFoundForEverySeed) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    DedupConfig c;
    c.seed = seed;
    std::string v = edit_han(zh_a(), 0.01, seed);
    double j = jaccard(zh_a(), v, true, c);
    EXPECT_GT(j, 0.85) << seed;
    EXPECT_LT(j, 0.97) << seed;
    EXPECT_EQ(judge_second(zh_a(), v, true, c), V::kNear) << "seed " << seed << " jaccard " << j;
  }
}

TEST(DedupUnique, UnrelatedRealDocumentsAreKept) {
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    DedupConfig c;
    c.seed = seed;
    EXPECT_EQ(judge_second(en_a(), en_b(), false, c), V::kUnique) << seed;
    EXPECT_EQ(judge_second(zh_a(), zh_b(), true, c), V::kUnique) << seed;
    EXPECT_EQ(judge_second(en_a(), zh_a(), true, c), V::kUnique) << seed;
  }
  DedupConfig c;
  EXPECT_LT(jaccard(en_a(), en_b(), false, c), 0.02);
  EXPECT_LT(jaccard(zh_a(), zh_b(), true, c), 0.05);
}

TEST(DedupIndex, FirstOfEachClusterIsKeptInDocumentOrder) {
  DedupConfig c;
  std::vector<std::pair<std::string, bool>> docs = {
      {en_a(), false},                       // A
      {en_b(), false},                       // B
      {edit_words(en_a(), 0.01, 3), false},  // near A
      {restyle(en_a()), false},              // exact A
      {edit_words(en_b(), 0.01, 4), false},  // near B
      {zh_a(), true},                        // Z
      {edit_han(zh_a(), 0.01, 5), true},     // near Z
      {en_a(), false},                       // A again
  };
  std::vector<V> want = {V::kUnique, V::kUnique, V::kNear, V::kExact,
                         V::kNear,   V::kUnique, V::kNear, V::kExact};
  DedupIndex idx(c);
  for (size_t i = 0; i < docs.size(); ++i) {
    V got = idx.check_and_insert(sig_of(docs[i].first, docs[i].second, c));
    EXPECT_EQ(got, want[i]) << "doc " << i << " got " << dedup_verdict_name(got);
  }
  EXPECT_EQ(idx.size(), 3u);
  EXPECT_GT(idx.memory_bytes(), 0u);

  // whichever member comes first is the one kept
  DedupIndex rev(c);
  EXPECT_EQ(rev.check_and_insert(sig_of(docs[2].first, false, c)), V::kUnique);
  EXPECT_EQ(rev.check_and_insert(sig_of(en_a(), false, c)), V::kNear);
}

// The LSH S-curve on real text: variants at Jaccard ~0.9 are found, at ~0.3 they are not, and in
// the middle of the curve the detection count matches sum of 1-(1-s^8)^14 over the trials.
TEST(DedupNear, DetectionRateFollowsTheLshCurve) {
  struct Level {
    double p;
    int found = 0;
    double expect = 0, var = 0, jsum = 0, est_sum = 0, resid2 = 0, binom = 0;
  };
  std::vector<Level> levels = {{0.01}, {0.03}, {0.15}};
  const int kTrials = 200;
  std::vector<uint32_t> ma, mb;
  for (size_t l = 0; l < levels.size(); ++l) {
    Level& L = levels[l];
    for (int t = 0; t < kTrials; ++t) {
      DedupConfig c;
      c.seed = 1000 * (l + 1) + t;
      std::string v = edit_words(en_a(), L.p, c.seed * 31 + 7);
      double j = jaccard(en_a(), v, false, c);
      double p = dedup_candidate_probability(j, c.bands, c.rows);
      L.jsum += j;
      L.expect += p;
      L.var += p * (1 - p);
      if (any_band_equal(sig_of(en_a(), false, c), sig_of(v, false, c))) ++L.found;
      dedup_minhash(en_a(), false, c, ma);
      dedup_minhash(v, false, c, mb);
      ASSERT_EQ(ma.size(), 112u);
      int eq = 0;
      for (size_t i = 0; i < ma.size(); ++i) eq += ma[i] == mb[i];
      double est = eq / 112.0;
      L.est_sum += est;
      L.resid2 += (est - j) * (est - j);
      L.binom += j * (1 - j) / 112;
    }
    double mean_j = L.jsum / kTrials;
    // fraction of equal minima estimates Jaccard without bias (sd of the mean ~0.003)
    EXPECT_NEAR(L.est_sum / kTrials, mean_j, 0.012) << "edit rate " << L.p;
    // and with the spread of 112 independent permutations: J(1-J)/112 (se of the ratio ~0.1)
    EXPECT_NEAR(L.resid2 / L.binom, 1.0, 0.35) << "edit rate " << L.p;
    std::printf("edit rate %.2f: mean Jaccard %.3f, found %d/%d, S-curve predicts %.1f; "
                "estimate mean %.3f, variance / binomial %.2f\n", L.p, mean_j, L.found, kTrials,
                L.expect, L.est_sum / kTrials, L.resid2 / L.binom);
  }
  EXPECT_GT(levels[0].jsum / kTrials, 0.87);
  EXPECT_GE(levels[0].found, kTrials * 95 / 100);
  EXPECT_LT(levels[2].jsum / kTrials, 0.35);
  EXPECT_LE(levels[2].found, kTrials * 5 / 100);
  const Level& mid = levels[1];
  EXPECT_NEAR(mid.found, mid.expect, 4 * std::sqrt(mid.var) + 1);
}

TEST(DedupSignature, ShortAndEmptyDocuments) {
  DedupConfig c;
  std::vector<uint64_t> sh;
  dedup_shingles("Hello, world!", false, c, sh);
  EXPECT_EQ(sh.size(), 1u);  // shorter than a shingle: one shingle of all tokens
  dedup_shingles(en_a(), false, c, sh);
  EXPECT_EQ(sh.size(), split_words(norm(en_a())).size() - 4);
  EXPECT_EQ(judge_second("Hello, world!", "hello   WORLD", false, c), V::kExact);
  c.exact = false;
  EXPECT_EQ(judge_second("Hello, world!", "hello   WORLD", false, c), V::kNear);
  EXPECT_EQ(judge_second("Hello, world!", "hello there", false, c), V::kUnique);
  c.exact = true;

  DedupIndex idx(c);
  size_t mem0 = idx.memory_bytes();
  for (const char* e : {"", "  \n ", "!!! ... ---", "\xEF\xBB\xBF"}) {
    DedupSignature s = sig_of(e, false, c);
    EXPECT_EQ(s.exact, 0u) << e;
    ASSERT_EQ(s.bands.size(), 14u);
    for (uint64_t b : s.bands) EXPECT_EQ(b, 0u);
    EXPECT_EQ(idx.check_and_insert(s), V::kUnique);  // never matched, never stored
  }
  EXPECT_EQ(idx.memory_bytes(), mem0);
  EXPECT_EQ(idx.check_and_insert(sig_of("", false, c)), V::kUnique);
  std::vector<uint32_t> mins;
  dedup_minhash("", false, c, mins);
  ASSERT_EQ(mins.size(), 112u);
  for (uint32_t m : mins) EXPECT_EQ(m, UINT32_MAX);
}

TEST(DedupSignature, ExactOrNearSwitchedOff) {
  DedupConfig c;
  c.near = false;
  EXPECT_TRUE(sig_of(en_a(), false, c).bands.empty());
  EXPECT_EQ(judge_second(en_a(), edit_words(en_a(), 0.01, 1), false, c), V::kUnique);
  EXPECT_EQ(judge_second(en_a(), restyle(en_a()), false, c), V::kExact);
  c.near = true;
  c.exact = false;
  EXPECT_EQ(judge_second(en_a(), restyle(en_a()), false, c), V::kNear);
  c.near = false;
  EXPECT_EQ(judge_second(en_a(), en_a(), false, c), V::kUnique);
}

TEST(DedupSignature, SameInputSameSignatureOnEveryThread) {
  std::vector<std::pair<std::string, bool>> docs = {
      {en_a(), false}, {en_b(), false}, {zh_a(), true}, {zh_b(), true},
      {edit_words(en_a(), 0.05, 9), false}, {"", false}, {"short text", false}};
  std::vector<DedupConfig> cfgs(3);
  cfgs[1].seed = 77;
  cfgs[2].bands = 20;
  cfgs[2].rows = 5;
  std::vector<DedupSignature> ref;
  for (const DedupConfig& c : cfgs)
    for (auto& d : docs) ref.push_back(sig_of(d.first, d.second, c));
  std::vector<std::vector<DedupSignature>> got(4);
  std::vector<std::thread> th;
  for (int t = 0; t < 4; ++t)
    th.emplace_back([&, t] {
      // a different order on each thread: per-thread caches must not leak between configs
      got[t].resize(ref.size());
      for (size_t k = 0; k < ref.size(); ++k) {
        size_t r = (k + 5 * t) % ref.size();
        size_t i = t % 2 ? ref.size() - 1 - r : r;
        const DedupConfig& c = cfgs[i / docs.size()];
        const auto& d = docs[i % docs.size()];
        got[t][i] = sig_of(d.first, d.second, c);
      }
    });
  for (auto& x : th) x.join();
  for (int t = 0; t < 4; ++t)
    for (size_t i = 0; i < ref.size(); ++i) {
      EXPECT_EQ(got[t][i].exact, ref[i].exact) << t << " " << i;
      EXPECT_EQ(got[t][i].bands, ref[i].bands) << t << " " << i;
    }
  EXPECT_NE(ref[0].bands, ref[docs.size()].bands);  // the seed matters
  EXPECT_EQ(ref[2 * docs.size()].bands.size(), 20u);
}

TEST(DedupSignature, RecordsRoundTripAndReplayRebuildsTheIndex) {
  DedupConfig c;
  std::vector<DedupSignature> sigs = {sig_of(en_a(), false, c), sig_of(en_b(), false, c),
                                      sig_of("", false, c), sig_of(zh_a(), true, c)};
  DedupConfig off = c;
  off.near = false;
  sigs.push_back(sig_of(en_b(), false, off));
  std::string buf;
  for (const auto& s : sigs) dedup_signature_write(s, buf);
  EXPECT_EQ(buf.size(), 4 * (12 + 8 * 14) + 12u);
  size_t pos = 0;
  for (const auto& s : sigs) {
    DedupSignature r;
    ASSERT_TRUE(dedup_signature_read(buf, pos, r));
    EXPECT_EQ(r.exact, s.exact);
    EXPECT_EQ(r.bands, s.bands);
  }
  EXPECT_EQ(pos, buf.size());
  DedupSignature r;
  EXPECT_FALSE(dedup_signature_read(buf, pos, r));  // at the end
  std::string cut = buf.substr(0, buf.size() - 1);
  pos = 4 * (12 + 8 * 14);
  EXPECT_FALSE(dedup_signature_read(cut, pos, r));
  EXPECT_EQ(pos, 4u * (12 + 8 * 14));
  std::string bad = "\xff\xff\xff\xff" + std::string(20, '\0');
  pos = 0;
  EXPECT_FALSE(dedup_signature_read(bad, pos, r));

  // a run stopped after three documents, resumed from the kept signatures
  DedupIndex full(c), resumed(c);
  std::string log;
  for (int i = 0; i < 3; ++i) {
    DedupSignature s = sig_of(i == 1 ? restyle(en_a()) : (i == 0 ? en_a() : en_b()), false, c);
    if (full.check_and_insert(s) == V::kUnique) dedup_signature_write(s, log);
  }
  for (pos = 0; pos < log.size();) {
    ASSERT_TRUE(dedup_signature_read(log, pos, r));
    EXPECT_EQ(resumed.check_and_insert(r), V::kUnique);
  }
  EXPECT_EQ(resumed.size(), full.size());
  EXPECT_EQ(resumed.memory_bytes(), full.memory_bytes());
  for (const std::string& next : {edit_words(en_b(), 0.01, 2), en_a(), zh_b()})
    EXPECT_EQ(resumed.check_and_insert(sig_of(next, false, c)),
              full.check_and_insert(sig_of(next, false, c)));
}

TEST(DedupConfig, ReadValidateAndFingerprint) {
  toml::table root = toml::parse(
      "[prep.dedup]\nexact = false\nnear = true\nshingle = 3\ncjk_shingle = 4\nbands = 20\n"
      "rows = 5\nseed = 7\n");
  DedupConfig c;
  std::vector<std::string> errs;
  dedup_config_read(root, c, errs);
  EXPECT_TRUE(errs.empty());
  EXPECT_FALSE(c.exact);
  EXPECT_EQ(c.shingle, 3);
  EXPECT_EQ(c.cjk_shingle, 4);
  EXPECT_EQ(c.bands, 20);
  EXPECT_EQ(c.rows, 5);
  EXPECT_EQ(c.seed, 7u);
  EXPECT_TRUE(dedup_config_validate(c).empty());

  toml::table typo = toml::parse("[prep.dedup]\nband = 20\nrows = \"eight\"\n");
  DedupConfig d;
  dedup_config_read(typo, d, errs);
  EXPECT_EQ(errs.size(), 2u);  // unknown key, wrong type
  EXPECT_EQ(d.bands, 14);

  DedupConfig bad;
  bad.bands = 0;
  bad.shingle = 0;
  auto e = dedup_config_validate(bad);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_NE(e[0].find("shingle"), std::string::npos);
  EXPECT_NE(e[1].find("[prep.dedup] bands = 0: must be > 0 (FineWeb uses 14)"), std::string::npos) << e[1];
  bad = DedupConfig{};
  bad.rows = -1;
  EXPECT_EQ(dedup_config_validate(bad).size(), 1u);
  bad.rows = 100;
  bad.bands = 100;
  EXPECT_EQ(dedup_config_validate(bad).size(), 1u);

  DedupConfig x, y;
  EXPECT_EQ(dedup_config_hash(x), dedup_config_hash(y));
  y.seed = 2;
  EXPECT_NE(dedup_config_hash(x), dedup_config_hash(y));
}

TEST(DedupConfig, LshCurveNumbers) {
  EXPECT_NEAR(dedup_threshold(14, 8), 0.6847, 0.0005);
  EXPECT_NEAR(dedup_candidate_probability(dedup_threshold(14, 8), 14, 8), 0.5, 1e-9);
  EXPECT_NEAR(dedup_candidate_probability(std::pow(1.0 / 14, 1.0 / 8), 14, 8), 0.65, 0.01);
  EXPECT_NEAR(dedup_candidate_probability(0.9, 14, 8), 0.9996, 0.0001);
  EXPECT_NEAR(dedup_candidate_probability(0.8, 14, 8), 0.9235, 0.0001);
  EXPECT_NEAR(dedup_candidate_probability(0.5, 14, 8), 0.0533, 0.0001);
  EXPECT_LT(dedup_candidate_probability(0.3, 14, 8), 0.001);
}
