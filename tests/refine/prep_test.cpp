// End-to-end tests of `smelt prep` as a user runs it: the real binary on real HTML (Debian's
// PostgreSQL manual, installed by scripts/install-deps) and on bad inputs made here. Covers
// determinism across thread counts, kill-and-resume, task splitting, --only extract,
// --keep-rejected, exit codes and the stats.json contract.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <zlib.h>

#include "test_files.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const std::string kSmelt = SMELT_BINARY;
const std::string kDocs = "/usr/share/doc/postgresql-doc-15/html";

std::string read_file(const fs::path& p) { return smelt::test::read_file(p.string()); }
void write_file(const fs::path& p, const std::string& s) { smelt::test::write_file(p.string(), s); }

size_t count_files(const fs::path& dir) {
  size_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) n += e.is_regular_file();
  return n;
}

std::string quote(const std::string& s) { return "'" + s + "'"; }

// Runs smelt with args; returns the exit code. Output goes to LOG.
int run_smelt(const std::string& args, const fs::path& log) {
  std::string cmd = kSmelt + " prep " + args + " >" + quote(log.string()) + " 2>&1";
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

std::vector<std::string> parts_of(const fs::path& dir) {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string n = e.path().filename().string();
    if (n.rfind("part-", 0) == 0 && n.find(".tmp-") == std::string::npos) v.push_back(n);
  }
  std::sort(v.begin(), v.end());
  return v;
}

// Decompressed JSON lines of every part, in order.
std::vector<json> docs_of(const fs::path& dir) {
  std::vector<json> out;
  for (const auto& p : parts_of(dir)) {
    FILE* f = popen(("zstdcat " + quote((dir / p).string())).c_str(), "r");
    std::string text;
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
    EXPECT_EQ(pclose(f), 0);
    std::stringstream ss(text);
    for (std::string line; std::getline(ss, line);) out.push_back(json::parse(line));
  }
  return out;
}

json stats_without_timing(const fs::path& dir, const std::string& name = "stats.json") {
  json j = json::parse(read_file(dir / name));
  j.erase("timing");
  return j;
}

class PrepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::is_directory(kDocs)) << kDocs << " missing: run scripts/install-deps";
    tmp_ = fs::temp_directory_path() /
           ("smelt-prep-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(tmp_);
    fs::create_directories(tmp_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(tmp_);
  }
  fs::path tmp_;
};

TEST_F(PrepTest, SameOutputForAnyThreadCount) {
  const std::string common = "--input " + kDocs + " --set prep.shard_mb=1 --keep-rejected 3";
  ASSERT_EQ(run_smelt(common + " --threads 1 --output " + quote((tmp_ / "t1").string()), tmp_ / "t1.log"), 0)
      << read_file(tmp_ / "t1.log");
  ASSERT_EQ(run_smelt(common + " --threads 2 --output " + quote((tmp_ / "t2").string()), tmp_ / "t2.log"), 0)
      << read_file(tmp_ / "t2.log");
  auto p1 = parts_of(tmp_ / "t1"), p2 = parts_of(tmp_ / "t2");
  ASSERT_GE(p1.size(), 2u) << "the test wants several parts";
  ASSERT_EQ(p1, p2);
  for (const auto& p : p1) EXPECT_EQ(read_file(tmp_ / "t1" / p), read_file(tmp_ / "t2" / p)) << p;
  json s1 = stats_without_timing(tmp_ / "t1"), s2 = stats_without_timing(tmp_ / "t2");
  s1["config"].erase("prep");
  s2["config"].erase("prep");  // holds the thread count
  EXPECT_EQ(s1, s2);
  for (const auto& e : fs::directory_iterator(tmp_ / "t1" / "rejected"))
    EXPECT_EQ(read_file(e.path()), read_file(tmp_ / "t2" / "rejected" / e.path().filename())) << e.path();
}

