// The reference scorer (perplexity/ref_scorer.hpp) on a random tiny model saved as a run with its
// tokenizer: a document's ref_bpb is `smelt eval`'s bits per byte of a shard holding [EOD, the
// document's tokens] (one window and several), windows of a shorter max_seq_len match the training
// forward over the same rows, a GGUF export scores the same, 4 threads get the same bits, errors
// name the file, and empty text is -1.
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/tiny_checkpoint.hpp"
#include "smelt/dataset/indexed.hpp"
#include "smelt/perplexity/ref_scorer.hpp"
#include "smelt/tokenizer/tokenizer.hpp"
#include "test_files.hpp"

namespace fs = std::filesystem;
using namespace smelt;

namespace {

class RefScorerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("smelt_ref_scorer_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    tok_path_ = (dir_ / "tokenizer.json").string();
    ASSERT_TRUE(test::train_tiny_tokenizer(tok_path_, 400));
    ASSERT_TRUE(Tokenizer::load(tok_path_, tok_));
    cfg_.vocab_size = 416;  // padded beyond the tokenizer's 400
    cfg_.d_model = 64;
    cfg_.n_layers = 2;
    cfg_.n_heads = 4;
    cfg_.n_kv_heads = 2;
    cfg_.ffn_hidden = 96;
    cfg_.max_seq_len = 32;
    cfg_.tie_embeddings = false;
    cfg_.init_std = 0.25;  // spread-out logits: the context changes the predictions
    model_ = std::make_unique<Model>();
    ASSERT_TRUE(model_->init(cfg_, 1, cfg_.max_seq_len, 1, 91));
    run_ = (dir_ / "run").string();
    Status s = save(run_, tok_path_);
    ASSERT_TRUE(s) << s.message();
  }
  static void TearDownTestSuite() {
    model_.reset();
    fs::remove_all(dir_);
  }

  // The model as step 10 of run_dir, with the [data] shape `smelt eval` reads: rows of
  // max_seq_len, one per batch, the shard's tokens as they are (no EOD appended).
  static Status save(const std::string& run_dir, const std::string& tokenizer) {
    CkptSaveRequest r;
    r.step = 10;
    toml::table data{{"sources", "train"}, {"seq_len", cfg_.max_seq_len}, {"batch_size", 1}, {"append_eod", false}, {"shuffle", false}};
    toml::table root{{"model", model_config_to_toml(cfg_)}, {"data", data}};
    std::ostringstream os;
    os << root;
    r.config_toml = os.str();
    r.tokenizer_path = tokenizer;
    r.state = nlohmann::json::object();
    for (const auto& t : param_layout(cfg_).tensors)
      r.tensors.push_back({t.name, t.cols == 1 ? std::vector<int64_t>{t.rows} : std::vector<int64_t>{t.rows, t.cols},
                           model_->params() + t.offset});
    return ckpt_save(run_dir, r);
  }

  // [EOD, the text's tokens]: what the scorer reads.
  static std::vector<uint32_t> doc_ids(const std::string& text) {
    std::vector<uint32_t> ids;
    tok_.encode(text, ids, false);
    ids.insert(ids.begin(), *tok_.eod_id());
    return ids;
  }

  // `smelt eval`'s JSON on a shard of one sequence, [EOD, the text's tokens].
  static nlohmann::json eval_json(const std::string& text, const std::string& name) {
    const std::string prefix = (dir_ / name).string();
    IndexedWriter w;
    EXPECT_TRUE(w.open(prefix, IndexedDType::kUInt16));
    EXPECT_TRUE(w.add_document(doc_ids(text)));
    EXPECT_TRUE(w.finish());
    test::CmdResult r = test::run_smelt("eval --checkpoint " + run_ + " --data " + prefix + " --dtype f32 --threads 1",
                                        dir_);
    EXPECT_EQ(r.rc, 0) << r.err;
    return r.rc == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
  }

  static std::unique_ptr<ReferenceScorer> scorer(RefScorerOptions o) {
    if (o.checkpoint.empty()) o.checkpoint = run_;
    std::unique_ptr<ReferenceScorer> s;
    Status st = make_ref_scorer(o, s);
    EXPECT_TRUE(st) << st.message();
    return s;
  }

