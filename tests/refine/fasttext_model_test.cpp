// FastTextModel against Debian's `fasttext` tool: a classifier the tool trains on real text (lines of
// the licence texts every Debian system ships, labelled by licence) loads, and for every held-out
// line gives the labels and probabilities `fasttext predict-prob` prints; files that are not a
// supervised model give errors naming the file.
#include "smelt/refine/fasttext_model.hpp"

#include <unistd.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "test_files.hpp"
#include "test_references.hpp"

using namespace smelt;
namespace fs = std::filesystem;

namespace {

bool have_fasttext_tool() { return std::system("command -v fasttext > /dev/null 2>&1") == 0; }

// The words of lines of a licence with at least 4 words, whitespace-normalised.
std::vector<std::string> licence_lines(const std::string& name) {
  std::ifstream in("/usr/share/common-licenses/" + name);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) {
    std::istringstream ws(line);
    std::string w, joined;
    int n = 0;
    while (ws >> w) joined += (n++ ? " " : "") + w;
    if (n >= 4) out.push_back(joined);
  }
  return out;
}

class FastTextModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("smelt_fasttext_model_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    if (!have_fasttext_tool()) return;
    // Three classes of real English: which licence a line comes from. Every 4th line is held out.
    const std::pair<const char*, std::vector<const char*>> classes[] = {
        {"gpl", {"GPL-3", "LGPL-2.1"}}, {"apache", {"Apache-2.0", "MPL-2.0"}}, {"fdl", {"GFDL-1.3"}}};
    std::ofstream train(dir_ / "train.txt"), test(dir_ / "test.txt");
    int i = 0;
    for (const auto& [label, files] : classes)
      for (const char* f : files)
        for (const std::string& line : licence_lines(f)) {
          if (i++ % 4 == 0) test << line << '\n';
          else train << "__label__" << label << ' ' << line << '\n';
        }
    train.close();
    test.close();
    const std::string d = dir_.string();
    int rc = std::system(("cd " + d + " && fasttext supervised -input train.txt -output m -dim 10 -epoch 5 "
                          "-wordNgrams 2 -thread 1 -verbose 0 > tool.log 2>&1 && "
                          "fasttext skipgram -input test.txt -output sg -dim 5 -epoch 1 -minCount 1 -minn 0 "
                          "-maxn 0 -bucket 1000 -thread 1 -verbose 0 >> tool.log 2>&1")
                             .c_str());
    trained_ = rc == 0;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  void SetUp() override {
    SMELT_REQUIRE_REFERENCE(have_fasttext_tool(), "Debian's fastText tool (apt-get install fasttext)");
    ASSERT_TRUE(trained_) << test::read_file((dir_ / "tool.log").string());
  }
  static std::string path(const char* name) { return (dir_ / name).string(); }
  static inline fs::path dir_;
  static inline bool trained_ = false;
};

// Loads path and returns the error message ("" when it loaded).
std::string load_error(const std::string& path) {
  std::unique_ptr<FastTextModel> m;
  Status s = FastTextModel::load(path, m);
  if (s) {
    EXPECT_NE(m, nullptr);
  }
  return s ? "" : s.message();
}

}  // namespace

