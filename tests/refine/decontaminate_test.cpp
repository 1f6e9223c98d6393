// decontaminate.hpp: real benchmark-like paragraphs planted in real documents (tests/data/dedup)
// with whitespace, case and punctuation changed, and overlaps whose verdict is known by
// construction (12 shared words with n = 13, one word changed in every window). Not a speed test
// (bench/prep/decontaminate_bench.cpp).
#include "smelt/refine/decontaminate.hpp"

#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "smelt/common/config_schema.hpp"
#include "test_files.hpp"

using namespace smelt;
namespace fs = std::filesystem;

namespace {

std::string read_data(const std::string& name) {
  std::string s = smelt::test::read_file(std::string(SMELT_TEST_DATA) + "/dedup/" + name);
  EXPECT_FALSE(s.empty()) << name;
  return s;
}

// en_python_floatingpoint.txt, paragraph 17: the "benchmark" sample.
const char* kBench =
    "Stop at any finite number of bits, and you get an approximation.  On most\n"
    "machines today, floats are approximated using a binary fraction with\n"
    "the numerator using the first 53 bits starting with the most significant bit and\n"
    "with the denominator as a power of two.  In the case of 1/10, the binary fraction\n"
    "is ``3602879701896397 / 2 ** 55`` which is close to but not exactly\n"
    "equal to the true value of 1/10.\n";

// zh_kernel_management_style.txt, paragraph 20.
const char* kBenchZh =
    "事实证明，由于没有人会愚蠢到让内核管理者承担巨大的财政责任，所以通常很容易\n"
    "回溯。既然你不可能浪费掉你无法偿还的巨额资金，你唯一可以回溯的就是技术决策，\n"
    "而回溯很容易：只要告诉大家你是个不称职的傻瓜，说对不起，然后撤销你去年让别\n"
    "人所做的毫无价值的工作。突然间，你一年前做的决定不在是一个重大的决定，因为\n"
    "它很容易被推翻。\n";

std::vector<std::string> words_of(const std::string& s) {
  std::vector<std::string> w;
  std::istringstream in(s);
  for (std::string x; in >> x;) w.push_back(x);
  return w;
}

std::string join(const std::vector<std::string>& w, size_t from, size_t to) {
  std::string out;
  for (size_t i = from; i < to && i < w.size(); ++i) out += (i > from ? " " : "") + w[i];
  return out;
}

// Host document with s planted in its middle.
std::string plant(const std::string& host, const std::string& s) {
  size_t mid = host.find("\n\n", host.size() / 2);
  return host.substr(0, mid) + "\n\n" + s + "\n\n" + host.substr(mid);
}

class DecontamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("smelt-decontam-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& content) {
    std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }

  std::unique_ptr<DecontamIndex> build(const DecontamConfig& c) {
    std::unique_ptr<DecontamIndex> ix;
    Status st = DecontamIndex::build(c, ix);
    EXPECT_TRUE(st.is_ok()) << st.message();
    return ix;
  }

  DecontamConfig config(std::vector<std::string> files) {
    DecontamConfig c;
    c.files = std::move(files);
    return c;
  }

  fs::path dir_;
};

TEST_F(DecontamTest, PlantedParagraphFoundThroughWhitespaceCaseAndPunctuation) {
  const std::string host = read_data("en_kernel_howto.txt");
  auto ix = build(config({write("bench.txt", kBench)}));
  EXPECT_EQ(ix->find(host).file, -1);  // control: the host alone is clean
  EXPECT_EQ(ix->find(plant(host, kBench)).file, 0);
  // Every gap changed (tab, double space, line break), case flipped, punctuation swapped.
  std::vector<std::string> w = words_of(kBench);
  std::string mangled;
  const char* gaps[] = {"\t", "  ", "\n", " \r\n "};
  for (size_t i = 0; i < w.size(); ++i) {
    std::string x = w[i];
    for (char& ch : x) {
      if (i % 2) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      if (ch == ',') ch = ';';
      if (ch == '.') ch = '!';
      if (ch == '`') ch = '"';
    }
    mangled += x + gaps[i % 4];
  }
  DecontamIndex::Hit hit = ix->find(plant(host, mangled));
  EXPECT_EQ(hit.file, 0);
  EXPECT_NE(hit.ngram_hash, 0u);
}

