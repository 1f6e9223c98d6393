// `smelt prep` with the refinery's stages on, as a user runs it (the real binary): statistical
// language ID and the language filter, personal-data masking, the URL filter, decontamination,
// fastText classifiers (scores equal to fastText's own tool; a top fraction whose threshold comes
// from a score pass and does not depend on the task count), bad model and list files refused at
// start, and the same output for any thread count with every stage on.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_files.hpp"
#include "test_references.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const std::string kSmelt = SMELT_BINARY;

std::string quote(const std::string& s) { return "'" + s + "'"; }
std::string read_file(const fs::path& p) { return smelt::test::read_file(p.string()); }
void write_file(const fs::path& p, const std::string& s) { smelt::test::write_file(p.string(), s); }

int run(const std::string& cmd, const fs::path& log) {
  int rc = std::system((cmd + " >" + quote(log.string()) + " 2>&1").c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

bool have_tool(const char* name) {
  return std::system((std::string("command -v ") + name + " >/dev/null 2>&1").c_str()) == 0;
}

std::vector<json> docs_of(const fs::path& dir) {
  std::vector<json> out;
  if (!fs::is_directory(dir)) return out;
  std::vector<std::string> parts;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string n = e.path().filename().string();
    if (n.rfind("part", 0) == 0 && n.find(".tmp-") == std::string::npos) parts.push_back(e.path().string());
  }
  std::sort(parts.begin(), parts.end());
  for (const auto& p : parts) {
    FILE* f = popen(("zstdcat " + quote(p)).c_str(), "r");
    std::string text;
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
    pclose(f);
    std::stringstream ss(text);
    for (std::string line; std::getline(ss, line);) out.push_back(json::parse(line));
  }
  return out;
}

// Real paragraphs: a language's rendered manual pages (scripts/multilingual-text), one per document.
class PrepRefineryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = fs::temp_directory_path() / ("smelt-prep-refinery-" + std::to_string(getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(tmp_);
    fs::create_directories(tmp_);
    SMELT_REQUIRE_REFERENCE(fs::exists("/usr/share/man/de") && fs::exists("/usr/share/man/fr"),
                            "Debian's translated manual pages (scripts/install-deps: manpages-de, manpages-fr, ...)");
    const std::string script = std::string(SMELT_SOURCE_DIR) + "/scripts/multilingual-text";
    ASSERT_EQ(run(script + " " + quote((tmp_ / "ml").string()) + " 6 --langs en,de,fr,ru,zh", tmp_ / "ml.log"), 0)
        << read_file(tmp_ / "ml.log");
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(tmp_);
  }

  // One JSONL document per rendered page: id LANG-N, url https://LANG.example.org/N.
  fs::path corpus(const std::vector<std::string>& extra_lines = {}) {
    std::string out;
    for (const char* lang : {"en", "de", "fr", "ru", "zh"}) {
      std::vector<fs::path> pages;
      for (const auto& e : fs::directory_iterator(tmp_ / "ml" / lang)) pages.push_back(e.path());
      std::sort(pages.begin(), pages.end());
      for (size_t i = 0; i < pages.size(); ++i)
        out += json{{"id", fmt(lang, i)}, {"url", "https://" + std::string(lang) + ".example.org/" + std::to_string(i)},
                    {"text", read_file(pages[i])}}
                   .dump() +
               "\n";
    }
    for (const auto& l : extra_lines) out += l + "\n";
    fs::path p = tmp_ / "in.jsonl";
    write_file(p, out);
    return p;
  }
  static std::string fmt(const char* lang, size_t i) { return std::string(lang) + "-" + std::to_string(i); }

  // smelt prep over in with the given config text; returns the exit code.
  int prep(const fs::path& in, const std::string& config, const std::string& out, const std::string& extra = "",
           int threads = 2) {
    write_file(tmp_ / (out + ".toml"), config);
    return run(kSmelt + " prep --input " + quote(in.string()) + " --output " + quote((tmp_ / out).string()) +
                   " --config " + quote((tmp_ / (out + ".toml")).string()) + " --threads " + std::to_string(threads) +
                   " " + extra,
               tmp_ / (out + ".log"));
  }
  std::string log(const std::string& out) { return read_file(tmp_ / (out + ".log")); }
  json stats(const std::string& out) { return json::parse(read_file(tmp_ / out / "stats.json")); }

  fs::path tmp_;
};

// The base config the tests start from: no sampling or dedup, so what drops is what the test sets up.
const std::string kBase = "[prep]\nseed = 1\n[prep.sample]\nenabled = false\n[prep.dedup]\nenabled = false\n"
                          "[prep.quality]\nmin_words = 1\n";

TEST_F(PrepRefineryTest, LanguagesAreIdentifiedAndFiltered) {
  fs::path in = corpus();
  ASSERT_EQ(prep(in, kBase, "all"), 0) << log("all");
  std::map<std::string, std::string> lang_of;
  for (const json& d : docs_of(tmp_ / "all")) {
    lang_of[d["id"]] = d["quality"]["lang"];
    EXPECT_GE(d["quality"]["lang_score"].get<double>(), 0.0);
    EXPECT_LE(d["quality"]["lang_score"].get<double>(), 1.0);
  }
  int right = 0;
  for (const auto& [id, lang] : lang_of) right += id.substr(0, 2) == lang;
  EXPECT_GE(right, static_cast<int>(lang_of.size()) - 1) << "documents whose language CLD2 got right";
  json s = stats("all");
  for (const char* l : {"en", "de", "fr", "ru", "zh"}) EXPECT_GE(s["languages"][l]["in"].get<int>(), 5) << l;

  // [prep] languages keeps those; the rest drop as wrong_language, counted
  ASSERT_EQ(prep(in, kBase, "de", "--set 'prep.languages=[\"de\",\"fr\"]'"), 0) << log("de");
  for (const json& d : docs_of(tmp_ / "de")) {
    const std::string l = d["quality"]["lang"];
    EXPECT_TRUE(l == "de" || l == "fr") << d["id"];
  }
  s = stats("de");
  EXPECT_GE(s["drops"]["wrong_language"].get<int>(), 15);
  EXPECT_NE(log("de").find("languages (in/out):"), std::string::npos);
  // a minimum score no guess reaches drops every document as language_unsure
  ASSERT_EQ(prep(in, kBase + "[prep.language]\nmin_score = { default = 1.01 }\n", "unsure"), 2) << log("unsure");
  ASSERT_EQ(prep(in, kBase + "[prep.language]\nmin_score = { default = 0.99, en = 0.0 }\n", "unsure"), 0)
      << log("unsure");
  s = stats("unsure");
  EXPECT_GT(s["drops"]["language_unsure"].get<int>(), 0);
  for (const json& d : docs_of(tmp_ / "unsure"))
    EXPECT_TRUE(d["quality"]["lang"] == "en" || d["quality"]["lang_score"].get<double>() >= 0.99) << d["id"];
}

// A labelled crawl (`--labels`): the tally of the drop decision per kind is what the config makes
// it. English and Chinese pages are wanted; German, French and Russian pages, copies of English
// pages under other URLs, and three-word pages are noise.
TEST_F(PrepRefineryTest, LabelledCrawlTalliesTheDropDecisionPerKind) {
  std::vector<std::string> extra;
  std::string labels;
  for (const char* lang : {"en", "de", "fr", "ru", "zh"})
    for (int i = 0; i < 6; ++i) {
      const bool wanted = std::string(lang) == "en" || std::string(lang) == "zh";
      labels += json{{"url", "http://" + std::string(lang) + ".example.org:80/" + std::to_string(i)},
                     {"kind", wanted ? "good" : "foreign"}}.dump() + "\n";
    }
  std::vector<fs::path> en;
  for (const auto& e : fs::directory_iterator(tmp_ / "ml" / "en")) en.push_back(e.path());
  std::sort(en.begin(), en.end());
  for (size_t i = 0; i < en.size(); ++i) {
    extra.push_back(json{{"id", "copy-" + std::to_string(i)}, {"url", "https://mirror.example.net/" + std::to_string(i)},
                         {"text", read_file(en[i])}}.dump());
    labels += json{{"id", "copy-" + std::to_string(i)}, {"kind", "mirror"}}.dump() + "\n";
  }
  for (int i = 0; i < 4; ++i) {
    extra.push_back(json{{"id", "short-" + std::to_string(i)}, {"text", "Page not found " + std::to_string(i)}}.dump());
    labels += json{{"id", "short-" + std::to_string(i)}, {"kind", "short"}}.dump() + "\n";
  }
  extra.push_back(json{{"id", "nobody"}, {"text", read_file(en[0]) + " and one more line"}}.dump());
  write_file(tmp_ / "labels.jsonl", labels);
  const fs::path in = corpus(extra);
  const std::string config = "[prep]\nseed = 1\nlanguages = [\"en\", \"zh\"]\n[prep.sample]\nenabled = false\n"
                             "[prep.quality]\nmin_chars = 40\n";
  const std::string flag = "--labels " + quote((tmp_ / "labels.jsonl").string());
  ASSERT_EQ(prep(in, config, "lab", flag), 0) << log("lab");
  const json l = stats("lab")["labels"];
  ASSERT_TRUE(l.is_object()) << stats("lab").dump(1);
  EXPECT_EQ(l["file"], (tmp_ / "labels.jsonl").string());
  const json& k = l["kinds"];
  EXPECT_EQ(k["good"]["documents"], 12);
  EXPECT_LE(k["good"]["dropped"].get<int>(), 1) << k.dump(1);  // CLD2 may miss one page
  EXPECT_EQ(k["foreign"]["documents"], 18);
  EXPECT_GE(k["foreign"]["reasons"].value("wrong_language", 0), 17) << k.dump(1);
  EXPECT_EQ(k["mirror"]["documents"], 6);
  EXPECT_EQ(k["mirror"]["dropped"], 6) << k.dump(1);
  EXPECT_EQ(k["mirror"]["reasons"].value("exact_duplicate", 0), 6) << k.dump(1);
  EXPECT_EQ(k["short"]["documents"], 4);
  EXPECT_EQ(k["short"]["reasons"].value("too_short", 0), 4) << k.dump(1);
  EXPECT_EQ(l["unlabelled"], 1);
  // the decision's totals follow from the kinds
  const int noise_dropped = k["foreign"]["dropped"].get<int>() + 10;
  const int good_dropped = k["good"]["dropped"].get<int>();
  EXPECT_DOUBLE_EQ(l["drop_decision"]["recall"].get<double>(), noise_dropped / 28.0);
  EXPECT_DOUBLE_EQ(l["drop_decision"]["precision"].get<double>(), noise_dropped / double(noise_dropped + good_dropped));
  EXPECT_NE(log("lab").find("the drop decision per kind"), std::string::npos) << log("lab");
  EXPECT_NE(log("lab").find("mirror"), std::string::npos) << log("lab");

  // other settings, another tally: every language and no dedup keep the foreign pages and copies
  ASSERT_EQ(prep(in, config + "[prep.dedup]\nenabled = false\n", "lab2", flag + " --set 'prep.languages=[]'"), 0)
      << log("lab2");
  const json k2 = stats("lab2")["labels"]["kinds"];
  EXPECT_EQ(k2["foreign"]["dropped"], 0) << k2.dump(1);
  EXPECT_EQ(k2["mirror"]["dropped"], 0) << k2.dump(1);
  EXPECT_EQ(k2["short"]["reasons"].value("too_short", 0), 4) << k2.dump(1);
  // a missing labels file is a usage error naming it
  EXPECT_EQ(prep(in, config, "lab3", "--labels " + quote((tmp_ / "none.jsonl").string())), 2);
  EXPECT_NE(log("lab3").find("none.jsonl: no such file"), std::string::npos) << log("lab3");
}

// Score sampling draws by content: a copy of a page on another host meets the same fate as the
// page (drawn by page, each copy drew on its own and a mirror outlived its sampled-out original).
TEST_F(PrepRefineryTest, SamplingDrawsByContentSoCopiesShareTheirFate) {
  std::vector<std::string> copies;
  for (const char* lang : {"en", "de", "fr", "ru", "zh"}) {
    std::vector<fs::path> pages;
    for (const auto& e : fs::directory_iterator(tmp_ / "ml" / lang)) pages.push_back(e.path());
    std::sort(pages.begin(), pages.end());
    for (size_t i = 0; i < pages.size(); ++i)
      copies.push_back(json{{"id", "copy-" + fmt(lang, i)}, {"url", "http://mirror.example.net/" + fmt(lang, i)},
                            {"text", read_file(pages[i])}}.dump());
  }
  const fs::path in = corpus(copies);
  // every page scores at most 0.7 (too few words for the minimum, floored at 0.7), so every page
  // draws with about even odds; no dedup, so each copy stands on its own draw
  const std::string config =
      "[prep]\nseed = 1\n[prep.sample]\nthreshold = 1.0\n[prep.dedup]\nenabled = false\n"
      "[prep.quality]\nmin_words = 100000\nzh_min_words = 200000\npenalty_floor = 0.7\n";
  ASSERT_EQ(prep(in, config, "s"), 0) << log("s");
  std::set<std::string> kept;
  for (const json& d : docs_of(tmp_ / "s")) kept.insert(d["id"].get<std::string>());
  int both = 0, none = 0;
  for (const char* lang : {"en", "de", "fr", "ru", "zh"})
    for (size_t i = 0; i < 6; ++i) {
      const bool a = kept.count(fmt(lang, i)) > 0, b = kept.count("copy-" + fmt(lang, i)) > 0;
      EXPECT_EQ(a, b) << fmt(lang, i);
      both += a && b, none += !a && !b;
    }
  EXPECT_GT(none, 0) << "sampling dropped none: the test does not exercise it";
  EXPECT_GT(both, 0);
  EXPECT_EQ(stats("s")["drops"].value("sampled_out", 0), 2 * none);
}

TEST_F(PrepRefineryTest, PersonalDataIsMaskedAndCounted) {
  const std::string text =
      "Write to jane.doe@example.com or to the list at dev-list@lists.debian.org for help with the package. "
      "The mirror answers at 81.2.69.160 and at 2a00:1450:4001:82b::200e when the main host is down.";
  fs::path in = corpus({json{{"id", "pii"}, {"text", text}}.dump()});
  ASSERT_EQ(prep(in, kBase, "pii"), 0) << log("pii");
  bool seen = false;
  for (const json& d : docs_of(tmp_ / "pii")) {
    if (d["id"] != "pii") continue;
    seen = true;
    const std::string t = d["text"];
    EXPECT_EQ(t.find("jane.doe@example.com"), std::string::npos) << t;
    EXPECT_EQ(t.find("dev-list@"), std::string::npos) << t;
    EXPECT_EQ(t.find("81.2.69.160"), std::string::npos) << t;
    EXPECT_EQ(t.find("2a00:1450"), std::string::npos) << t;
  }
  EXPECT_TRUE(seen);
  json s = stats("pii");
  EXPECT_GE(s["pii_masked"]["emails"].get<int>(), 2);
  EXPECT_GE(s["pii_masked"]["ipv4"].get<int>(), 1);
  EXPECT_GE(s["pii_masked"]["ipv6"].get<int>(), 1);
  // switched off: the text stays as it was
  ASSERT_EQ(prep(in, kBase + "[prep.pii]\nenabled = false\n", "nopii"), 0) << log("nopii");
  for (const json& d : docs_of(tmp_ / "nopii"))
    if (d["id"] == "pii") EXPECT_EQ(d["text"], text);
}

TEST_F(PrepRefineryTest, UrlListsDropPagesCountedPerListAndCategory) {
  fs::path in = corpus();
  fs::create_directories(tmp_ / "ut1" / "adult");
  fs::create_directories(tmp_ / "ut1" / "shop");
  write_file(tmp_ / "ut1" / "adult" / "domains", "# comment\nde.example.org\n");
  write_file(tmp_ / "ut1" / "shop" / "urls", "fr.example.org/1\n");
  const std::string cfg = kBase + "[prep.url_filter]\nblocklists = [\"" + (tmp_ / "ut1").string() +
                          "\"]\nallow_domains = [\"www.ru.example.org\"]\nblock_domains = [\"RU.example.org\"]\n";
  ASSERT_EQ(prep(in, cfg, "url", "--keep-rejected 2"), 0) << log("url");
  std::set<std::string> kept;
  for (const json& d : docs_of(tmp_ / "url")) kept.insert(d["id"]);
  for (const auto& id : kept) EXPECT_NE(id.substr(0, 2), "de") << id;
  EXPECT_EQ(kept.count("fr-1"), 0u);
  EXPECT_EQ(kept.count("fr-0"), 1u);
  // the allow list wins: "www." is no part of a host, so www.ru.example.org allows ru.example.org
  // although block_domains names it (in upper case)
  EXPECT_EQ(kept.count("ru-0"), 1u);
  json s = stats("url");
  EXPECT_GE(s["url_blocked"]["ut1/adult"].get<int>(), 5) << s["url_blocked"].dump();
  EXPECT_EQ(s["url_blocked"]["ut1/shop"].get<int>(), 1) << s["url_blocked"].dump();
  EXPECT_EQ(s["drops"]["url_blocked"].get<int>(), s["url_blocked"]["ut1/adult"].get<int>() + 1 +
                                                      s["url_blocked"].value("block_domains", 0));
  EXPECT_TRUE(fs::exists(tmp_ / "url" / "rejected" / "url_blocked.jsonl"));
  // the lists' contents are in the resume fingerprint: the same command is "already complete",
  // a changed list makes the folder another run's
  ASSERT_EQ(prep(in, cfg, "url", "--keep-rejected 2"), 0) << log("url");
  EXPECT_NE(log("url").find("already complete"), std::string::npos) << log("url");
  write_file(tmp_ / "ut1" / "adult" / "domains", "# comment\nde.example.org\nfr.example.org\n");
  ASSERT_EQ(prep(in, cfg, "url", "--keep-rejected 2"), 1) << log("url");
  EXPECT_NE(log("url").find("holds a prep run with other inputs or settings"), std::string::npos) << log("url");
  // a missing list: refused at start, naming it, before any output part
  ASSERT_EQ(prep(in, kBase + "[prep.url_filter]\nblocklists = [\"" + (tmp_ / "nope").string() + "\"]\n", "bad"), 1)
      << log("bad");
  EXPECT_NE(log("bad").find((tmp_ / "nope").string()), std::string::npos) << log("bad");
  EXPECT_TRUE(docs_of(tmp_ / "bad").empty());
}

TEST_F(PrepRefineryTest, BenchmarkTextIsRemovedWhateverItsCaseAndSpacing) {
  const std::string bench =
      "The quick brown fox jumps over the lazy dog while the committee reviews every proposal submitted "
      "before the deadline of the annual meeting in the old town hall.";
  write_file(tmp_ / "bench.jsonl", json{{"question", bench}, {"answer", "yes"}}.dump() + "\n");
  std::string planted = "Minutes of the evening.\n\nTHE QUICK  brown fox jumps\tover the LAZY dog, while the "
                        "committee reviews every proposal\nsubmitted before the deadline of the annual meeting.";
  fs::path in = corpus({json{{"id", "planted"}, {"text", planted}}.dump()});
  const std::string cfg = kBase + "[prep.decontaminate]\nfiles = [\"" + (tmp_ / "bench.jsonl").string() + "\"]\n";
  ASSERT_EQ(prep(in, cfg, "dc"), 0) << log("dc");
  for (const json& d : docs_of(tmp_ / "dc")) EXPECT_NE(d["id"], "planted");
  json s = stats("dc");
  EXPECT_EQ(s["drops"]["contaminated"], 1);
  EXPECT_EQ(s["contaminated"][(tmp_ / "bench.jsonl").string()], 1);
  // flag: kept, marked
  ASSERT_EQ(prep(in, cfg + "action = \"flag\"\n", "flag"), 0) << log("flag");
  int flagged = 0;
  for (const json& d : docs_of(tmp_ / "flag"))
    if (d["quality"].contains("contaminated")) {
      flagged++;
      EXPECT_EQ(d["id"], "planted");
    }
  EXPECT_EQ(flagged, 1);
}

// A fastText classifier trained by fastText's own tool: English (label en) against everything else.
class PrepClassifierTest : public PrepRefineryTest {
 protected:
  void SetUp() override {
    PrepRefineryTest::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    SMELT_REQUIRE_REFERENCE(have_tool("fasttext"), "fastText's command-line tool (Debian: fasttext)");
    std::string train;
    for (const char* lang : {"en", "de", "fr", "ru", "zh"})
      for (const auto& e : fs::directory_iterator(tmp_ / "ml" / lang)) {
        std::string t = read_file(e.path());
        for (char& c : t)
          if (c == '\n' || c == '\r') c = ' ';
        train += std::string("__label__") + (std::string(lang) == "en" ? "en" : "xx") + " " + t + "\n";
      }
    write_file(tmp_ / "train.txt", train);
    ASSERT_EQ(run("fasttext supervised -input " + quote((tmp_ / "train.txt").string()) + " -output " +
                      quote((tmp_ / "cls").string()) + " -dim 16 -epoch 50 -lr 1.0 -wordNgrams 2 -thread 1 -seed 3",
                  tmp_ / "ft.log"),
              0)
        << read_file(tmp_ / "ft.log");
    model_ = (tmp_ / "cls.bin").string();
  }
  std::string cls(const std::string& extra) {
    return kBase + "[[prep.classifiers]]\nname = \"eng\"\nmodel = \"" + model_ + "\"\nlabel = \"en\"\n" + extra;
  }
  std::string model_;
};

TEST_F(PrepClassifierTest, ScoresEqualFastTextsOwnTool) {
  fs::path in = corpus();
  // the classifier reads the text before personal data is masked: unmasked, the output is its input
  ASSERT_EQ(prep(in, cls("") + "[prep.pii]\nenabled = false\n", "c"), 0) << log("c");
  std::vector<json> docs = docs_of(tmp_ / "c");
  ASSERT_GE(docs.size(), 25u);
  // the tool's probability of __label__en for each document, on the line Smelt feeds it
  std::string lines;
  for (const json& d : docs) {
    std::string t = d["text"];
    for (char& c : t)
      if (c == '\n' || c == '\r') c = ' ';
    lines += t + "\n";
  }
  write_file(tmp_ / "docs.txt", lines);
  int rc = 0;
  std::istringstream pred(smelt::test::run_command(
      "fasttext predict-prob " + quote(model_) + " " + quote((tmp_ / "docs.txt").string()) + " 2", rc));
  ASSERT_EQ(rc, 0);
  size_t i = 0;
  for (std::string line; std::getline(pred, line); ++i) {
    ASSERT_LT(i, docs.size());
    std::istringstream ss(line);
    std::string label;
    double p = 0, p_en = 0;
    while (ss >> label >> p)
      if (label == "__label__en") p_en = p;
    EXPECT_NEAR(docs[i]["quality"]["classifiers"]["eng"].get<double>(), p_en, 1e-4) << docs[i]["id"];
  }
  EXPECT_EQ(i, docs.size());
  // min: a hard filter
  ASSERT_EQ(prep(in, cls("min = 0.5\n"), "min"), 0) << log("min");
  for (const json& d : docs_of(tmp_ / "min")) EXPECT_GE(d["quality"]["classifiers"]["eng"].get<double>(), 0.5);
  EXPECT_GT(stats("min")["drops"]["classifier_eng"].get<int>(), 10);
}

TEST_F(PrepClassifierTest, TopFractionThresholdComesFromAScorePassWhateverTheTasks) {
  fs::path in = corpus();
  // one score pass in one task, one in two tasks over two input files
  ASSERT_EQ(prep(in, cls(""), "s1", "--only score"), 0) << log("s1");
  EXPECT_TRUE(fs::exists(tmp_ / "s1" / "scores.json"));
  EXPECT_TRUE(docs_of(tmp_ / "s1").empty());
  // a classifier that learned something: its scores spread over many bins (one trained too briefly
  // gives every page 0.5, and then no top fraction exists to keep)
  EXPECT_GE(json::parse(read_file(tmp_ / "s1" / "scores.json"))["histograms"]["classifiers"]["eng"].size(), 10u);
  std::string all = read_file(in);
  std::istringstream ss(all);
  std::string a, b, line;
  for (int n = 0; std::getline(ss, line); ++n) (n % 2 ? a : b) += line + "\n";
  fs::create_directories(tmp_ / "split");
  write_file(tmp_ / "split" / "a.jsonl", a);
  write_file(tmp_ / "split" / "b.jsonl", b);
  for (int t = 0; t < 2; ++t)
    ASSERT_EQ(prep(tmp_ / "split", cls(""), "s2", "--only score --tasks 2 --task " + std::to_string(t)), 0)
        << log("s2");
  // the real pass: the same threshold from either score pass, the top ~20% kept
  const std::string top = cls("keep_top_fraction = 0.2\n");
  ASSERT_EQ(prep(in, top, "t1", "--set prep.scores=" + quote((tmp_ / "s1").string())), 0) << log("t1");
  ASSERT_EQ(prep(in, top, "t2", "--set prep.scores=" + quote((tmp_ / "s2").string())), 0) << log("t2");
  std::vector<json> d1 = docs_of(tmp_ / "t1"), d2 = docs_of(tmp_ / "t2");
  ASSERT_EQ(d1.size(), d2.size());
  for (size_t i = 0; i < d1.size(); ++i) EXPECT_EQ(d1[i]["id"], d2[i]["id"]);
  json s = stats("t1");
  const double read = s["documents"]["read"], kept = s["documents"]["kept"];
  EXPECT_LE(kept, 0.2 * read + 1);
  EXPECT_GE(kept, 1);
  // without a score pass: refused at start, saying what to run
  ASSERT_EQ(prep(in, top, "none"), 1) << log("none");
  EXPECT_NE(log("none").find("--only score"), std::string::npos) << log("none");
}

TEST_F(PrepClassifierTest, BadModelsAreRefusedAtStartNamingTheFile) {
  fs::path in = corpus();
  write_file(tmp_ / "junk.bin", "not a model at all");
  std::string junk = kBase + "[[prep.classifiers]]\nname = \"j\"\nmodel = \"" + (tmp_ / "junk.bin").string() +
                     "\"\nlabel = \"en\"\n";
  ASSERT_EQ(prep(in, junk, "junk"), 1) << log("junk");
  EXPECT_NE(log("junk").find((tmp_ / "junk.bin").string() + ": not a fastText model file"), std::string::npos)
      << log("junk");
  EXPECT_TRUE(docs_of(tmp_ / "junk").empty());
  std::string bad_label = kBase + "[[prep.classifiers]]\nname = \"j\"\nmodel = \"" + model_ + "\"\nlabel = \"hq\"\n";
  ASSERT_EQ(prep(in, bad_label, "label"), 1) << log("label");
  EXPECT_NE(log("label").find("has no label \"hq\" (its labels: "), std::string::npos) << log("label");
  ASSERT_EQ(prep(in, kBase + "[prep.language]\nmodel = \"" + (tmp_ / "nope.bin").string() + "\"\n", "lid"), 2)
      << log("lid");
  EXPECT_NE(log("lid").find((tmp_ / "nope.bin").string()), std::string::npos) << log("lid");
}

TEST_F(PrepClassifierTest, EveryStageOnGivesTheSameOutputForAnyThreadCount) {
  write_file(tmp_ / "bench.txt", "the committee reviews every proposal submitted before the deadline of the annual "
                                 "meeting in the old town hall\n");
  fs::path in = corpus({json{{"id", "p"}, {"text", "Mail admin@example.org about 10.0.0.1 please."}}.dump()});
  const std::string cfg = cls("factor = true\n") + "[prep.decontaminate]\nfiles = [\"" +
                          (tmp_ / "bench.txt").string() + "\"]\n[prep.url_filter]\nblock_domains = [\"zh.example.org\"]\n";
  const std::string on = "--set prep.sample.enabled=true --set prep.dedup.enabled=true";
  ASSERT_EQ(prep(in, cfg, "one", on, 1), 0) << log("one");
  ASSERT_EQ(prep(in, cfg, "two", on, 2), 0) << log("two");
  std::vector<json> a = docs_of(tmp_ / "one"), b = docs_of(tmp_ / "two");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].dump(), b[i].dump());
  json sa = stats("one"), sb = stats("two");
  sa.erase("timing"), sb.erase("timing"), sa["config"].erase("prep"), sb["config"].erase("prep");
  EXPECT_EQ(sa.dump(), sb.dump());
  // the summary gives each stage's share of the workers' time
  EXPECT_NE(log("one").find("worker time by stage:"), std::string::npos) << log("one");
  EXPECT_TRUE(stats("one")["timing"]["worker_seconds_by_stage"].contains("classifiers"));
}

}  // namespace
