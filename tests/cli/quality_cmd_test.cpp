// `smelt quality train | eval` as a user runs them, on real text: paragraphs of the kernel and Python
// documentation in tests/data are the positives, the same paragraphs' words as keyword soup
// (lowercased, unpunctuated, shuffled) and navigation-bar lines the negatives. Debian's
// `fasttext` tool reads the model and predicts what FastTextModel predicts; the eval numbers equal
// ones computed here by pairwise counting; one thread gives the same bytes, whatever the input
// order; bad inputs and flags give their exit codes.
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "smelt/refine/fasttext_model.hpp"
#include "test_files.hpp"
#include "test_references.hpp"

namespace fs = std::filesystem;
using smelt::FastTextModel;

namespace {

struct CmdResult {
  int rc;
  std::string out, err;
};

CmdResult run_quality(const std::string& args, const fs::path& dir) {
  const std::string err = (dir / "stderr.txt").string();
  int st = 0;
  std::string out = smelt::test::run_command(std::string(SMELT_BINARY) + " quality " + args + " 2> " + err, st);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out, smelt::test::read_file(err)};
}

bool have_fasttext_tool() { return std::system("command -v fasttext > /dev/null 2>&1") == 0; }

// Blank-line separated paragraphs of at least 8 words.
std::vector<std::string> paragraphs(const std::string& path) {
  std::istringstream in(smelt::test::read_file(path));
  std::vector<std::string> out;
  std::string para;
  auto flush = [&] {
    std::istringstream ws(para);
    int n = 0;
    for (std::string w; ws >> w;) ++n;
    if (n >= 8) out.push_back(para.substr(0, para.size() - 1));
    para.clear();
  };
  for (std::string line; std::getline(in, line);) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) flush();
    else para += line + "\n";
  }
  flush();
  return out;
}

// Web-spam-like text of the same vocabulary: a paragraph's words lowercased, without punctuation, in
// a random order (xorshift, seeded) on even i; a navigation bar on odd i.
std::string negative(const std::string& para, uint64_t seed, size_t i) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + i + 1;
  auto next = [&] { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return x; };
  std::vector<std::string> w;
  std::istringstream ws(para);
  for (std::string s; ws >> s;) {
    std::string kw;  // lowercase, letters and digits only: keyword soup
    for (unsigned char ch : s)
      if (std::isalnum(ch)) kw += static_cast<char>(std::tolower(ch));
    if (!kw.empty()) w.push_back(kw);
  }
  if (i % 2 == 1) {
    static const char* kNav[] = {"Home", "About us", "Contact", "Login", "Sign up", "Cart (0)", "Privacy policy",
                                 "Terms", "Blog", "Careers", "Help", "FAQ", "Search", "Products", "News", "Sitemap"};
    w.clear();
    for (int k = 0, n = 5 + static_cast<int>(next() % 8); k < n; ++k) w.push_back(kNav[next() % 16]);
    w.push_back(w.size() % 2 ? "»" : "|");
  }
  for (size_t k = w.size(); k > 1; --k) std::swap(w[k - 1], w[next() % k]);
  std::string s;
  for (const auto& t : w) s += (s.empty() ? "" : " ") + t;
  return s;
}

void write_jsonl(const fs::path& path, const std::vector<std::string>& docs) {
  std::ofstream f(path);
  for (size_t i = 0; i < docs.size(); ++i) f << nlohmann::json{{"id", i}, {"text", docs[i]}}.dump() << '\n';
}

void write_lines(const fs::path& path, const std::vector<std::string>& docs) {
  std::ofstream f(path);
  for (const auto& d : docs) f << FastTextModel::one_line(d) << '\n';
}