TEST_F(DecontamTest, OneWordChangedInEveryWindowIsNotFound) {
  const std::string host = read_data("en_kernel_howto.txt");
  auto ix = build(config({write("bench.txt", kBench)}));
  std::vector<std::string> w = words_of(kBench);
  ASSERT_GT(w.size(), 40u);
  for (size_t i = 0; i < w.size(); i += 12) w[i] = "xyzzy";  // 13 consecutive words hold one
  EXPECT_EQ(ix->find(plant(host, join(w, 0, w.size()))).file, -1);
  w[w.size() / 2 / 12 * 12] = words_of(kBench)[w.size() / 2 / 12 * 12];  // one window restored
  EXPECT_EQ(ix->find(plant(host, join(w, 0, w.size()))).file, 0);
}

TEST_F(DecontamTest, TwelveSharedWordsAreNotThirteen) {
  const std::string host = read_data("en_kernel_howto.txt");
  auto ix = build(config({write("bench.txt", kBench)}));
  std::vector<std::string> w = words_of(kBench);
  EXPECT_EQ(ix->find(plant(host, "alpha " + join(w, 10, 22) + " omega")).file, -1);
  EXPECT_EQ(ix->find(plant(host, "alpha " + join(w, 10, 23) + " omega")).file, 0);
  DecontamConfig c12 = config({write("bench12.txt", kBench)});
  c12.ngram = 12;
  EXPECT_EQ(build(c12)->find("alpha " + join(w, 10, 22) + " omega").file, 0);
}

TEST_F(DecontamTest, JsonlNestedFieldsAndFieldSelection) {
  std::vector<std::string> w = words_of(kBench);
  std::string q = join(w, 0, 20), ctx = join(w, 20, 40), choice = join(w, 40, 60);
  std::string jsonl = "{\"id\": 7, \"question\": \"" + q + "\", \"meta\": {\"context\": \"" + ctx +
                      "\", \"choices\": [\"short\", \"" + choice + "\"]}, \"label\": 2}\n\n"
                      "{\"question\": \"a second question of a few words\"}\n";
  std::string path = write("bench.jsonl", jsonl);
  auto all = build(config({path}));
  EXPECT_EQ(all->find("x " + q + " y").file, 0);
  EXPECT_EQ(all->find("x " + ctx + " y").file, 0);     // nested object
  EXPECT_EQ(all->find("x " + choice + " y").file, 0);  // string in an array in an object
  EXPECT_EQ(all->file_stats()[0].samples, 2u);
  EXPECT_EQ(all->file_stats()[0].short_samples, 1u);
  DecontamConfig c = config({path});
  c.jsonl_fields = {"question", "choices"};
  auto some = build(c);
  EXPECT_EQ(some->find("x " + q + " y").file, 0);
  EXPECT_EQ(some->find("x " + ctx + " y").file, -1);  // context is not indexed
  EXPECT_EQ(some->find("x " + choice + " y").file, 0);
}

TEST_F(DecontamTest, TextFileIsSplitIntoParagraphs) {
  std::vector<std::string> w = words_of(kBench);
  // Two paragraphs: no n-gram runs across the blank line between them.
  std::string path = write("bench.txt", join(w, 0, 20) + "\n\n\n" + join(w, 20, 40) + "\n");
  auto ix = build(config({path}));
  EXPECT_EQ(ix->file_stats()[0].samples, 2u);
  EXPECT_EQ(ix->ngrams(), 2u * (20 - 13 + 1));
  EXPECT_EQ(ix->find(join(w, 14, 27)).file, -1);  // 13 words across the paragraph break
  EXPECT_EQ(ix->find(join(w, 7, 20)).file, 0);
}

