// bpe_train.cpp and pretoken_count.cpp: the byte order, merges on a hand-checked corpus, the
// incremental loop against the recount-per-merge reference on real text, 64-bit counts, pruning
// under a tiny budget, thread-count independence, Chinese merges, and (when node and the npm
// `tokenizers` reference are installed) merges equal to Hugging Face's BpeTrainer.
// Splitting here is a test splitter of our own, not the product pre-tokenizers.
#include "smelt/tokenizer/bpe_train.hpp"

#include <cstdlib>
#include <filesystem>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../test_files.hpp"
#include "smelt/common/utf8.hpp"
#include "smelt/tokenizer/byte_level.hpp"
#include "smelt/tokenizer/pretokenizer.hpp"
#include "smelt/tokenizer/tokenizer.hpp"
#include "test_references.hpp"

using namespace smelt;
namespace fs = std::filesystem;

namespace {

const std::string kData = std::string(SMELT_TEST_DATA) + "/tokenizer_train/";

std::string sample(const std::string& name) { return test::read_file(kData + name); }

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Pieces = maximal runs of non-whitespace (HF's WhitespaceSplit on ASCII text).
void split_whitespace(std::string_view s, std::vector<std::string_view>& out) {
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && is_space(s[i])) ++i;
    size_t j = i;
    while (j < s.size() && !is_space(s[j])) ++j;
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j;
  }
}

// A rough GPT-2-like splitter: an optional leading space, then a run of one class (letters, which
// include Han characters; digits; spaces; other), CJK punctuation counted as "other".
int char_class(char32_t c) {
  if (c == ' ' || c == '\t' || c == '\n' || c == '\r') return 0;
  if (c >= '0' && c <= '9') return 1;
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return 2;
  if (c >= 0x80 && !(c >= 0x3000 && c <= 0x303F) && !(c >= 0xFF00 && c <= 0xFF20) && !(c >= 0x2000 && c <= 0x206F))
    return 2;
  return 3;
}
void split_words(std::string_view s, std::vector<std::string_view>& out) {
  size_t i = 0;
  while (i < s.size()) {
    size_t start = i, j = i;
    char32_t c = utf8_next(s, j);
    if (c == ' ' && j < s.size()) {  // a space joins the run after it
      size_t k = j;
      char32_t d = utf8_next(s, k);
      if (char_class(d) != 0) c = d, j = k;
    }
    int cls = char_class(c);
    while (j < s.size()) {
      size_t k = j;
      if (char_class(utf8_next(s, k)) != cls) break;
      j = k;
    }
    out.push_back(s.substr(start, j - start));
    i = j;
  }
}

std::vector<std::pair<std::string, std::string>> merge_strings(const BpeModel& m) {
  std::vector<std::pair<std::string, std::string>> out;
  for (auto [a, b] : m.merges) out.emplace_back(m.vocab[a], m.vocab[b]);
  return out;
}

PretokenTable count_docs(const std::vector<std::string>& docs, const BpeSplitFn& split, int threads = 1,
                         uint64_t budget = 1ull << 30, BpeTrainStats* stats_out = nullptr) {
  BpeTrainConfig cfg;
  cfg.threads = threads;
  cfg.memory_bytes = budget;
  PretokenTable t;
  BpeTrainStats st;
  bpe_count_docs(docs, cfg, split, t, st);
  if (stats_out) *stats_out = st;
  return t;
}

std::map<std::string, int64_t> table_map(const PretokenTable& t) {
  std::map<std::string, int64_t> m;
  t.for_each([&](std::string_view w, int64_t c) { m[std::string(w)] = c; });
  return m;
}

}  // namespace

TEST(BpeByteRank, HuggingFaceByteLevelOrder) {
  EXPECT_EQ(bpe_byte_rank('!'), 0u);
  EXPECT_EQ(bpe_byte_rank('~'), 93u);
  EXPECT_EQ(bpe_byte_rank(0xA1), 94u);
  EXPECT_EQ(bpe_byte_rank(0xAC), 105u);
  EXPECT_EQ(bpe_byte_rank(0xAE), 106u);
  EXPECT_EQ(bpe_byte_rank(0xFF), 187u);
  EXPECT_EQ(bpe_byte_rank(0x00), 188u);
  EXPECT_EQ(bpe_byte_rank(' '), 220u);  // 'Ġ' in GPT-2's vocabulary is id 220 too
  EXPECT_EQ(bpe_byte_rank(0x7F), 221u);
  EXPECT_EQ(bpe_byte_rank(0xAD), 255u);
  std::set<uint32_t> all;
  for (int b = 0; b < 256; ++b) all.insert(bpe_byte_rank(static_cast<uint8_t>(b)));
  EXPECT_EQ(all.size(), 256u);
}