  static RefScorerOptions f32() {
    RefScorerOptions o;
    o.weights = "f32";
    return o;
  }

  static std::string text(const std::string& file, size_t from, size_t bytes) {
    const std::string t = test::read_file(std::string(SMELT_TEST_DATA) + "/tokenizer_train/" + file);
    size_t to = std::min(t.size(), from + bytes);  // both ends on UTF-8 character boundaries
    while (from < to && ((unsigned char)t[from] & 0xC0) == 0x80) from++;
    while (to < t.size() && ((unsigned char)t[to] & 0xC0) == 0x80) to++;
    return t.substr(from, to - from);
  }

  static inline fs::path dir_;
  static inline std::string tok_path_, run_;
  static inline Tokenizer tok_;
  static inline ModelConfig cfg_;
  static inline std::unique_ptr<Model> model_;
};

// One window: the document's tokens fit max_seq_len.
TEST_F(RefScorerTest, OneWindowEqualsSmeltEvalBitsPerByte) {
  const std::string doc = text("en_coding_style.rst", 400, 45);
  ASSERT_LT(doc_ids(doc).size(), 33u);
  auto s = scorer(f32());
  const double bpb = s->bits_per_byte(doc);
  nlohmann::json e = eval_json(doc, "short");
  ASSERT_TRUE(e.contains("bits_per_byte"));
  EXPECT_EQ(e["tokens"].get<size_t>(), doc_ids(doc).size() - 1);
  EXPECT_EQ(e["bytes"].get<size_t>(), doc.size());
  EXPECT_GT(bpb, 0.5);
  EXPECT_NEAR(bpb, e["bits_per_byte"].get<double>(), 1e-5 * bpb);
  EXPECT_NE(s->describe().find("f32"), std::string::npos) << s->describe();
  EXPECT_NE(s->describe().find("step 10"), std::string::npos) << s->describe();
}

// Several windows, in groups of batch_rows, the last one partial: eval's packed rows of
// max_seq_len over the same shard are the same windows.
TEST_F(RefScorerTest, SeveralWindowsEqualSmeltEvalRows) {
  const std::string doc = text("en_coding_style.rst", 1000, 500) + text("zh_coding_style.rst", 1200, 300);
  const size_t n = doc_ids(doc).size() - 1;
  ASSERT_GT(n, 4u * 32u);
  ASSERT_NE(n % 32, 0u);
  nlohmann::json e = eval_json(doc, "long");
  ASSERT_TRUE(e.contains("bits_per_byte"));
  EXPECT_EQ(e["tokens"].get<size_t>(), n);
  for (int rows : {1, 3, 8}) {
    RefScorerOptions o = f32();
    o.batch_rows = rows;
    const double bpb = scorer(o)->bits_per_byte(doc);
    EXPECT_NEAR(bpb, e["bits_per_byte"].get<double>(), 1e-5 * bpb) << rows << " rows";
  }
}

// max_seq_len 16 (below eval's rows): the training forward over the same windows, each a row of
// 16 inputs starting at position 0, the last padded with -1 targets.
TEST_F(RefScorerTest, ShorterWindowsEqualTheTrainingForwardOverTheSameRows) {
  const std::string doc = text("en_coding_style.rst", 3000, 400);
  const std::vector<uint32_t> ids = doc_ids(doc);
  const int T = 16, n = (int)ids.size() - 1, B = (n + T - 1) / T;
  ASSERT_GT(B, 3);
  Batch b;
  b.B = B, b.T = T;
  b.inputs.assign((size_t)B * T, 0);
  b.targets.assign((size_t)B * T, -1);
  for (int t = 0; t < n; t++) {
    b.inputs[t] = (int32_t)ids[t];
    b.targets[t] = (int32_t)ids[t + 1];
  }
  Model m;
  ASSERT_TRUE(m.init(cfg_, B, T, 1, 1));
  std::copy(model_->params(), model_->params() + param_layout(cfg_).total, m.params());
  float mean = 0;
  ASSERT_TRUE(m.forward_loss(b, mean));
  double nats = 0;
  for (int i = 0; i < B * T; i++)
    if (b.targets[i] >= 0) nats += m.token_losses()[i];
  const double want = nats / (std::log(2.0) * (double)doc.size());
  RefScorerOptions o = f32();
  o.max_seq_len = T;
  o.batch_rows = 3;
  const double bpb = scorer(o)->bits_per_byte(doc);
  EXPECT_NEAR(bpb, want, 1e-5 * want);
  // The windows matter: whole 32-token contexts give another number.
  EXPECT_GT(std::abs(scorer(f32())->bits_per_byte(doc) - bpb), 1e-3);
}

