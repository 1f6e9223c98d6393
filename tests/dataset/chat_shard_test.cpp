// Chat data through the loader ([data] format = "chat", dataset/chat_shard.hpp): a shard built from
// chat JSONL gives rows that hold whole conversations, each its own segment with positions from 0,
// whose inputs are the conversation's ids and whose targets are exactly the reply tokens (the mask
// of chat_tokenize, computed here independently per conversation), token by token; one epoch trains
// each reply token once; conversations longer than a row are cut or dropped and counted; [data]
// format = "chat" defaults to document masks without the loader's EOD and refuses settings that
// would mix conversations.
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "smelt/dataset/chat_shard.hpp"
#include "smelt/dataset/loader.hpp"
#include "train_test_util.hpp"
#include "tokenizer/tok_test_util.hpp"

namespace fs = std::filesystem;
using namespace smelt;

namespace {

const Tokenizer& gpt2() {
  static Tokenizer tok = [] {
    Tokenizer t;
    Status s = Tokenizer::load(test::fixtures() + "/gpt2.json", t);
    EXPECT_TRUE(s.is_ok()) << s.message();
    return t;
  }();
  return tok;
}

// n conversations of 1 to 3 exchanges, some with a system message, of varied lengths.
std::vector<std::vector<ChatTurn>> conversations(int n) {
  const char* words[] = {"apt", "installs", "packages", "from", "the", "archive", "and", "dpkg", "lists", "their",
                         "files", "while", "debconf", "asks", "questions", "about", "settings"};
  std::vector<std::vector<ChatTurn>> all;
  for (int i = 0; i < n; i++) {
    std::vector<ChatTurn> c;
    if (i % 3 == 0) c.push_back({"system", "You answer questions about Debian."});
    for (int k = 0; k <= i % 3; k++) {
      std::string q = fmt::format("Question {} of {}: what does", k, i), a = "It";
      for (int w = 0; w < 3 + (i * 7 + k * 5) % 17; w++) (w % 2 ? a : q) += std::string(" ") + words[(i + w * k + w) % 17];
      c.push_back({"user", q + "?"});
      c.push_back({"assistant", a + "."});
    }
    all.push_back(std::move(c));
  }
  return all;
}

std::string jsonl(const std::vector<std::vector<ChatTurn>>& all) {
  std::string s;
  for (const auto& c : all) {
    nlohmann::json m = nlohmann::json::array();
    for (const auto& t : c) m.push_back({{"role", t.role}, {"content", t.content}});
    s += nlohmann::json{{"messages", m}}.dump() + "\n";
  }
  return s;
}

struct Expected {
  std::vector<uint32_t> ids;
  std::vector<uint8_t> mask;
};

class ChatShardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::fresh_test_dir("smelt_chat_shard");
    ChatTemplateSource t;
    ASSERT_TRUE(chat_template_resolve("", nullptr, gpt2(), t).is_ok());
    ASSERT_TRUE(chat_jinja_renderer(t, render_).is_ok());
  }
  void TearDown() override { fs::remove_all(dir_); }
  // The conversation's ids and mask as chat.hpp makes them, without the shard or the loader.
  Expected expect(const std::vector<ChatTurn>& c) {
    Expected e;
    ChatRendered r;
    EXPECT_TRUE(chat_render(render_, c, r).is_ok());
    chat_tokenize(gpt2(), r, e.ids, e.mask);
    return e;
  }
  fs::path dir_;
  ChatRenderer render_;
};

}  // namespace

TEST_F(ChatShardTest, RowsHoldWholeConversationsAndOnlyReplyTokensAreTargets) {
  const auto all = conversations(40);
  test::write_file((dir_ / "chat.jsonl").string(), jsonl(all));
  const int T = 96;
  ChatShardStats st;
  const std::string prefix = (dir_ / "shard").string();
  ASSERT_TRUE(chat_shard_build({(dir_ / "chat.jsonl").string()}, render_, gpt2(), T, ChatOverflow::kCut, prefix, st).is_ok());
  std::vector<Expected> want;
  uint64_t trained = 0;
  for (const auto& c : all) {
    want.push_back(expect(c));
    ASSERT_LE(want.back().ids.size(), (size_t)T) << "the test's conversations fit a row";
    for (uint8_t m : want.back().mask) trained += m;
  }
  EXPECT_EQ(st.conversations, 40);
  EXPECT_EQ(st.trained_tokens, trained);
  EXPECT_EQ(st.cut, 0);

  LoaderConfig c;
  toml::table root = toml::parse(fmt::format("[data]\nformat = \"chat\"\nsources = \"c={}\"\nseq_len = {}\n"
                                             "batch_size = 2\nshuffle = false\nprefetch_threads = 0\n", prefix, T));
  ASSERT_TRUE(loader_config_read(root, c).is_ok());
  EXPECT_TRUE(c.doc_mask);
  EXPECT_FALSE(c.append_eod);
  Loader loader;
  ASSERT_TRUE(loader.open(c).is_ok());
  size_t next = 0;  // the conversation the next segment must be (file order)
  uint64_t targets = 0;
  while (next < all.size()) {
    const Batch& b = loader.next();
    for (int r = 0; r < b.B; r++) {
      const int32_t* in = &b.inputs[(size_t)r * b.T];
      const int32_t* tg = &b.targets[(size_t)r * b.T];
      const int32_t* sg = &b.segments[(size_t)r * b.T];
      const int32_t* ps = &b.positions[(size_t)r * b.T];
      for (int t = 0; t < b.T && next < all.size();) {
        if (sg[t] < 0) break;  // the row's padding
        const Expected& e = want[next];
        SCOPED_TRACE(fmt::format("conversation {} at row {} column {}", next, r, t));
        // The conversation whole in this row: every token but its last is an input here.
        ASSERT_LE(t + (int)e.ids.size() - 1, b.T);
        for (size_t k = 0; k + 1 < e.ids.size(); k++) {
          ASSERT_EQ(sg[t + k], sg[t]);
          EXPECT_EQ(in[t + k], (int32_t)e.ids[k]) << k;
          EXPECT_EQ(ps[t + k], (int32_t)k);
          EXPECT_EQ(tg[t + k], e.mask[k + 1] ? (int32_t)e.ids[k + 1] : -1) << k;
          targets += e.mask[k + 1];
        }
        t += (int)e.ids.size();
        if (t - 1 < b.T) {
          EXPECT_EQ(tg[t - 1], -1);  // the last token predicts nothing
        }
        next++;
      }
    }
  }
  EXPECT_EQ(targets, trained) << "each reply token is a target once an epoch";
}