// Counts: low 5, lower 2, newest 6, widest 3 (Sennrich et al.'s example). By hand: e-s and s-t
// tie at 9, (e,s) has the smaller ids; then es-t 9; l-o and o-w tie at 7 -> (l,o), then lo-w;
// then e-w, n-ew, new-est tie at 6 in id order; d-est, i-dest, w-idest at 3; e-r, low-er at 2.
TEST(BpeMerge, HandCheckedCorpus) {
  PretokenTable t;
  t.add("low", 5);
  t.add("lower", 2);
  t.add("newest", 6);
  t.add("widest", 3);
  BpeModel m;
  bpe_merge(t, {1000, {"<|endoftext|>"}, 0}, m);
  std::vector<std::pair<std::string, std::string>> want = {
      {"e", "s"}, {"es", "t"}, {"l", "o"},    {"lo", "w"},   {"e", "w"},   {"n", "ew"},
      {"new", "est"}, {"d", "est"}, {"i", "dest"}, {"w", "idest"}, {"e", "r"}, {"low", "er"}};
  EXPECT_EQ(merge_strings(m), want);
  ASSERT_EQ(m.specials.size(), 1u);
  EXPECT_EQ(m.specials[0].id, 0u);
  EXPECT_EQ(m.vocab[0], "<|endoftext|>");
  EXPECT_EQ(m.vocab[1], "!");
  EXPECT_EQ(m.vocab[1 + 220], " ");
  EXPECT_EQ(m.vocab.size(), 1u + 256 + 12);
  EXPECT_EQ(m.vocab[257], "es");
  EXPECT_EQ(m.vocab.back(), "lower");

  // vocab_size stops the loop; min_frequency stops it at the first pair below it
  bpe_merge(t, {1 + 256 + 3, {"<|endoftext|>"}, 0}, m);
  EXPECT_EQ(m.merges.size(), 3u);
  bpe_merge(t, {1000, {}, 7}, m);
  EXPECT_EQ(m.merges.size(), 4u);  // es, est, lo, low (7); e-w is 6
}

// Overlapping pairs (aaaa, abab...) and a token reached by two merge paths.
TEST(BpeMerge, IncrementalEqualsReferenceOnRepeats) {
  PretokenTable t;
  t.add("aaaa", 7);
  t.add("aaaaaaa", 3);
  t.add("abababab", 5);
  t.add("aab", 4);
  t.add("abaab", 2);
  t.add("baaab", 6);
  BpeModel fast, ref;
  bpe_merge(t, {2000, {}, 0}, fast);
  bpe_merge_ref(t, {2000, {}, 0}, ref);
  EXPECT_EQ(merge_strings(fast), merge_strings(ref));
  EXPECT_EQ(fast.vocab, ref.vocab);
}

// The standard oracle: the incremental loop equals recounting every pair before every merge, on
// real English and Chinese text.
TEST(BpeMerge, IncrementalEqualsReferenceOnRealText) {
  PretokenTable t = count_docs({sample("en_submitting_patches.rst"), sample("zh_kernel_howto.rst")}, split_words);
  for (int64_t minf : {0, 3}) {
    BpeModel fast, ref;
    bpe_merge(t, {1 + 256 + 1500, {"<|endoftext|>"}, minf}, fast);
    bpe_merge_ref(t, {1 + 256 + 1500, {"<|endoftext|>"}, minf}, ref);
    ASSERT_GT(fast.merges.size(), 500u);
    EXPECT_EQ(fast.merges, ref.merges) << "min_frequency " << minf;
    EXPECT_EQ(fast.vocab, ref.vocab);
  }
}