TEST_F(RefScorerTest, GgufFileScoresAsItsCheckpoint) {
  const std::string gguf = (dir_ / "model.gguf").string();
  test::CmdResult x = test::run_smelt("export --checkpoint " + run_ + " --format gguf --dtype f32 --output " + gguf, dir_);
  ASSERT_EQ(x.rc, 0) << x.err;
  const std::string doc = text("en_coding_style.rst", 2000, 200);
  RefScorerOptions o = f32();
  o.checkpoint = gguf;
  auto g = scorer(o);
  const double want = scorer(f32())->bits_per_byte(doc);
  EXPECT_NEAR(g->bits_per_byte(doc), want, 1e-9 * want);
  EXPECT_NE(g->describe().find("GGUF"), std::string::npos) << g->describe();
}

TEST_F(RefScorerTest, ErrorsNameTheFileAndWhatWasExpected) {
  std::unique_ptr<ReferenceScorer> s;
  RefScorerOptions o = f32();
  o.checkpoint = (dir_ / "nowhere").string();
  Status st = make_ref_scorer(o, s);
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find(o.checkpoint), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("not found"), std::string::npos) << st.message();

  // A run saved without its tokenizer.
  const std::string bare = (dir_ / "bare").string();
  ASSERT_TRUE(save(bare, ""));
  o.checkpoint = bare;
  st = make_ref_scorer(o, s);
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("no tokenizer.json"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(bare), std::string::npos) << st.message();

  // A folder with no checkpoint at all.
  o.checkpoint = dir_.string();
  st = make_ref_scorer(o, s);
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("no manifest.json"), std::string::npos) << st.message();

  o.checkpoint = run_;
  o.weights = "q4";
  st = make_ref_scorer(o, s);
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("q4"), std::string::npos) << st.message();
  o.weights = "f32";
  o.max_seq_len = 33;
  st = make_ref_scorer(o, s);
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("max_seq_len = 33"), std::string::npos) << st.message();
  EXPECT_FALSE(s);
}

// Four threads at once, through two contexts (so callers wait for one), get the bits one thread
// gets, in f32 and in q8_0 (whose contexts each hold their own int8 copy).
TEST_F(RefScorerTest, FourThreadsGetTheSameBits) {
  const std::vector<std::string> docs = {text("en_coding_style.rst", 100, 90), text("zh_coding_style.rst", 600, 400),
                                         text("en_coding_style.rst", 5000, 300), "x"};
  for (const char* w : {"f32", "q8_0"}) {
    SCOPED_TRACE(w);
    RefScorerOptions o;
    o.weights = w;
    o.contexts = 2;
    o.batch_rows = 2;
    auto s = scorer(o);
    std::vector<double> want;
    for (const auto& d : docs) want.push_back(s->bits_per_byte(d));
    std::vector<std::vector<double>> got(4);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; t++)
      threads.emplace_back([&, t] {
        for (int rep = 0; rep < 3; rep++)
          for (size_t i = 0; i < docs.size(); i++) got[t].push_back(s->bits_per_byte(docs[(i + t) % docs.size()]));
      });
    for (auto& th : threads) th.join();
    for (int t = 0; t < 4; t++)
      for (size_t k = 0; k < got[t].size(); k++) EXPECT_EQ(got[t][k], want[(k + t) % docs.size()]) << t << " " << k;
  }
}

TEST_F(RefScorerTest, Q8AndAutoStayNearF32) {
  const std::string doc = text("en_coding_style.rst", 7000, 300);
  const double want = scorer(f32())->bits_per_byte(doc);
  for (const char* w : {"q8_0", "bf16", "auto"}) {
    RefScorerOptions o;
    o.weights = w;
    auto s = scorer(o);
    EXPECT_NEAR(s->bits_per_byte(doc), want, 0.03 * want) << w << ": " << s->describe();
  }
}