// Precision, recall and ROC AUC by definition: every (positive, negative) pair, ties count half.
void pairwise_metrics(const std::vector<float>& pos, const std::vector<float>& neg, double& precision,
                      double& recall, double& auc) {
  double tp = 0, fp = 0, wins = 0;
  for (float p : pos) tp += p >= 0.5f;
  for (float n : neg) fp += n >= 0.5f;
  for (float p : pos)
    for (float n : neg) wins += p > n ? 1.0 : p == n ? 0.5 : 0.0;
  precision = tp / (tp + fp);
  recall = tp / pos.size();
  auc = wins / (double(pos.size()) * neg.size());
}

class QualityCmd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("smelt_quality_cmd_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    const std::string d = SMELT_TEST_DATA;
    std::vector<std::string> train_pos, eval_pos, train_neg, eval_neg;
    for (const char* f : {"/tokenizer_train/en_coding_style.rst", "/tokenizer_train/en_submitting_patches.rst",
                          "/dedup/en_kernel_howto.txt"})
      for (auto& p : paragraphs(d + f)) train_pos.push_back(p);
    for (const char* f : {"/tokenizer/english.txt", "/dedup/en_python_floatingpoint.txt"})
      for (auto& p : paragraphs(d + f)) eval_pos.push_back(p);
    for (size_t i = 0; i < train_pos.size(); ++i) train_neg.push_back(negative(train_pos[i], 1, i));
    for (size_t i = 0; i < eval_pos.size(); ++i) eval_neg.push_back(negative(eval_pos[i], 2, i));
    write_jsonl(dir_ / "pos.jsonl", train_pos);
    std::vector<std::string> reversed(train_pos.rbegin(), train_pos.rend());
    fs::create_directories(dir_ / "rev");
    write_jsonl(dir_ / "rev" / "pos.jsonl", reversed);
    write_lines(dir_ / "neg.txt", train_neg);
    write_jsonl(dir_ / "eval_pos.jsonl", eval_pos);
    write_lines(dir_ / "eval_neg.txt", eval_neg);
    n_train_ = train_pos.size() + train_neg.size();
    eval_pos_ = eval_pos;
    eval_neg_ = eval_neg;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string p(const std::string& name) { return (dir_ / name).string(); }
  static std::string train_args(const std::string& pos, const std::string& out) {
    return "train --positive " + pos + " --negative " + p("neg.txt") + " --output " + out;
  }
  static inline fs::path dir_;
  static inline size_t n_train_ = 0;
  static inline std::vector<std::string> eval_pos_, eval_neg_;
};

}  // namespace