// Counts above 2^32 (HF's i32 pair counts would wrap): 5e9 "abc" + 4e9 "bcd" makes b-c 9e9.
TEST(BpeMerge, SixtyFourBitCounts) {
  PretokenTable t;
  t.add("abc", 3'000'000'000);
  t.add("abc", 2'000'000'000);
  t.add("bcd", 4'000'000'000);
  t.add("xy", 6'000'000'000);
  EXPECT_EQ(t.count_of("abc"), 5'000'000'000);
  BpeModel m;
  bpe_merge(t, {1000, {}, 0}, m);
  auto ms = merge_strings(m);
  ASSERT_GE(ms.size(), 2u);
  EXPECT_EQ(ms[0], std::make_pair(std::string("b"), std::string("c")));   // 9e9
  EXPECT_EQ(ms[1], std::make_pair(std::string("x"), std::string("y")));   // 6e9
  EXPECT_EQ(ms[2], std::make_pair(std::string("a"), std::string("bc")));  // 5e9
}

// A budget far below the table: rare entries are pruned (and counted), frequent words survive
// with their counts short by at most what the pruning thresholds allow.
TEST(BpeCount, PruningUnderATinyBudget) {
  std::vector<std::string> docs;
  for (auto f : {"en_coding_style.rst", "en_submitting_patches.rst", "zh_kernel_howto.rst", "zh_coding_style.rst"}) {
    std::string s = sample(f);
    for (size_t p = 0; p < s.size();) {  // paragraphs as documents
      size_t e = s.find("\n\n", p);
      e = e == std::string::npos ? s.size() : e + 2;
      docs.push_back(s.substr(p, e - p));
      p = e;
    }
  }
  BpeTrainStats full_st, small_st;
  PretokenTable full = count_docs(docs, split_words, 1, 1ull << 30, &full_st);
  PretokenTable small = count_docs(docs, split_words, 1, 48 << 10, &small_st);
  EXPECT_EQ(full_st.distinct_pruned, 0u);
  EXPECT_EQ(full_st.distinct_kept, full.size());
  EXPECT_GT(small_st.prunes, 0u);
  EXPECT_GT(small_st.distinct_pruned, 0u);
  EXPECT_GT(small_st.pruned_occurrences, small_st.distinct_pruned - 1);
  EXPECT_LT(small.size(), full.size() / 2);
  EXPECT_EQ(small_st.distinct_kept, small.size());
  EXPECT_EQ(small_st.pieces, full_st.pieces);
  // every occurrence is either kept or reported pruned
  uint64_t kept_occ = 0;
  small.for_each([&](std::string_view, int64_t c) { kept_occ += c; });
  EXPECT_EQ(kept_occ + small_st.pruned_occurrences, full_st.pieces);
  for (const char* w : {" the", " to", " of", " a", " and", " patch", " kernel",  " code", "，"}) {
    int64_t exact = full.count_of(w), got = small.count_of(w);
    ASSERT_GT(exact, 20) << w;
    EXPECT_GT(got, 0) << w << " was pruned";
    EXPECT_LE(got, exact);
    EXPECT_GE(got, exact - static_cast<int64_t>(small_st.prunes) * small_st.prune_threshold) << w;
  }
}

// The table, the stats and the model do not depend on the thread count.
TEST(BpeCount, SameResultForAnyThreadCount) {
  std::vector<std::string> docs;
  for (auto f : {"en_coding_style.rst", "en_submitting_patches.rst", "zh_kernel_howto.rst", "zh_coding_style.rst",
                 "zh_fortunes_head.u8"})
    docs.push_back(sample(f));
  for (uint64_t budget : {1ull << 30, 64ull << 10}) {
    BpeTrainStats s1, s3;
    PretokenTable t1 = count_docs(docs, split_words, 1, budget, &s1);
    PretokenTable t3 = count_docs(docs, split_words, 3, budget, &s3);
    EXPECT_EQ(table_map(t1), table_map(t3));
    BpeTrainConfig cfg;
    EXPECT_EQ(bpe_train_info(cfg, s1).dump(), bpe_train_info(cfg, s3).dump());
    BpeModel m1, m3;
    bpe_merge(t1, {2000, {"<|endoftext|>"}, 0}, m1);
    bpe_merge(t3, {2000, {"<|endoftext|>"}, 0}, m3);
    EXPECT_EQ(m1.merges, m3.merges);
  }
}

TEST(BpeCount, CorpusHashCoversDocumentBoundaries) {
  BpeTrainStats a, b, c;
  count_docs({"ab", "c"}, split_whitespace, 1, 1 << 30, &a);
  count_docs({"a", "bc"}, split_whitespace, 1, 1 << 30, &b);
  count_docs({"ab", "c"}, split_whitespace, 2, 1 << 30, &c);
  EXPECT_NE(a.corpus_hash, b.corpus_hash);
  EXPECT_EQ(a.corpus_hash, c.corpus_hash);
  EXPECT_EQ(a.corpus_hash.substr(0, 5), "xxh3:");
  EXPECT_EQ(a.documents, 2u);
  EXPECT_EQ(a.bytes, 3u);
}

// Chinese: merges assemble whole Han characters (3-byte tokens) and common two-character words.
TEST(BpeMerge, ChineseFormsCharactersAndWords) {
  PretokenTable t = count_docs(
      {sample("zh_kernel_howto.rst"), sample("zh_coding_style.rst"), sample("zh_fortunes_head.u8")}, split_words);
  BpeModel m;
  bpe_merge(t, {1 + 256 + 3000, {"<|endoftext|>"}, 0}, m);
  std::set<std::string> vocab(m.vocab.begin(), m.vocab.end());
  size_t han_chars = 0, han_words = 0;
  for (const auto& tok : m.vocab) {
    if (!utf8_valid(tok)) continue;
    size_t i = 0, n = 0;
    bool all_han = true;
    while (i < tok.size()) {
      char32_t c = utf8_next(tok, i);
      all_han &= c >= 0x4E00 && c <= 0x9FFF;
      ++n;
    }
    if (all_han && n == 1) ++han_chars;
    if (all_han && n == 2) ++han_words;
  }
  EXPECT_GT(han_chars, 300u);
  EXPECT_GT(han_words, 100u);
  for (const char* w : {"内核", "代码", "开发", "我们", "一个", "可以", "函数"}) EXPECT_TRUE(vocab.count(w)) << w;
}

std::string ref_dir() { return std::string(SMELT_SOURCE_DIR) + "/tests/reference"; }
bool have_node_reference() {
  return fs::exists(ref_dir() + "/node_modules/tokenizers") && std::system("node --version >/dev/null 2>&1") == 0;
}
std::string tmp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("bpe_train_test_" + std::to_string(getpid()) + "_" + name)).string();
}
std::vector<std::pair<std::string, std::string>> hf_merges_of(const nlohmann::json& hf) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& m : hf["model"]["merges"]) {
    if (m.is_array()) {
      out.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      std::string s = m.get<std::string>();
      out.emplace_back(s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1));
    }
  }
  return out;
}