TEST_F(ChatShardTest, LongConversationsAreCutOrDroppedAndCounted) {
  const auto all = conversations(30);
  test::write_file((dir_ / "chat.jsonl").string(), jsonl(all));
  const uint64_t limit = 40;
  int64_t longer = 0, untrained = 0;
  uint64_t kept_tokens = 0, dropped_tokens = 0;
  for (const auto& c : all) {
    const Expected e = expect(c);
    if (e.ids.size() <= limit) {
      kept_tokens += e.ids.size();
      continue;
    }
    longer++;
    dropped_tokens += e.ids.size();
    uint64_t left = 0;
    for (uint64_t k = 0; k < limit; k++) left += e.mask[k];
    untrained += left == 0;
  }
  ASSERT_GT(longer, 5);
  ChatShardStats cut, drop;
  const std::vector<std::string> files = {(dir_ / "chat.jsonl").string()};
  ASSERT_TRUE(chat_shard_build(files, render_, gpt2(), limit, ChatOverflow::kCut, (dir_ / "cut").string(), cut).is_ok());
  ASSERT_TRUE(chat_shard_build(files, render_, gpt2(), limit, ChatOverflow::kDrop, (dir_ / "drop").string(), drop).is_ok());
  EXPECT_EQ(cut.cut, longer - untrained);
  EXPECT_EQ(cut.untrained, untrained);
  EXPECT_EQ(cut.conversations, 30 - untrained);
  EXPECT_EQ(drop.dropped, longer);
  EXPECT_EQ(drop.conversations, 30 - longer);
  EXPECT_EQ(drop.tokens, kept_tokens);
  IndexedDataset ds;
  ASSERT_TRUE(ds.open((dir_ / "cut").string()).is_ok());
  for (uint64_t i = 0; i < ds.sequences(); i++) EXPECT_LE((uint64_t)ds.length(i), limit);
  // The stats file a person or a program reads: counts, and the tokenizer the ids are of.
  const nlohmann::json j = nlohmann::json::parse(test::read_file((dir_ / "drop").string() + ".stats.json"));
  EXPECT_EQ(j["dropped"], longer);
  EXPECT_EQ(j["tokenizer"]["content_hash"], fmt::format("{:016x}", gpt2().content_hash()));
  // Nothing left: an error that says why, and no shard.
  ChatShardStats none;
  Status s = chat_shard_build(files, render_, gpt2(), 8, ChatOverflow::kDrop, (dir_ / "none").string(), none);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("no conversation to train on"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("30 dropped"), std::string::npos) << s.message();
  EXPECT_FALSE(fs::exists((dir_ / "none.idx")));
}

TEST(ChatConfig, ChatDefaultsToDocumentMasksAndRefusesMixingConversations) {
  auto read = [](const std::string& extra, LoaderConfig& c) {
    return loader_config_read(toml::parse("[data]\nformat = \"chat\"\nsources = \"x\"\n" + extra), c);
  };
  LoaderConfig c;
  ASSERT_TRUE(read("", c).is_ok());
  EXPECT_TRUE(c.doc_mask);
  EXPECT_FALSE(c.append_eod);
  EXPECT_EQ(c.chat_overflow, ChatOverflow::kCut);
  for (const auto& [extra, key] : std::map<std::string, std::string>{{"doc_mask = false", "doc_mask = false"},
                                                                      {"append_eod = true", "append_eod = true"},
                                                                      {"span_tokens = 16", "span_tokens"},
                                                                      {"stream_tokenizer = \"t.json\"", "stream_tokenizer"},
                                                                      {"chat_overflow = \"wrap\"", "chat_overflow"}}) {
    Status s = read(extra, c);
    ASSERT_FALSE(s.is_ok()) << extra;
    EXPECT_NE(s.message().find(key), std::string::npos) << s.message();
  }
}
