// Tokenizer: id-for-id against npm tiktoken (cl100k, o200k, gpt2) and Hugging Face tokenizers
// (GPT-2, and Llama-3 / Qwen2 / o200k-style tokenizer.json built from tiktoken ranks) on real
// English and Chinese text, emoji and mixed scripts, adversarial strings; line and whole-file
// documents; decode(encode(x)) == x; save_hf round trips; special tokens.
#include "smelt/tokenizer/tokenizer.hpp"

#include <gtest/gtest.h>

#include "tok_test_util.hpp"
#include "test_references.hpp"

namespace smelt {
namespace {

using namespace smelt::test;

struct Case {
  std::string name;
  std::string smelt_file;  // under fixtures()
  std::string ref_kind;    // "tiktoken" or "hf"
  std::string ref_spec;    // encoding name, or a fixture file
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> cases() {
  return {
      {"gpt2_hf_vs_hf", "gpt2.json", "hf", "gpt2.json"},
      {"gpt2_hf_vs_tiktoken", "gpt2.json", "tiktoken", "gpt2"},
      {"gpt2_tiktoken_vs_tiktoken", "gpt2.tiktoken", "tiktoken", "gpt2"},
      {"cl100k_vs_tiktoken", "cl100k_base.tiktoken", "tiktoken", "cl100k_base"},
      {"o200k_vs_tiktoken", "o200k_base.tiktoken", "tiktoken", "o200k_base"},
      {"llama3_vs_hf", "llama3.json", "hf", "llama3.json"},
      {"qwen2_vs_hf", "qwen2.json", "hf", "qwen2.json"},
      {"o200k_hf_vs_hf", "o200k.json", "hf", "o200k.json"},
  };
}

class RefTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    SMELT_REQUIRE_REFERENCE(refs_installed(), "npm references: run scripts/install-deps (npm ci in tests/reference)");
  }
};

const Tokenizer& loaded(const std::string& file) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& t = cache[file];
  if (!t) {
    t = std::make_unique<Tokenizer>();
    Status s = Tokenizer::load(fixtures() + "/" + file, *t);
    EXPECT_TRUE(s) << s.message();
  }
  return *t;
}

void compare(const Case& c, const std::string& path, bool whole) {
  const Tokenizer& tok = loaded(c.smelt_file);
  std::string spec = c.ref_kind == "hf" ? fixtures() + "/" + c.ref_spec : c.ref_spec;
  auto want = ref_encode(c.ref_kind, spec, path, whole);
  auto docs = docs_of(read_file(path), whole);
  ASSERT_EQ(want.size(), docs.size()) << path;
  size_t bad = 0, ids = 0;
  for (size_t d = 0; d < docs.size(); d++) {
    std::vector<uint32_t> got;
    tok.encode(docs[d], got);
    ids += got.size();
    if (got != want[d] && bad++ < 3) {
      ADD_FAILURE() << c.name << " " << path << (whole ? " whole" : " line ") << (whole ? 0 : d + 1) << ": ids differ\n  text: "
                    << docs[d].substr(0, 200) << "\n  smelt: " << nlohmann::json(got).dump().substr(0, 400)
                    << "\n  ref:   " << nlohmann::json(want[d]).dump().substr(0, 400);
    }
    std::string back;
    tok.decode(got.data(), got.size(), back);
    EXPECT_EQ(back, docs[d]) << "decode(encode(x)) != x in " << path;
  }
  EXPECT_EQ(bad, 0u) << c.name << " " << path << ": " << bad << " of " << docs.size() << " documents differ";
  EXPECT_GT(ids, 0u);
}

TEST_P(RefTest, RealTextLines) {
  for (const auto& f : sample_files()) compare(GetParam(), std::string(SMELT_TEST_DATA) + "/tokenizer/" + f, false);
}

TEST_P(RefTest, RealTextWhole) {
  for (const auto& f : sample_files()) compare(GetParam(), std::string(SMELT_TEST_DATA) + "/tokenizer/" + f, true);
}

TEST_P(RefTest, AdversarialAndRandom) {
  std::string dir = fixtures();
  std::string p = dir + "/adv-" + std::to_string(getpid()) + "-" + GetParam().name + ".txt";
  std::string text;
  for (uint32_t seed = 1; seed <= 40; seed++) text += adversarial_text(seed, 60) + "\n";
  write_file(p, text);
  compare(GetParam(), p, false);
  compare(GetParam(), p, true);
  write_file(p, random_utf8(5, 3000));
  compare(GetParam(), p, true);
  std::filesystem::remove(p);
}