// Same merges as Hugging Face's BpeTrainer (npm `tokenizers`) on the same words: ASCII text,
// whitespace splitting on both sides, HF's default trainer (vocab 30000, alphabet = bytes seen).
TEST(BpeMerge, EqualsHuggingFaceTrainer) {
  std::string ref_dir = std::string(SMELT_SOURCE_DIR) + "/tests/reference";
  SMELT_REQUIRE_REFERENCE(
      fs::exists(ref_dir + "/node_modules/tokenizers") && std::system("node --version >/dev/null 2>&1") == 0,
      "node or tests/reference/node_modules/tokenizers missing (scripts/install-deps installs them)");
  std::vector<std::string> files = {kData + "en_coding_style.rst", kData + "en_submitting_patches.rst"};
  std::string out = (fs::temp_directory_path() / ("bpe_hf_" + std::to_string(getpid()) + ".json")).string();
  std::string cmd = "node " + ref_dir + "/hf_train_check.js whitespace " + out;
  for (auto& f : files) cmd += " " + f;
  ASSERT_EQ(std::system((cmd + " >/dev/null 2>&1").c_str()), 0) << cmd;
  auto hf = nlohmann::json::parse(test::read_file(out));
  fs::remove(out);
  std::vector<std::pair<std::string, std::string>> hf_merges;
  for (const auto& m : hf["model"]["merges"]) {
    if (m.is_array()) {
      hf_merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      std::string s = m.get<std::string>();
      hf_merges.emplace_back(s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1));
    }
  }
  std::vector<std::string> docs;
  std::set<char> alphabet;
  for (auto& f : files) {
    docs.push_back(test::read_file(f));
    for (char c : docs.back())
      if (!is_space(c)) alphabet.insert(c);
  }
  PretokenTable t = count_docs(docs, split_whitespace);
  BpeModel m;
  bpe_merge(t, {static_cast<uint32_t>(256 + 30000 - alphabet.size()), {}, 0}, m);
  auto ours = merge_strings(m);
  ASSERT_GT(hf_merges.size(), 1000u);
  EXPECT_EQ(ours.size(), hf_merges.size());
  size_t n = std::min(ours.size(), hf_merges.size()), first_diff = n;
  for (size_t i = 0; i < n && first_diff == n; ++i)
    if (ours[i] != hf_merges[i]) first_diff = i;
  EXPECT_EQ(first_diff, n) << "merge " << first_diff << ": ours '" << ours[first_diff].first << "' '"
                           << ours[first_diff].second << "', HF '" << hf_merges[first_diff].first << "' '"
                           << hf_merges[first_diff].second << "'";
}