TEST_F(RefScorerTest, EmptyTextIsMinusOne) {
  auto s = scorer(f32());
  EXPECT_EQ(s->bits_per_byte(""), -1.0);
  EXPECT_GT(s->bits_per_byte("a"), 0.0);
}

}  // namespace

namespace {

std::vector<nlohmann::json> prep_docs(const fs::path& out) {
  std::vector<nlohmann::json> docs;
  for (const auto& e : fs::directory_iterator(out)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("part-", 0) != 0) continue;
    int rc = 0;
    std::istringstream ss(test::run_command("zstdcat '" + e.path().string() + "'", rc));
    EXPECT_EQ(rc, 0);
    for (std::string line; std::getline(ss, line);) docs.push_back(nlohmann::json::parse(line));
  }
  return docs;
}

// `smelt prep` with [prep.perplexity]: the light binary hands the command to smelt-full (it has
// the decoder), every document gets the scorer's bits per byte as quality.ref_bpb, and a score
// pass's per-language percentiles put documents in buckets that a real pass can keep.
TEST_F(RefScorerTest, PrepStoresEachDocumentsBitsPerByteAndKeepsBuckets) {
  const fs::path work = dir_ / "prep";
  fs::create_directories(work);
  std::vector<std::string> texts;
  std::string jsonl;
  for (int i = 0; i < 12; ++i) {
    texts.push_back(text(i % 2 ? "en_coding_style.rst" : "zh_coding_style.rst", 300 * i, 400 + 40 * i));
    jsonl += nlohmann::json{{"id", fmt::format("d{}", i)}, {"text", texts.back()}}.dump() + "\n";
  }
  test::write_file((work / "in.jsonl").string(), jsonl);
  test::write_file((work / "p.toml").string(),
                   fmt::format("[prep.perplexity]\ncheckpoint = \"{}\"\nweights = \"f32\"\n"
                               "[prep.sample]\nenabled = false\n[prep.dedup]\nenabled = false\n"
                               "[prep.quality]\nmin_words = 1\n",
                               run_));
  const std::string base = "prep --input " + (work / "in.jsonl").string() + " --config " + (work / "p.toml").string();
  test::CmdResult r = test::run_smelt(base + " --output " + (work / "all").string() + " --threads 2", work);
  ASSERT_EQ(r.rc, 0) << r.err;
  auto s = scorer(f32());
  std::vector<nlohmann::json> docs = prep_docs(work / "all");
  ASSERT_EQ(docs.size(), texts.size());
  for (const auto& d : docs) {
    const int i = std::stoi(d["id"].get<std::string>().substr(1));
    EXPECT_NEAR(d["quality"]["ref_bpb"].get<double>(), s->bits_per_byte(texts[i]), 1e-4) << d["id"];
    EXPECT_FALSE(d["quality"].contains("ref_bucket"));  // no score pass given
  }
  EXPECT_NE(r.err.find("perplexity"), std::string::npos) << r.err;  // its share of the time
  // a score pass, then keep the head (the lowest 30% of each language's bpb)
  r = test::run_smelt(base + " --output " + (work / "score").string() + " --only score", work);
  ASSERT_EQ(r.rc, 0) << r.err;
  r = test::run_smelt(base + " --output " + (work / "head").string() + " --set prep.scores=" +
                          (work / "score").string() + " --set 'prep.perplexity.keep=[\"head\"]'",
                      work);
  ASSERT_EQ(r.rc, 0) << r.err;
  docs = prep_docs(work / "head");
  EXPECT_GE(docs.size(), 2u);
  EXPECT_LE(docs.size(), 6u);
  for (const auto& d : docs) EXPECT_EQ(d["quality"]["ref_bucket"], "head") << d["id"];
  // keep without a score pass: refused at start
  r = test::run_smelt(base + " --output " + (work / "none").string() + " --set 'prep.perplexity.keep=[\"head\"]'", work);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("--only score"), std::string::npos) << r.err;
}

}  // namespace