TEST_F(FastTextModelTest, PredictionsEqualTheTool) {
  std::unique_ptr<FastTextModel> m;
  Status s = FastTextModel::load(path("m.bin"), m);
  ASSERT_TRUE(s) << s.message();
  ASSERT_EQ(m->labels().size(), 3u);
  int rc = 0;
  const std::string out =
      test::run_command("fasttext predict-prob " + path("m.bin") + " " + path("test.txt") + " 3", rc);
  ASSERT_EQ(WEXITSTATUS(rc), 0);
  std::ifstream test(path("test.txt"));
  std::istringstream tool(out);
  std::string line, tool_line;
  int n = 0, agree_top = 0;
  std::vector<std::pair<int, float>> preds;
  while (std::getline(test, line)) {
    ASSERT_TRUE(std::getline(tool, tool_line)) << "the tool printed fewer lines than the input at " << n;
    std::istringstream ts(tool_line);
    m->predict(line, 3, preds);
    ASSERT_EQ(preds.size(), 3u) << line;
    std::string label;
    double p;
    for (size_t k = 0; ts >> label >> p; ++k) {
      ASSERT_LT(k, preds.size()) << tool_line;
      EXPECT_EQ("__label__" + m->labels()[preds[k].first], label) << "line " << n << ": " << line;
      // the tool prints 6 significant digits: 1e-6 below 1 (1.00001 is its 1 plus the 1e-5 it adds)
      const double tol = p < 1 ? 1e-6 : 1e-5;
      EXPECT_NEAR(preds[k].second, p, tol) << "line " << n << ": " << line;
      EXPECT_NEAR(m->probability(line, m->label_index(label)), p, tol);
      if (k == 0) agree_top += label == "__label__" + m->labels()[preds[0].first];
    }
    ++n;
  }
  EXPECT_GT(n, 300);
  EXPECT_EQ(agree_top, n);
  // k = 1 is the first of the k = all list; the probabilities of all labels sum to about 1 (each
  // carries the 1e-5 fastText adds before its log).
  m->predict("the licensor grants you a patent licence", 0, preds);
  ASSERT_EQ(preds.size(), 3u);
  EXPECT_NEAR(preds[0].second + preds[1].second + preds[2].second, 1.0, 1e-4);
  std::vector<std::pair<int, float>> top;
  m->predict("the licensor grants you a patent licence", 1, top);
  ASSERT_EQ(top.size(), 1u);
  EXPECT_EQ(top[0], preds[0]);
  // A text of several lines is scored as the tool scores it written on one line.
  EXPECT_EQ(m->probability("the licensor grants\nyou a patent\r\nlicence", 0),
            m->probability("the licensor grants you a patent  licence", 0));
}

TEST_F(FastTextModelTest, LabelIndexWithAndWithoutPrefix) {
  std::unique_ptr<FastTextModel> m;
  ASSERT_TRUE(FastTextModel::load(path("m.bin"), m));
  for (const char* l : {"gpl", "apache", "fdl"}) {
    const int i = m->label_index(l);
    ASSERT_GE(i, 0) << l;
    EXPECT_EQ(m->labels()[i], l);
    EXPECT_EQ(m->label_index(std::string("__label__") + l), i);
  }
  EXPECT_EQ(m->label_index("mit"), -1);
  EXPECT_EQ(m->label_index("__label__mit"), -1);
  EXPECT_EQ(m->label_index(""), -1);
  EXPECT_EQ(m->label_index("__label__"), -1);
}

TEST_F(FastTextModelTest, BadFilesGiveErrorsNamingThem) {
  const std::string missing = path("missing.bin");
  std::string e = load_error(missing);
  EXPECT_NE(e.find(missing), std::string::npos) << e;
  EXPECT_NE(e.find("cannot open"), std::string::npos) << e;

  e = load_error(path("test.txt"));  // text, not a model
  EXPECT_NE(e.find(path("test.txt")), std::string::npos) << e;
  EXPECT_NE(e.find("not a fastText model"), std::string::npos) << e;

  // Cut in the header, among the dictionary's words (where the library alone would read on past
  // the end until memory ran out), in the matrices, and one byte short: each an error, at once.
  const std::string model = test::read_file(path("m.bin"));
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t keep : {size_t{6}, size_t{100}, size_t{1000}, model.size() / 2, model.size() - 1}) {
    const std::string cut = path("cut.bin");
    test::write_file(cut, model.substr(0, keep));
    e = load_error(cut);
    EXPECT_NE(e.find(cut), std::string::npos) << keep << " bytes: " << e;
    EXPECT_TRUE(e.find("truncated") != std::string::npos || e.find("not a fastText model") != std::string::npos ||
                e.find("could not load") != std::string::npos)
        << keep << " bytes: " << e;
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);

  e = load_error(path("sg.bin"));  // word vectors, no labels
  EXPECT_NE(e.find(path("sg.bin")), std::string::npos) << e;
  EXPECT_NE(e.find("unsupervised"), std::string::npos) << e;
}