// The real GPT-2 pre-tokenizer against HF's ByteLevel pre-tokenizer + BpeTrainer on real English
// and Chinese text. HF's train(files) reads line by line (line ends kept), so our documents are
// the same lines; its alphabet is the bytes seen, so our vocab size is shifted by the bytes unseen.
TEST(BpeTrainEndToEnd, Gpt2MergesEqualHuggingFaceByteLevelTrainer) {
  SMELT_REQUIRE_REFERENCE(have_node_reference(),
                          "node or tests/reference/node_modules/tokenizers missing (scripts/install-deps)");
  std::vector<std::string> files = {kData + "en_coding_style.rst", kData + "zh_kernel_howto.rst"};
  std::string out = tmp_path("hf_bytelevel.json");
  std::string cmd = "node " + ref_dir() + "/hf_train_check.js bytelevel " + out;
  for (auto& f : files) cmd += " " + f;
  ASSERT_EQ(std::system((cmd + " >/dev/null 2>&1").c_str()), 0) << cmd;
  auto hf = hf_merges_of(nlohmann::json::parse(test::read_file(out)));
  fs::remove(out);

  Status err;
  auto pretok = Pretokenizer::create("gpt2", err);
  ASSERT_TRUE(pretok) << err.message();
  std::vector<std::string> lines;
  std::set<unsigned char> seen;
  for (auto& f : files) {
    std::string s = test::read_file(f);
    for (unsigned char c : s) seen.insert(c);
    for (size_t p = 0; p < s.size();) {
      size_t e = s.find('\n', p);
      e = e == std::string::npos ? s.size() : e + 1;
      lines.push_back(s.substr(p, e - p));
      p = e;
    }
  }
  PretokenTable t = count_docs(lines, [&](std::string_view x, std::vector<std::string_view>& o) { pretok->split(x, o); });
  BpeModel m;
  bpe_merge(t, {static_cast<uint32_t>(256 + 30000 - seen.size()), {}, 0}, m);
  std::vector<std::pair<std::string, std::string>> ours;
  for (auto [a, b] : m.merges) ours.emplace_back(byte_level_encode(m.vocab[a]), byte_level_encode(m.vocab[b]));
  ASSERT_GT(hf.size(), 3000u);
  EXPECT_EQ(ours.size(), hf.size());
  size_t n = std::min(ours.size(), hf.size()), first_diff = n;
  for (size_t i = 0; i < n && first_diff == n; ++i)
    if (ours[i] != hf[i]) first_diff = i;
  EXPECT_EQ(first_diff, n) << "merge " << first_diff << ": ours '" << ours[first_diff].first << "' '"
                           << ours[first_diff].second << "', HF '" << hf[first_diff].first << "' '"
                           << hf[first_diff].second << "'";
}