TEST_F(DecontamTest, ReportsTheLowestFileHolding) {
  std::vector<std::string> w = words_of(kBench);
  std::string a = join(w, 0, 20), b = join(w, 30, 50);
  auto ix = build(config({write("a.txt", a), write("b.jsonl", "{\"text\": \"" + b + "\"}\n")}));
  EXPECT_EQ(ix->files().size(), 2u);
  EXPECT_EQ(ix->find("intro " + b).file, 1);
  EXPECT_EQ(ix->find(b + " then " + a).file, 0);  // both: the lowest index, whatever comes first
  std::string filler = read_data("en_kernel_howto.txt");  // a, b apart by thousands of n-grams
  DecontamIndex::Hit hit = ix->find(b + "\n" + filler + "\n" + a + "\n" + filler);
  std::vector<uint64_t> keys_a;
  decontam_ngrams(a, 13, keys_a);
  EXPECT_EQ(hit.file, 0);
  EXPECT_EQ(hit.ngram_hash, keys_a[0]);  // the first n-gram of a in the document
  EXPECT_EQ(ix->find(filler + "\n" + b).file, 1);  // in the last, partial block of lookups
  auto shared = build(config({write("c.txt", b), write("d.txt", a + "\n\n" + b)}));
  EXPECT_EQ(shared->find(b).file, 0);  // held by both files: the first one
  EXPECT_EQ(shared->find(a).file, 1);
  EXPECT_EQ(shared->ngrams(), 16u);  // 8 + 8 distinct, the shared 8 counted once
}

TEST_F(DecontamTest, MissingFileIsAnErrorNamingIt) {
  std::string good = write("good.txt", kBench);
  std::string missing = (dir_ / "mmlu_test.jsonl").string();
  std::unique_ptr<DecontamIndex> ix;
  Status st = DecontamIndex::build(config({good, missing}), ix);
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find(missing), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("No such file"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("expected a benchmark set"), std::string::npos) << st.message();
  EXPECT_EQ(ix, nullptr);
  st = DecontamIndex::build(config({dir_.string()}), ix);  // a folder
  EXPECT_NE(st.message().find("not a regular file"), std::string::npos) << st.message();
}

TEST_F(DecontamTest, MalformedJsonlLineIsAnErrorNamingFileAndLine) {
  std::vector<std::string> w = words_of(kBench);
  std::string ok = "{\"text\": \"" + join(w, 0, 20) + "\"}\n";
  std::string path = write("bench.jsonl", ok + "\n" + "{\"text\": \"unterminated}\n" + ok);
  std::unique_ptr<DecontamIndex> ix;
  Status st = DecontamIndex::build(config({path}), ix);
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find(path + ":3:"), std::string::npos) << st.message();
  path = write("array.jsonl", ok + "[1, 2]\n");
  st = DecontamIndex::build(config({path}), ix);
  EXPECT_NE(st.message().find(path + ":2: not a JSON object"), std::string::npos) << st.message();
}

TEST_F(DecontamTest, ChineseCharactersAreWords) {
  std::vector<uint64_t> keys;
  decontam_ngrams("既然你不可能浪费掉你无法偿还的巨额资金", 13, keys);  // 19 characters
  EXPECT_EQ(keys.size(), 19u - 13 + 1);
  const std::string host = read_data("zh_kernel_howto.txt");
  auto ix = build(config({write("bench_zh.txt", kBenchZh)}));
  EXPECT_EQ(ix->find(host).file, -1);
  std::string changed = kBenchZh;
  for (std::string from : {"\n", "，", "。"})
    for (size_t at; (at = changed.find(from)) != std::string::npos;)
      changed.replace(at, from.size(), from == "\n" ? " " : from == "，" ? ", " : "  ");
  EXPECT_EQ(ix->find(plant(host, changed)).file, 0);
  // 12 characters of it are not enough; 13 are.
  EXPECT_EQ(ix->find(host + "既然你不可能浪费掉你无法").file, -1);
  EXPECT_EQ(ix->find(host + "既然你不可能浪费掉你无法偿").file, 0);
}

TEST_F(DecontamTest, IndexOverMaxIndexMbIsAnError) {
  std::string text;
  for (int i = 0; i < 120000; ++i) text += "w" + std::to_string(i) + (i % 50 == 49 ? "\n" : " ");
  DecontamConfig c = config({write("big.txt", text)});
  c.max_index_mb = 1;  // ~14 bytes per n-gram: 120k n-grams need ~1.6 MiB
  std::unique_ptr<DecontamIndex> ix;
  Status st = DecontamIndex::build(c, ix);
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("max_index_mb = 1"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("big.txt"), std::string::npos) << st.message();
  c.max_index_mb = 2;
  auto fits = build(c);
  EXPECT_EQ(fits->ngrams(), 120000u - 12);
  EXPECT_LE(fits->bytes(), uint64_t{2} << 20);
}