TEST_F(PrepTest, StatsAddUpAndDocumentsCarryTheirSource) {
  ASSERT_EQ(run_smelt("--input " + kDocs + " --output " + quote((tmp_ / "o").string()), tmp_ / "o.log"), 0)
      << read_file(tmp_ / "o.log");
  json s = json::parse(read_file(tmp_ / "o" / "stats.json"));
  uint64_t read = s["documents"]["read"], kept = s["documents"]["kept"], dropped = s["documents"]["dropped"];
  EXPECT_EQ(read, kept + dropped);
  uint64_t by_reason = 0;
  for (const auto& [k, v] : s["drops"].items()) by_reason += v.get<uint64_t>();
  EXPECT_EQ(by_reason, dropped);
  EXPECT_EQ(read, count_files(kDocs));  // one document per file: pages, and the .css and .svg beside them
  EXPECT_GT(kept, read / 4);
  // the PostgreSQL manual repeats its navigation pages: dedup must find some
  uint64_t hist_sum = 0;
  for (auto v : s["score_histogram"]["all"]) hist_sum += v.get<uint64_t>();
  EXPECT_EQ(hist_sum + s["drops"].value("empty", 0), read);
  auto docs = docs_of(tmp_ / "o");
  ASSERT_EQ(docs.size(), kept);
  std::set<std::string> ids;
  for (const auto& d : docs) {
    ASSERT_TRUE(d.contains("text") && d.contains("id") && d.contains("source") && d.contains("quality"));
    EXPECT_TRUE(d["source"].get<std::string>().rfind(kDocs, 0) == 0) << d["source"];
    EXPECT_TRUE(ids.insert(d["id"].get<std::string>()).second) << "duplicate id " << d["id"];
    EXPECT_GE(d["quality"]["score"].get<double>(), 0.0);
    EXPECT_LE(d["quality"]["score"].get<double>(), 1.0);
    EXPECT_EQ(d["text"].get<std::string>().find("<div"), std::string::npos);
  }
}

TEST_F(PrepTest, KilledRunResumesToIdenticalOutput) {
  const std::string args = "--input " + kDocs + " --threads 2 --set prep.shard_mb=1 --keep-rejected 2";
  ASSERT_EQ(run_smelt(args + " --output " + quote((tmp_ / "whole").string()), tmp_ / "whole.log"), 0);
  auto whole = parts_of(tmp_ / "whole");
  ASSERT_GE(whole.size(), 3u);

  // kill at several moments: before the first part, after some parts, near the end
  fs::path out = tmp_ / "killed";
  int kills = 0;
  for (int delay_ms : {30, 200, 400, 700}) {
    pid_t pid = fork();
    if (pid == 0) {
      std::string o = (tmp_ / "killed.log").string();
      freopen(o.c_str(), "a", stderr);
      execl(kSmelt.c_str(), "smelt", "prep", "--input", kDocs.c_str(), "--threads", "2", "--set",
            "prep.shard_mb=1", "--keep-rejected", "2", "--output", out.c_str(), (char*)nullptr);
      _exit(127);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      ++kills;
    }
  }
  EXPECT_GE(kills, 1) << "the run finished before any kill: the test input is too small";
  ASSERT_EQ(run_smelt(args + " --output " + quote(out.string()), tmp_ / "resume.log"), 0)
      << read_file(tmp_ / "resume.log");
  ASSERT_EQ(parts_of(out), whole);
  for (const auto& p : whole) EXPECT_EQ(read_file(out / p), read_file(tmp_ / "whole" / p)) << p;
  EXPECT_EQ(stats_without_timing(out), stats_without_timing(tmp_ / "whole"));
  for (const auto& e : fs::directory_iterator(tmp_ / "whole" / "rejected"))
    EXPECT_EQ(read_file(e.path()), read_file(out / "rejected" / e.path().filename())) << e.path();
  // no temporaries left behind
  for (const auto& e : fs::directory_iterator(out))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  // a finished run is not redone
  ASSERT_EQ(run_smelt(args + " --output " + quote(out.string()), tmp_ / "again.log"), 0);
  EXPECT_NE(read_file(tmp_ / "again.log").find("already complete"), std::string::npos);
}

TEST_F(PrepTest, TasksSplitTheInputsDisjointly) {
  std::set<std::string> seen;
  uint64_t read_total = 0;
  for (int t = 0; t < 3; ++t) {
    std::string a = "--input " + kDocs + " --only extract --tasks 3 --task " + std::to_string(t) + " --output " +
                    quote((tmp_ / "o").string());
    ASSERT_EQ(run_smelt(a, tmp_ / "t.log"), 0) << read_file(tmp_ / "t.log");
    char name[32];
    std::snprintf(name, sizeof name, "stats-%05d.json", t);
    json s = json::parse(read_file(tmp_ / "o" / name));
    read_total += s["documents"]["read"].get<uint64_t>();
  }
  for (const auto& d : docs_of(tmp_ / "o")) {
    EXPECT_TRUE(seen.insert(d["source"].get<std::string>()).second) << "in two tasks: " << d["source"];
  }
  EXPECT_EQ(read_total, count_files(kDocs));
}