// Files -> bpe_train -> tokenizer.json: HF loads it and encodes held-out text to Smelt's ids;
// decode(encode(x)) == x; the same bytes for 1 and 2 threads.
TEST(BpeTrainEndToEnd, TokenizerJsonLoadsInHuggingFaceWithTheSameIds) {
  Status err;
  auto pretok = Pretokenizer::create("gpt2", err);
  ASSERT_TRUE(pretok) << err.message();
  BpeTrainConfig cfg;
  cfg.inputs = {kData + "en_coding_style.rst", kData + "zh_kernel_howto.rst", kData + "zh_fortunes_head.u8"};
  cfg.vocab_size = 3000;
  cfg.special_tokens = {"<|endoftext|>", "<|pad|>"};
  std::string json1, json2, info1, info2;
  Tokenizer tok;
  for (int threads : {1, 2}) {
    cfg.threads = threads;
    BpeModel m;
    BpeTrainStats st;
    ASSERT_TRUE(bpe_train(cfg, *pretok, m, st));
    EXPECT_EQ(m.vocab.size(), 3000u);
    EXPECT_EQ(st.documents, 3u);
    EXPECT_EQ(m.info["corpus"]["hash"], st.corpus_hash);
    (threads == 1 ? info1 : info2) = m.info.dump();
    ASSERT_TRUE(Tokenizer::from_model(std::move(m), tok));
    (threads == 1 ? json1 : json2) = tok.to_hf_json();
  }
  EXPECT_EQ(json1, json2);
  EXPECT_EQ(info1, info2);
  EXPECT_EQ(*tok.token_to_id("<|endoftext|>"), 0u);
  EXPECT_EQ(*tok.token_to_id("<|pad|>"), 1u);

  for (const char* held_out : {"en_submitting_patches.rst", "zh_coding_style.rst"}) {
    std::string text = sample(held_out);
    std::vector<uint32_t> ids;
    tok.encode(text, ids);
    std::string back;
    tok.decode(ids.data(), ids.size(), back);
    EXPECT_EQ(back, text) << held_out;
    EXPECT_LT(ids.size(), text.size() / 2) << held_out;  // the merges compress
    if (!have_node_reference()) continue;
    std::string path = tmp_path("tok.json");
    ASSERT_TRUE(tok.save_hf(path));
    std::string ids_path = tmp_path("ids.json");
    std::string cmd = "node " + ref_dir() + "/hf_train_check.js encode " + path + " " + kData + held_out + " > " + ids_path;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    auto hf_ids = nlohmann::json::parse(test::read_file(ids_path)).get<std::vector<uint32_t>>();
    EXPECT_TRUE(fs::exists(path + ".info.json"));
    fs::remove(path);
    fs::remove(path + ".info.json");
    fs::remove(ids_path);
    EXPECT_EQ(hf_ids.size(), ids.size()) << held_out;
    EXPECT_TRUE(hf_ids == ids) << held_out;
  }
}

// Long documents are cut into chunks (smaller with a smaller budget) only where the GPT-2 pieces
// cannot change: the same pre-token counts whatever the chunk size.
TEST(BpeTrainEndToEnd, ChunkCutsKeepTheGpt2Pieces) {
  Status err;
  auto pretok = Pretokenizer::create("gpt2", err);
  ASSERT_TRUE(pretok) << err.message();
  BpeSplitFn split = [&](std::string_view x, std::vector<std::string_view>& o) { pretok->split(x, o); };
  std::vector<std::string> docs;
  for (auto f : {"en_coding_style.rst", "en_submitting_patches.rst", "zh_kernel_howto.rst", "zh_coding_style.rst"})
    docs.push_back(sample(f));
  BpeTrainStats whole, cut;
  PretokenTable a = count_docs(docs, split, 1, 1ull << 30, &whole);  // 1 MB chunks: no cuts
  PretokenTable b = count_docs(docs, split, 2, 4ull << 20, &cut);    // 16 KB chunks: many cuts
  EXPECT_EQ(cut.prunes, 0u);
  EXPECT_EQ(whole.pieces, cut.pieces);
  EXPECT_EQ(table_map(a), table_map(b));
}

// One document longer than a round (a big plain text file): rounds end inside it, pruning happens
// between them, and the result is still the same for any thread count.
TEST(BpeCount, RoundsEndInsideALongDocument) {
  std::string big;
  for (auto f : {"en_coding_style.rst", "zh_kernel_howto.rst", "en_submitting_patches.rst", "zh_coding_style.rst"})
    big += sample(f);
  BpeTrainStats whole, r1, r3;
  count_docs({big}, split_words, 1, 1ull << 30, &whole);
  PretokenTable t1 = count_docs({big}, split_words, 1, 64 << 10, &r1);
  PretokenTable t3 = count_docs({big}, split_words, 3, 64 << 10, &r3);
  EXPECT_EQ(whole.rounds, 1u);
  EXPECT_GE(r1.rounds, 3u);
  EXPECT_GT(r1.prunes, 0u);
  EXPECT_EQ(r1.pieces, whole.pieces);
  EXPECT_EQ(table_map(t1), table_map(t3));
  BpeTrainConfig cfg;
  EXPECT_EQ(bpe_train_info(cfg, r1).dump(), bpe_train_info(cfg, r3).dump());
}
