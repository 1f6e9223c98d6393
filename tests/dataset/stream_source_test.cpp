// Tests for stream_source.cpp: reading refined JSONL(.zst) and tokenizing on the fly gives the same
// tokens and the same packed batches as `smelt tokenize` (tokenize_run) followed by the Loader;
// resume continues exactly. Real text (tests/data/tokenizer), a small byte-level BPE built here.
#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "smelt/dataset/loader.hpp"
#include "smelt/dataset/tokenize.hpp"
#include "smelt/tokenizer/tokenizer.hpp"
#include "test_files.hpp"

using namespace smelt;
namespace fs = std::filesystem;

namespace {

class StreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("smelt_stream_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    // A byte-level BPE: 256 bytes, a few merges, <|endoftext|>.
    BpeModel m;
    for (int b = 0; b < 256; ++b) m.vocab.push_back(std::string(1, static_cast<char>(b)));
    auto merge = [&](const std::string& a, const std::string& b) {
      uint32_t ia = 0, ib = 0;
      for (uint32_t i = 0; i < m.vocab.size(); ++i) {
        if (m.vocab[i] == a) ia = i;
        if (m.vocab[i] == b) ib = i;
      }
      m.merges.push_back({ia, ib});
      m.vocab.push_back(a + b);
    };
    merge("t", "h"), merge("th", "e"), merge(" ", "the"), merge("i", "n"), merge(" ", "a");
    m.specials.push_back({"<|endoftext|>", static_cast<uint32_t>(m.vocab.size()), true});
    Tokenizer t;
    ASSERT_TRUE(Tokenizer::from_model(m, t).is_ok());
    tok_path_ = (dir_ / "tok.json").string();
    ASSERT_TRUE(t.save_hf(tok_path_).is_ok());
    ASSERT_TRUE(Tokenizer::load(tok_path_, tok_).is_ok());
    ASSERT_TRUE(tok_.eod_id().has_value());

    // refined JSONL: paragraphs of English and Chinese text, one document each, in two files
    std::string text = test::read_file(std::string(SMELT_TEST_DATA) + "/tokenizer/english.txt") +
                       test::read_file(std::string(SMELT_TEST_DATA) + "/tokenizer/chinese.txt");
    std::string a, b;
    size_t at = 0, n = 0;
    while (at < text.size() && n < 400) {
      size_t end = text.find("\n\n", at);
      if (end == std::string::npos) end = text.size();
      if (end > at) {
        nlohmann::json j = {{"id", "d" + std::to_string(n)}, {"text", text.substr(at, end - at)}};
        (n % 3 == 2 ? b : a) += j.dump() + "\n";
        ++n;
      }
      at = end + 2;
    }
    docs_ = n;
    test::write_file((dir_ / "a.jsonl").string(), a);
    test::write_file((dir_ / "b.jsonl").string(), b);
    ASSERT_EQ(std::system(("zstd -q --rm -f '" + (dir_ / "b.jsonl").string() + "'").c_str()), 0);

    // the offline route: tokenize_run as `smelt tokenize` runs it
    TokenizeConfig c;
    c.inputs = {(dir_ / "a.jsonl").string(), (dir_ / "b.jsonl.zst").string()};
    c.output = (dir_ / "tokens").string();
    c.threads = 2;
    TokenEncoder enc;
    enc.encode = [this](std::string_view text, std::vector<uint32_t>& ids) { tok_.encode(text, ids, false); };
    enc.vocab_size = tok_.vocab_size();
    enc.eod_id = tok_.eod_id();
    enc.path = tok_path_;
    TokenizeSummary sum;
    Status s = tokenize_run(c, enc, sum);
    ASSERT_TRUE(s.is_ok()) << s.message();
  }
  void TearDown() override { fs::remove_all(dir_); }

  LoaderConfig stream_config() const {
    LoaderConfig c;
    c.sources = (dir_ / "a.jsonl").string() + "," + (dir_ / "b.jsonl.zst").string();
    c.stream_tokenizer = tok_path_;
    c.stream_threads = 2;
    c.seq_len = 64, c.batch_size = 4, c.doc_mask = true;
    return c;
  }
  LoaderConfig offline_config() const {
    LoaderConfig c;
    c.sources = "stream=" + (dir_ / "tokens").string();
    c.eod_id = *tok_.eod_id();
    c.shuffle = false;
    c.seq_len = 64, c.batch_size = 4, c.doc_mask = true, c.prefetch_threads = 0;
    return c;
  }