TEST_F(QualityCmd, TrainsAModelTheToolReadsAndEvalMatchesPairwiseCounts) {
  SMELT_REQUIRE_REFERENCE(have_fasttext_tool(), "Debian's fastText tool (apt-get install fasttext)");
  ASSERT_GT(n_train_, 600u);
  // Few documents: more epochs and a larger rate than DCLM's; a small hash table keeps the file small.
  CmdResult r = run_quality(train_args(p("pos.jsonl"), p("m.bin")) + " --epoch 20 --lr 0.5 --bucket 20000 --json " +
                                p("train.json"),
                            dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("held out: "), std::string::npos) << r.err;
  auto j = nlohmann::json::parse(smelt::test::read_file(p("train.json")));
  const auto& c = j["counts"];
  EXPECT_EQ(c["train_positive"].get<size_t>() + c["train_negative"].get<size_t>() + c["valid_positive"].get<size_t>() +
                c["valid_negative"].get<size_t>(),
            n_train_);
  EXPECT_GT(c["valid_positive"].get<int>(), 10);
  EXPECT_EQ(c["labels"], 2);
  EXPECT_GT(j["valid"]["roc_auc"].get<double>(), 0.85) << j.dump(2);

  // The tool reads the model and prints what FastTextModel predicts for the eval documents.
  std::unique_ptr<FastTextModel> m;
  ASSERT_TRUE(FastTextModel::load(p("m.bin"), m));
  std::vector<std::string> docs = eval_pos_;
  docs.insert(docs.end(), eval_neg_.begin(), eval_neg_.end());
  write_lines(dir_ / "eval_all.txt", docs);
  int st = 0;
  std::istringstream tool(
      smelt::test::run_command("fasttext predict-prob " + p("m.bin") + " " + p("eval_all.txt") + " 2", st));
  ASSERT_EQ(WEXITSTATUS(st), 0);
  const int hq = m->label_index("hq");
  ASSERT_GE(hq, 0);
  std::vector<float> ours[2], theirs[2];  // [0] positives, [1] negatives: p(hq)
  for (size_t i = 0; i < docs.size(); ++i) {
    std::string line, a, b;
    double pa = 0, pb = 0;
    ASSERT_TRUE(std::getline(tool, line)) << i;
    std::istringstream(line) >> a >> pa >> b >> pb;
    const float mine = m->probability(docs[i], hq);
    const double tool_hq = a == "__label__hq" ? pa : pb;
    ASSERT_NEAR(mine, tool_hq, tool_hq < 1 ? 1e-6 : 1e-5) << line << "\n" << docs[i];  // its 6 digits
    ours[i >= eval_pos_.size()].push_back(mine);
    theirs[i >= eval_pos_.size()].push_back(static_cast<float>(tool_hq));
  }

  r = run_quality("eval --model " + p("m.bin") + " --positive " + p("eval_pos.jsonl") + " --negative " +
                      p("eval_neg.txt") + " --json -",
                  dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("ROC AUC"), std::string::npos) << r.err;
  auto e = nlohmann::json::parse(r.out);
  double precision, recall, auc;
  pairwise_metrics(ours[0], ours[1], precision, recall, auc);
  EXPECT_EQ(e["positives"], eval_pos_.size());
  EXPECT_EQ(e["negatives"], eval_neg_.size());
  EXPECT_NEAR(e["precision"].get<double>(), precision, 1e-12);
  EXPECT_NEAR(e["recall"].get<double>(), recall, 1e-12);
  EXPECT_NEAR(e["f1"].get<double>(), 2 * precision * recall / (precision + recall), 1e-12);
  EXPECT_NEAR(e["roc_auc"].get<double>(), auc, 1e-12);
  const double tp = recall * eval_pos_.size(), fp = tp / precision - tp;
  EXPECT_NEAR(e["accuracy"].get<double>(), (tp + eval_neg_.size() - fp) / docs.size(), 1e-9);
  EXPECT_GT(auc, 0.85);
  // From the tool's 6-digit probabilities: the same within their rounding.
  pairwise_metrics(theirs[0], theirs[1], precision, recall, auc);
  EXPECT_NEAR(e["roc_auc"].get<double>(), auc, 1e-3);
  EXPECT_NEAR(e["recall"].get<double>(), recall, 1e-2);
}