TEST_F(DecontamTest, ContentHashFollowsTheNgrams) {
  auto h = [&](const std::string& content, int n = 13) {
    DecontamConfig c = config({write("bench.txt", content)});
    c.ngram = n;
    return build(c)->content_hash();
  };
  std::string edited = kBench;
  edited.replace(edited.find("finite"), 6, "infinite");
  std::string spaced = kBench;
  spaced.replace(spaced.find(" bits"), 1, "\t\t");
  EXPECT_NE(h(kBench), h(edited));
  EXPECT_EQ(h(kBench), h(spaced));  // whitespace changes no n-gram
  EXPECT_NE(h(kBench), h(kBench, 12));
}

TEST_F(DecontamTest, ShortSamplesAreCountedAndAFileOfThemIsAnError) {
  std::string path = write("short.txt", "What is two plus two?\n\nFour.\n");
  std::unique_ptr<DecontamIndex> ix;
  Status st = DecontamIndex::build(config({path}), ix);
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("yields no 13-gram (2 samples, 2 shorter than 13 words)"), std::string::npos)
      << st.message();
}

TEST_F(DecontamTest, GzipJsonlIsRead) {
  std::string path = (dir_ / "bench.jsonl.gz").string();
  std::string line = "{\"text\": \"" + join(words_of(kBench), 0, 20) + "\"}\n";
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, line.data(), static_cast<unsigned>(line.size()));
  gzclose(f);
  EXPECT_EQ(build(config({path}))->find(join(words_of(kBench), 2, 15)).file, 0);
}

TEST_F(DecontamTest, DisabledOrNoFilesFindsNothing) {
  DecontamConfig c = config({write("bench.txt", kBench)});
  c.enabled = false;
  auto off = build(c);
  EXPECT_EQ(off->find(kBench).file, -1);
  EXPECT_EQ(off->ngrams(), 0u);
  EXPECT_EQ(build(config({}))->find(kBench).file, -1);
}

TEST_F(DecontamTest, FindIsThreadSafe) {
  const std::string host = read_data("en_kernel_howto.txt");
  auto ix = build(config({write("bench.txt", kBench)}));
  const std::string dirty = plant(host, kBench);
  std::vector<int> bad(4, 0);
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) bad[t] += ix->find(dirty).file != 0 || ix->find(host).file != -1;
    });
  for (auto& th : ts) th.join();
  EXPECT_EQ(bad, std::vector<int>(4, 0));
}

TEST(DecontamConfigTest, ReadWriteAndValidate) {
  toml::table root = toml::parse(R"(
    [prep.decontaminate]
    files = ["a.jsonl", "b.txt"]
    ngram = 8
    action = "flag"
    jsonl_fields = ["question"]
  )");
  DecontamConfig c;
  std::vector<std::string> errors;
  decontam_config_read(root, c, errors);
  EXPECT_TRUE(errors.empty());
  EXPECT_EQ(c.files, (std::vector<std::string>{"a.jsonl", "b.txt"}));
  EXPECT_EQ(c.ngram, 8);
  EXPECT_EQ(c.action, DecontamAction::kFlag);
  EXPECT_TRUE(decontam_config_validate(c).empty());
  toml::table t = decontam_config_to_toml(c);
  EXPECT_EQ(t["action"].value_or(std::string()), "flag");
  EXPECT_EQ(t["max_index_mb"].value_or(int64_t{0}), 1024);
  EXPECT_EQ(decontam_config_doc().fields.size(), 6u);

  root = toml::parse("[prep.decontaminate]\naction = \"remove\"\nfile = [\"x\"]\n");
  errors.clear();
  decontam_config_read(root, c, errors);
  EXPECT_EQ(errors.size(), 2u);  // bad enum value, unknown key
  c = DecontamConfig{};
  c.ngram = 0;
  c.files = {"a", "", "a"};
  std::vector<std::string> e = decontam_config_validate(c);
  ASSERT_EQ(e.size(), 3u);
  EXPECT_NE(e[0].find("ngram = 0"), std::string::npos) << e[0];
  EXPECT_NE(e[1].find("files[1] is empty"), std::string::npos) << e[1];
  EXPECT_NE(e[2].find("\"a\" is listed twice"), std::string::npos) << e[2];
}

}  // namespace