  fs::path dir_;
  std::string tok_path_;
  Tokenizer tok_;
  size_t docs_ = 0;
};

}  // namespace

TEST_F(StreamTest, SourceYieldsTheOfflineTokens) {
  IndexedDataset ds;
  ASSERT_TRUE(ds.open((dir_ / "tokens").string()).is_ok());
  ASSERT_EQ(ds.documents(), docs_);
  StreamSource src;
  ASSERT_TRUE(src.open({(dir_ / "a.jsonl").string(), (dir_ / "b.jsonl.zst").string()}, tok_, 3).is_ok());
  std::vector<uint32_t> ids;
  uint64_t d = 0;
  while (src.next(ids)) {
    ASSERT_LT(d, ds.documents());
    ASSERT_EQ(ids, ds.sequence(d).to_vector()) << "document " << d;
    ++d;
  }
  EXPECT_EQ(d, ds.documents());
}

TEST_F(StreamTest, BatchesEqualTheLoaderOnTheOfflineShard) {
  StreamLoader sl;
  Status s = sl.open(stream_config());
  ASSERT_TRUE(s.is_ok()) << s.message();
  Loader l;
  s = l.open(offline_config());
  ASSERT_TRUE(s.is_ok()) << s.message();
  IndexedDataset ds;
  ASSERT_TRUE(ds.open((dir_ / "tokens").string()).is_ok());
  // past one epoch: the stream starts over like the unshuffled shard
  uint64_t steps = (ds.tokens() + ds.documents()) / (64 * 4) + 20;
  for (uint64_t i = 0; i < steps; ++i) {
    const Batch& a = sl.next();
    const Batch& b = l.next();
    ASSERT_EQ(a.inputs, b.inputs) << "step " << i;
    ASSERT_EQ(a.targets, b.targets) << "step " << i;
    ASSERT_EQ(a.segments, b.segments) << "step " << i;
    ASSERT_EQ(a.positions, b.positions) << "step " << i;
  }
  LoaderPosition pa = sl.position(), pb = l.position();
  EXPECT_EQ(pa.sources["stream"], pb.sources["stream"]);
  EXPECT_EQ(pa.sources["stream"].epoch, 1u);
}

TEST_F(StreamTest, ResumeContinuesExactly) {
  std::vector<std::vector<int32_t>> whole;
  {
    StreamLoader sl;
    ASSERT_TRUE(sl.open(stream_config()).is_ok());
    for (int i = 0; i < 30; ++i) whole.push_back(sl.next().inputs);
  }
  LoaderPosition p;
  {
    StreamLoader sl;
    ASSERT_TRUE(sl.open(stream_config()).is_ok());
    for (int i = 0; i < 13; ++i) sl.next();
    p = sl.position();
  }
  LoaderPosition q;
  ASSERT_TRUE(LoaderPosition::from_json(nlohmann::json::parse(p.to_json().dump()), q).is_ok());
  StreamLoader sl;
  ASSERT_TRUE(sl.open(stream_config(), &q).is_ok());
  for (int i = 13; i < 30; ++i) ASSERT_EQ(sl.next().inputs, whole[i]) << "step " << i;
}

TEST_F(StreamTest, ResumeAroundTheEpochEnd) {
  IndexedDataset ds;
  ASSERT_TRUE(ds.open((dir_ / "tokens").string()).is_ok());
  const int k = static_cast<int>((ds.tokens() + ds.documents()) / (64 * 4));  // the step that crosses the end
  std::vector<std::vector<int32_t>> whole;
  std::vector<LoaderPosition> pos;
  {
    StreamLoader sl;
    ASSERT_TRUE(sl.open(stream_config()).is_ok());
    for (int i = 0; i < k + 4; ++i) {
      whole.push_back(sl.next().inputs);
      pos.push_back(sl.position());
    }
  }
  for (int at = k - 1; at <= k + 1; ++at) {
    StreamLoader sl;
    ASSERT_TRUE(sl.open(stream_config(), &pos[at - 1]).is_ok());
    for (int i = at; i < k + 4; ++i) ASSERT_EQ(sl.next().inputs, whole[i]) << "resumed after " << at << ", step " << i;
  }
}
