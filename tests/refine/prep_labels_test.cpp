// A labelled crawl's labels: the file's lines (by URL whatever the scheme or port, by id), its
// errors naming the file and line, and the tally of the drop decision (per-kind recall and
// precision, the whole decision's precision, recall and the wanted pages kept) counted by hand.
// prep_refinery_test runs the tally through `smelt prep --labels` on real pages.
#include "smelt/refine/prep_labels.hpp"

#include <filesystem>

#include <gtest/gtest.h>

#include "test_files.hpp"
#include "train_test_util.hpp"

namespace smelt {
namespace {

namespace fs = std::filesystem;

fs::path write_labels(const std::string& name, const std::string& text) {
  static const fs::path dir = test::fresh_test_dir("prep-labels");
  const fs::path p = dir / name;
  test::write_file(p.string(), text);
  return p;
}

TEST(PrepLabels, MatchByPageThenById) {
  PrepLabels l;
  ASSERT_TRUE(l.load(write_labels("a.jsonl", "{\"url\": \"https://Docs.Example:8443/a?x=1#top\", \"kind\": \"good\"}\n"
                                             "\n"
                                             "{\"id\": \"rec-7\", \"kind\": \"spam\"}\n"
                                             "{\"url\": \"http://m.example/b\", \"kind\": \"mirror\", \"keep\": false}\n"
                                             "{\"url\": \"http://ok.example/\", \"kind\": \"fine\", \"keep\": true}\n"
                                             "{\"url\": \"http://both.example/\", \"id\": \"rec-9\", \"kind\": \"spam\"}\n")
                  .string())
                  .is_ok());
  ASSERT_EQ(l.kinds(), (std::vector<std::string>{"good", "spam", "mirror", "fine"}));
  EXPECT_TRUE(l.wanted(0));
  EXPECT_FALSE(l.wanted(1));
  EXPECT_FALSE(l.wanted(2));
  EXPECT_TRUE(l.wanted(3));
  EXPECT_EQ(l.find("http://docs.example/a?x=1", ""), 0) << "the page, whatever the scheme, port, case or fragment";
  EXPECT_EQ(l.find("https://other.example/", "rec-7"), 1) << "an unknown URL falls back to the id";
  EXPECT_EQ(l.find("", "rec-7"), 1);
  EXPECT_EQ(l.find("http://m.example/b", "x"), 2);
  EXPECT_EQ(l.find("http://m.example/c", "rec-8"), -1);
  EXPECT_EQ(l.find("http://both.example/", ""), 1);
  EXPECT_EQ(l.find("", "rec-9"), 1);
  EXPECT_EQ(l.labelled(), 5u) << "label lines, a line with a url and an id counted once";
}

TEST(PrepLabels, BadFilesNameTheFileAndLine) {
  struct Case { const char* text; const char* says; };
  for (const Case& c : {Case{"{\"url\": \"http://a/\", \"kind\": \"good\"}\nnot json\n", "line 2: expected a JSON object"},
                        Case{"{\"kind\": \"good\"}\n", "line 1: expected \"url\" or \"id\""},
                        Case{"{\"url\": \"http://a/\"}\n", "line 1: expected \"kind\""},
                        Case{"{\"url\": 3, \"kind\": \"good\"}\n", "line 1: \"url\" must be a string"},
                        Case{"{\"url\": \"http://a/\", \"kind\": \"x\", \"keep\": \"no\"}\n", "\"keep\" must be true or false"},
                        Case{"{\"url\": \"http://a/\", \"kind\": \"x\"}\n{\"url\": \"http://b/\", \"kind\": \"x\", \"keep\": true}\n",
                             "line 2: kind \"x\" is keep = true here but false on an earlier line"},
                        Case{"\n\n", "no labels"}}) {
    const fs::path p = write_labels("bad.jsonl", c.text);
    PrepLabels l;
    Status s = l.load(p.string());
    ASSERT_FALSE(s.is_ok()) << c.text;
    EXPECT_NE(s.message().find(p.string()), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(c.says), std::string::npos) << s.message();
  }
  PrepLabels l;
  EXPECT_NE(l.load("/nonexistent/labels.jsonl").message().find("cannot open"), std::string::npos);
}

TEST(PrepLabels, TallyGivesRecallAndPrecisionPerKind) {
  PrepLabels l;
  ASSERT_TRUE(l.load(write_labels("t.jsonl", "{\"id\": \"g\", \"kind\": \"good\"}\n{\"id\": \"s\", \"kind\": \"spam\"}\n"
                                             "{\"id\": \"m\", \"kind\": \"mirror\"}\n")
                         .string())
                  .is_ok());
  LabelTally t;
  // 10 good pages, 2 of them dropped; 8 spam, 6 dropped; 4 mirrors, all dropped; 3 unlabelled
  for (int i = 0; i < 10; ++i) t.add(l, 0, i < 2 ? "sampled_out" : "");
  for (int i = 0; i < 8; ++i) t.add(l, 1, i < 5 ? "gopher" : i < 6 ? "sampled_out" : "");
  for (int i = 0; i < 4; ++i) t.add(l, 2, "exact_duplicate");
  for (int i = 0; i < 3; ++i) t.add(l, -1, "");
  const nlohmann::json j = t.to_json();
  EXPECT_EQ(j["kinds"]["good"]["documents"], 10);
  EXPECT_EQ(j["kinds"]["good"]["dropped"], 2);
  EXPECT_FALSE(j["kinds"]["good"].contains("precision"));
  EXPECT_DOUBLE_EQ(j["kinds"]["spam"]["drop_rate"].get<double>(), 6.0 / 8);
  EXPECT_DOUBLE_EQ(j["kinds"]["spam"]["precision"].get<double>(), 6.0 / (6 + 2));
  EXPECT_EQ(j["kinds"]["spam"]["reasons"]["gopher"], 5);
  EXPECT_DOUBLE_EQ(j["kinds"]["mirror"]["precision"].get<double>(), 4.0 / (4 + 2));
  EXPECT_DOUBLE_EQ(j["drop_decision"]["precision"].get<double>(), 10.0 / 12);
  EXPECT_DOUBLE_EQ(j["drop_decision"]["recall"].get<double>(), 10.0 / 12);
  EXPECT_DOUBLE_EQ(j["drop_decision"]["wanted_kept"].get<double>(), 0.8);
  EXPECT_EQ(j["unlabelled"], 3);
  // the resume state round-trips it
  LabelTally back;
  back.from_json(j);
  EXPECT_EQ(back.to_json(), j);
  const std::string text = t.summary_text("t.jsonl");
  EXPECT_NE(text.find("good (wanted)"), std::string::npos) << text;
  EXPECT_NE(text.find("75.0%"), std::string::npos) << text;  // spam's recall
  EXPECT_NE(text.find("precision 83.3%, recall 83.3%; wanted pages kept 80.0%; 3 document(s) carried no label"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace smelt