// The encoder's fast paths at their edges: Han runs from 1 to 1500 characters (one pre-token each,
// short and long merge paths, the pair cache reused across documents), ASCII words that run into
// non-ASCII letters and marks, contractions, whitespace runs and emoji between them.
TEST_P(RefTest, LongRunsAndScriptBoundaries) {
  std::string poems = read_file(std::string(SMELT_TEST_DATA) + "/tokenizer/tang300.txt");
  std::string han;
  for (size_t i = 0; i < poems.size();) {
    unsigned char c = poems[i];
    size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (len == 3 && c >= 0xE4 && c <= 0xE9) han.append(poems, i, 3);
    i += len;
  }
  const char* glue[] = {" ", "\uff0c", "\u3002", "\n", "  ", "x", "\U0001F600", "\u00e9", "A", "'s", "", "1234"};
  const char* words[] = {"caf\u00e9", "na\u00efve", "ABC\u00e9", "HTTPServer\u03a9", "e\u0301", "don't", "DON'T",
                         "x'\u017f", "Hello", "hello", "HELLO", "iPhone", "\u00c9cole", "stra\u00dfe", "\u01c5a", "word\u02b0"};
  std::string text;
  std::mt19937 rng(7);
  for (size_t line = 0, at = 0; line < 120; line++) {
    for (int k = 0; k < 6; k++) {
      size_t n = (rng() % 4 == 0 ? 1 + rng() % 1500 : 1 + rng() % 40) * 3;
      if (at + n > han.size()) at = 0;
      text += glue[rng() % 12];
      text += han.substr(at, n);
      at += n;
      text += glue[rng() % 12];
      text += words[rng() % 16];
      text += words[rng() % 16];
    }
    text += "\n";
  }
  std::string p = fixtures() + "/runs-" + std::to_string(getpid()) + "-" + GetParam().name + ".txt";
  write_file(p, text);
  compare(GetParam(), p, false);
  compare(GetParam(), p, true);
  std::filesystem::remove(p);
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, RefTest, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

TEST(Tokenizer, SaveHfRoundTripAndHfLoadsIt) {
  SMELT_REQUIRE_REFERENCE(refs_installed(), "npm references: run scripts/install-deps");
  for (std::string f : {"cl100k_base.tiktoken", "gpt2.json", "qwen2.json"}) {
    const Tokenizer& a = loaded(f);
    std::string out = fixtures() + "/saved-" + std::to_string(getpid()) + "-" + f + ".json";
    ASSERT_TRUE(a.save_hf(out));
    Tokenizer b;
    Status s = Tokenizer::load(out, b);
    ASSERT_TRUE(s) << s.message();
    EXPECT_EQ(b.vocab_size(), a.vocab_size());
    EXPECT_EQ(b.model().merges.size(), a.model().merges.size());
    std::string path = std::string(SMELT_TEST_DATA) + "/tokenizer/mixed.txt";
    auto want = ref_encode("hf", out, path, true);  // HF loads what save_hf wrote
    std::string text = read_file(path);
    std::vector<uint32_t> ia, ib;
    a.encode(text, ia);
    b.encode(text, ib);
    EXPECT_EQ(ia, ib) << f;
    EXPECT_EQ(want[0], ib) << f;
    EXPECT_TRUE(std::filesystem::exists(out + ".info.json"));
    std::filesystem::remove(out);
    std::filesystem::remove(out + ".info.json");
  }
}

TEST(Tokenizer, SpecialTokens) {
  SMELT_REQUIRE_REFERENCE(refs_installed(), "npm references: run scripts/install-deps");
  const Tokenizer& t = loaded("cl100k_base.tiktoken");
  ASSERT_TRUE(t.eod_id());
  EXPECT_EQ(*t.eod_id(), 100257u);
  EXPECT_EQ(t.vocab_size(), 100277u);
  std::vector<uint32_t> ids;
  t.encode("a<|endoftext|>b<|fim_prefix|>", ids, true);
  EXPECT_EQ(ids, (std::vector<uint32_t>{64, 100257, 65, 100258}));
  ids.clear();
  t.encode("<|endoftext|>", ids, false);
  EXPECT_GT(ids.size(), 1u);
  std::string back;
  uint32_t eod = 100257;
  t.decode(&eod, 1, back);
  EXPECT_EQ(back, "<|endoftext|>");
  EXPECT_EQ(*loaded("o200k_base.tiktoken").eod_id(), 199999u);
  EXPECT_EQ(*loaded("gpt2.json").eod_id(), 50256u);
  EXPECT_NE(loaded("llama3.json").content_hash(), loaded("qwen2.json").content_hash());
}

TEST(Tokenizer, InvalidUtf8NeverCrashesAndRoundTrips) {
  SMELT_REQUIRE_REFERENCE(refs_installed(), "npm references: run scripts/install-deps");
  std::mt19937 rng(3);
  for (std::string f : {"gpt2.json", "cl100k_base.tiktoken", "o200k_base.tiktoken", "qwen2.json"}) {
    const Tokenizer& t = loaded(f);
    for (int k = 0; k < 200; k++) {
      std::string s = adversarial_text(k, 10);
      for (int j = 0; j < 5; j++) s.insert(s.begin() + rng() % (s.size() + 1), static_cast<char>(rng() % 256));
      std::vector<uint32_t> ids;
      t.encode(s, ids);
      std::string back;
      t.decode(ids.data(), ids.size(), back);
      ASSERT_EQ(back, s) << f;
    }
    // invalid bytes alone are their byte tokens
    std::vector<uint32_t> ids;
    t.encode(std::string("\xff"), ids);
    ASSERT_EQ(ids.size(), 1u);
    EXPECT_EQ(t.model().vocab[ids[0]], "\xff");
  }
}

TEST(Tokenizer, LoadErrorsNameTheFile) {
  std::string p = std::filesystem::temp_directory_path().string() + "/smelt-bad-" + std::to_string(getpid()) + ".json";
  write_file(p, "{\"model\": {\"type\": \"Unigram\"}}");
  Tokenizer t;
  Status s = Tokenizer::load(p, t);
  EXPECT_FALSE(s);
  EXPECT_NE(s.message().find(p), std::string::npos);
  write_file(p, "not base64 at all\n");
  s = Tokenizer::load(p, t, "cl100k");
  EXPECT_FALSE(s);
  EXPECT_NE(s.message().find("line 1"), std::string::npos) << s.message();
  std::filesystem::remove(p);
}

}  // namespace
}  // namespace smelt