TEST_F(QualityCmd, OneThreadGivesTheSameBytesInAnyInputOrder) {
  const std::string small = " --epoch 2 --dim 20 --bucket 20000";
  CmdResult r = run_quality(train_args(p("pos.jsonl"), p("a.bin")) + small + " --json " + p("a.json"), dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run_quality(train_args(p("pos.jsonl"), p("b.bin")) + small + " --json " + p("b.json"), dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run_quality(train_args(p("rev/pos.jsonl"), p("c.bin")) + small + " --json " + p("c.json"), dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run_quality(train_args(p("pos.jsonl"), p("d.bin")) + small + " --seed 7", dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string a = smelt::test::read_file(p("a.bin"));
  EXPECT_GT(a.size(), 1000u);
  EXPECT_TRUE(a == smelt::test::read_file(p("b.bin")));
  EXPECT_TRUE(a == smelt::test::read_file(p("c.bin"))) << "the input order changed the model";
  EXPECT_FALSE(a == smelt::test::read_file(p("d.bin"))) << "--seed changed nothing";
  auto ja = nlohmann::json::parse(smelt::test::read_file(p("a.json")));
  auto jc = nlohmann::json::parse(smelt::test::read_file(p("c.json")));
  EXPECT_EQ(ja["valid"], jc["valid"]);
  EXPECT_EQ(ja["counts"], jc["counts"]);
  for (const auto& f : fs::directory_iterator(dir_))  // no training file or temporary model left behind
    EXPECT_TRUE(f.path().filename().string().find(".tmp-") == std::string::npos &&
                f.path().filename().string().find(".train-") == std::string::npos)
        << f.path();
}

TEST_F(QualityCmd, ErrorsNameTheFileAndExitOneUsageExitsTwo) {
  const std::string missing = p("missing.jsonl");
  CmdResult r = run_quality(train_args(missing, p("x.bin")), dir_);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find(missing), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(p("x.bin")));

  r = run_quality("eval --model " + p("neg.txt") + " --positive " + p("eval_pos.jsonl") + " --negative " +
                      p("eval_neg.txt"),
                  dir_);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find(p("neg.txt")), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("not a fastText model"), std::string::npos) << r.err;

  r = run_quality(train_args(p("pos.jsonl"), p("e.bin")) + " --epoch 1 --bucket 1000 --valid-fraction 0 --json " +
                      p("e.json"),
                  dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("nothing held out"), std::string::npos) << r.err;
  auto j = nlohmann::json::parse(smelt::test::read_file(p("e.json")));
  const auto& s = j["settings"];  // DCLM's settings where not given
  EXPECT_EQ(s["dim"], 100);
  EXPECT_EQ(s["word_ngrams"], 2);
  EXPECT_EQ(s["lr"], 0.1);
  EXPECT_EQ(s["min_count"], 1);
  EXPECT_EQ(s["loss"], "softmax");
  EXPECT_EQ(s["seed"], 42);
  EXPECT_EQ(s["threads"], 1);
  EXPECT_EQ(s["positive_label"], "hq");
  EXPECT_EQ(s["negative_label"], "cc");
  EXPECT_EQ(s["epoch"], 1);
  EXPECT_TRUE(j["valid"].is_null());
  EXPECT_EQ(j["counts"]["valid_positive"], 0);
  r = run_quality("eval --model " + p("e.bin") + " --positive " + p("eval_pos.jsonl") + " --negative " +
                      p("eval_neg.txt") + " --label good",
                  dir_);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("no label 'good'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("hq"), std::string::npos) << r.err;
  r = run_quality("eval --model " + p("e.bin") + " --positive " + missing + " --negative " + p("eval_neg.txt"), dir_);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find(missing), std::string::npos) << r.err;
  r = run_quality("eval --model " + p("e.bin") + " --positive " + p("eval_pos.jsonl") + " --negative " +
                      p("eval_neg.txt") + " --label __label__cc",
                  dir_);
  EXPECT_EQ(r.rc, 0) << r.err;

  EXPECT_EQ(run_quality("", dir_).rc, 2);
  EXPECT_EQ(run_quality("bogus", dir_).rc, 2);
  EXPECT_EQ(run_quality("train --positive " + p("pos.jsonl") + " --negative " + p("neg.txt"), dir_).rc, 2);  // no -o
  EXPECT_EQ(run_quality(train_args(p("pos.jsonl"), p("y.bin")) + " --dim 0", dir_).rc, 2);
  EXPECT_EQ(run_quality(train_args(p("pos.jsonl"), p("y.bin")) + " --loss hinge", dir_).rc, 2);
  EXPECT_EQ(run_quality(train_args(p("pos.jsonl"), p("y.bin")) + " --valid-fraction 1", dir_).rc, 2);
  EXPECT_EQ(run_quality(train_args(p("pos.jsonl"), p("y.bin")) + " --no-such-flag", dir_).rc, 2);
  EXPECT_EQ(run_quality("eval --model " + p("e.bin") + " --positive " + p("eval_pos.jsonl"), dir_).rc, 2);
  EXPECT_FALSE(fs::exists(p("y.bin")));
}