TEST_F(PrepTest, OnlyExtractKeepsEveryPageWithItsSource) {
  ASSERT_EQ(run_smelt("--input " + kDocs + "/sql-select.html --only extract --output " + quote((tmp_ / "o").string()),
                      tmp_ / "o.log"),
            0);
  auto docs = docs_of(tmp_ / "o");
  ASSERT_EQ(docs.size(), 1u);
  EXPECT_EQ(docs[0]["source"], kDocs + "/sql-select.html");
  EXPECT_FALSE(docs[0].contains("quality"));
  std::string text = docs[0]["text"];
  EXPECT_NE(text.find("SELECT"), std::string::npos);
  EXPECT_EQ(text.find("<"  "/p>"), std::string::npos);
}

// A fortune file's colours and a rendered manual page's overstrikes leave the text (they are not
// words), counted in stats.json; the switch keeps them.
TEST_F(PrepTest, TerminalCodesLeaveTheText) {
  fs::path in = tmp_ / "in";
  fs::create_directories(in);
  json a = {{"text", "\x1b[37;1m2. What Debian is\x1b[;m\n\x1b[33;1m      *\x1b[;m free software"}, {"id", "a"}};
  json b = {{"text", "N\bNA\bAM\bME\bE\n       l\bls\bs - list directory contents"}, {"id", "b"}};
  json c = {{"text", "plain text stays as it is"}, {"id", "c"}};
  write_file(in / "docs.jsonl", a.dump() + "\n" + b.dump() + "\n" + c.dump() + "\n");
  for (bool strip : {true, false}) {
    const fs::path out = tmp_ / (strip ? "on" : "off");
    ASSERT_EQ(run_smelt("--input " + quote(in.string()) + " --only extract --output " + quote(out.string()) +
                            (strip ? "" : " --set prep.extract.strip_terminal_codes=false"),
                        tmp_ / "o.log"),
              0)
        << read_file(tmp_ / "o.log");
    std::map<std::string, std::string> text;
    for (const auto& d : docs_of(out)) text[d["id"]] = d["text"];
    json s = json::parse(read_file(out / "stats.json"));
    if (strip) {
      EXPECT_EQ(text["a"], "2. What Debian is\n      * free software");
      EXPECT_EQ(text["b"], "NAME\n       ls - list directory contents");
      EXPECT_EQ(s["terminal_codes"], json({{"documents", 2}, {"codes", 10}, {"bytes", 22 + 12}})) << s.dump(2);
      EXPECT_NE(read_file(tmp_ / "o.log").find("terminal control codes stripped: 10 in 2 documents"), std::string::npos);
    } else {
      EXPECT_EQ(text["a"], a["text"]);
      EXPECT_EQ(text["b"], b["text"]);
      EXPECT_EQ(s["terminal_codes"]["documents"], 0) << s.dump(2);
    }
    EXPECT_EQ(text["c"], "plain text stays as it is");
  }
}

TEST_F(PrepTest, BadInputsAreSkippedAndCountedNotFatal) {
  fs::path in = tmp_ / "in";
  fs::create_directories(in);
  // a good JSONL with a malformed line and a line of invalid UTF-8 in the middle
  std::string good = read_file(kDocs + "/tutorial-select.html").substr(0, 2000);
  json a = {{"text", "The first document is real prose about SQL queries and it stays in the output."}, {"id", "a"}};
  json c = {{"text", "The last document is also real prose about tables and rows, kept after bad lines."}, {"id", "c"}};
  write_file(in / "mixed.jsonl", a.dump() + "\n{not json at all\n" + c.dump() + "\n");
  write_file(in / "empty.txt", "");
  std::string junk(4096, '\0');
  for (size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<char>((i * 7919) & 0xff);
  write_file(in / "junk.bin", junk);
  // a truncated gzip of a real page
  {
    gzFile g = gzopen((in / "page.html.gz").c_str(), "wb");
    std::string page = read_file(kDocs + "/sql-select.html");
    gzwrite(g, page.data(), page.size());
    gzclose(g);
    std::string z = read_file(in / "page.html.gz");
    write_file(in / "page.html.gz", z.substr(0, z.size() / 2));
  }
  ASSERT_EQ(run_smelt("--input " + quote(in.string()) + " --set prep.sample.enabled=false --output " +
                          quote((tmp_ / "o").string()),
                      tmp_ / "o.log"),
            0)
      << read_file(tmp_ / "o.log");
  std::string log = read_file(tmp_ / "o.log");
  EXPECT_NE(log.find("mixed.jsonl line 2"), std::string::npos) << log;
  json s = json::parse(read_file(tmp_ / "o" / "stats.json"));
  EXPECT_GE(s["input_issues"].value("invalid_json", 0), 1) << s.dump(2);
  EXPECT_GE(s["input_issues"].value("truncated_stream", 0), 1) << s.dump(2);
  std::set<std::string> ids;
  for (const auto& d : docs_of(tmp_ / "o")) ids.insert(d["id"].get<std::string>());
  EXPECT_TRUE(ids.count("a"));
  EXPECT_TRUE(ids.count("c"));
}

TEST_F(PrepTest, ShowsProgressLinesWhenNotATerminal) {
  ASSERT_EQ(run_smelt("--input " + kDocs + " --threads 1 --set prep.log_interval_s=0.01 --output " +
                          quote((tmp_ / "o").string()),
                      tmp_ / "o.log"),
            0);
  std::string log = read_file(tmp_ / "o.log");
  EXPECT_NE(log.find(" docs/s "), std::string::npos) << log;
  EXPECT_NE(log.find(" MB/s"), std::string::npos) << log;
  EXPECT_NE(log.find("ETA"), std::string::npos) << log;
  EXPECT_EQ(log.find('\r'), std::string::npos) << "no bar redraws into a file";
  EXPECT_NE(log.find("documents kept"), std::string::npos) << "the closing summary";
}

TEST_F(PrepTest, ShippedConfigsAreValid) {
  for (const auto& e : fs::directory_iterator(fs::path(SMELT_SOURCE_DIR) / "configs")) {
    if (e.path().extension() != ".toml") continue;
    std::string text = read_file(e.path());
    if (text.find("[prep") == std::string::npos) continue;
    EXPECT_EQ(run_smelt("--config " + quote(e.path().string()) + " --print-config", tmp_ / "c.log"), 0)
        << e.path() << "\n" << read_file(tmp_ / "c.log");
  }
  // configs/prep.toml documents the defaults: it must not drift from them
  fs::path defaults = fs::path(SMELT_SOURCE_DIR) / "configs" / "prep.toml";
  ASSERT_EQ(run_smelt("--print-config", tmp_ / "d.log"), 0);
  ASSERT_EQ(run_smelt("--config " + quote(defaults.string()) + " --print-config", tmp_ / "f.log"), 0);
  EXPECT_EQ(read_file(tmp_ / "d.log"), read_file(tmp_ / "f.log"));
  EXPECT_NE(read_file(tmp_ / "d.log").find("[prep.quality]"), std::string::npos);
}

TEST_F(PrepTest, UsageErrorsExitTwo) {
  EXPECT_EQ(run_smelt("--input /no/such/file --output " + quote((tmp_ / "o").string()), tmp_ / "l"), 2);
  EXPECT_NE(read_file(tmp_ / "l").find("/no/such/file"), std::string::npos);
  EXPECT_EQ(run_smelt("--output " + quote((tmp_ / "o").string()), tmp_ / "l"), 2);
  EXPECT_EQ(run_smelt("--input " + kDocs + " --output x --set prep.no_such_key=1", tmp_ / "l"), 2);
  EXPECT_NE(read_file(tmp_ / "l").find("no_such_key"), std::string::npos);
  EXPECT_EQ(run_smelt("--input " + kDocs + " --output x --set prep.read.text_unit=sentence", tmp_ / "l"), 2);
  EXPECT_NE(read_file(tmp_ / "l").find("[prep.read] text_unit = \"sentence\": expected \"file\", \"paragraph\" or \"line\""),
            std::string::npos)
      << read_file(tmp_ / "l");
  EXPECT_EQ(run_smelt("--input " + kDocs + " --output x --tasks 2 --task 5", tmp_ / "l"), 2);
  EXPECT_EQ(std::system((kSmelt + " frobnicate >/dev/null 2>&1").c_str()) >> 8, 2);
}

TEST_F(PrepTest, RefusesToMixWithADifferentRun) {
  std::string o = quote((tmp_ / "o").string());
  ASSERT_EQ(run_smelt("--input " + kDocs + "/sql-select.html --output " + o, tmp_ / "l"), 0);
  EXPECT_EQ(run_smelt("--input " + kDocs + "/sql-select.html --seed 7 --output " + o, tmp_ / "l"), 1);
  EXPECT_NE(read_file(tmp_ / "l").find("--overwrite"), std::string::npos);
  EXPECT_EQ(run_smelt("--input " + kDocs + "/sql-select.html --seed 7 --overwrite --output " + o, tmp_ / "l"), 0);
}

}  // namespace
