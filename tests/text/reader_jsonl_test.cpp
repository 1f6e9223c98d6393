// reader_jsonl.cpp: documents built from real text (JSON written by nlohmann_json, an independent
// writer) come back field for field; malformed, non-object, text-less and non-UTF-8 lines between
// good ones are reported by line and skipped (or repaired); zstd multi-frame and truncated inputs.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "reader_test_util.hpp"

using namespace smelt;
using namespace smelt::test;
using nlohmann::json;

namespace {

// Paragraphs of real documentation, English and Chinese.
std::vector<std::string> paragraphs() {
  std::vector<std::string> out;
  for (std::string f : {"python3.11-doc/html/_sources/bugs.rst.txt",
                        "linux-doc-6.1/html/_sources/translations/zh_CN/index.rst.txt"}) {
    const std::string s = doc_file(f);
    size_t pos = 0;
    while (pos < s.size()) {
      size_t e = s.find("\n\n", pos);
      if (e == std::string::npos) e = s.size();
      if (e > pos) out.push_back(s.substr(pos, e - pos));
      pos = e + 2;
    }
  }
  return out;
}

}  // namespace

TEST(ReaderJsonl, FieldsComeBackAndOtherFieldsGoToMeta) {
  TempDir dir;
  const auto paras = paragraphs();
  std::string file;
  for (size_t i = 0; i < paras.size(); ++i) {
    json j;
    j["text"] = paras[i];
    if (i % 3 == 0) j["id"] = "doc-" + std::to_string(i);
    if (i % 3 == 1) j["id"] = i * 1000;
    j["url"] = "https://docs.python.org/3/bugs.html#p" + std::to_string(i);
    j["quality"] = 0.5;
    j["tags"] = json::array({"docs", i});
    j["nested"] = {{"a", nullptr}, {"b", "中文"}};
    file += j.dump() + "\n";
  }
  write_file(dir.file("docs.jsonl"), file);
  Drained d = drain(dir.file("docs.jsonl"));
  EXPECT_EQ(d.format, InputFormat::kJsonl);
  EXPECT_TRUE(d.issues.empty());
  ASSERT_EQ(d.docs.size(), paras.size());
  for (size_t i = 0; i < paras.size(); ++i) {
    const RawDoc& doc = d.docs[i];
    EXPECT_EQ(doc.text, paras[i]);
    const std::string where = dir.file("docs.jsonl") + ":" + std::to_string(i + 1);
    EXPECT_EQ(doc.source, where);
    if (i % 3 == 0) EXPECT_EQ(doc.id, "doc-" + std::to_string(i));
    if (i % 3 == 1) EXPECT_EQ(doc.id, std::to_string(i * 1000));
    if (i % 3 == 2) EXPECT_EQ(doc.id, where);
    EXPECT_EQ(doc.url, "https://docs.python.org/3/bugs.html#p" + std::to_string(i));
    EXPECT_EQ(doc.record, i);
    EXPECT_FALSE(doc.is_html);
    json meta = json::parse(doc.meta_json);
    EXPECT_EQ(meta, json({{"quality", 0.5}, {"tags", json::array({"docs", i})},
                          {"nested", {{"a", nullptr}, {"b", "中文"}}}}));
  }
}

TEST(ReaderJsonl, CustomFieldNamesAndBlankLines) {
  TempDir dir;
  write_file(dir.file("c.ndjson"),
             "\n{\"content\": \"alpha\", \"uid\": 7, \"link\": \"http://a\", \"text\": \"other\"}\n"
             "   \r\n\n{\"content\": \"beta\\nline\"}\r\n");
  ReaderOptions opt;
  opt.text_field = "content";
  opt.id_field = "uid";
  opt.url_field = "link";
  Drained d = drain(dir.file("c.ndjson"), opt);
  EXPECT_TRUE(d.issues.empty());
  ASSERT_EQ(d.docs.size(), 2u);
  EXPECT_EQ(d.docs[0].text, "alpha");
  EXPECT_EQ(d.docs[0].id, "7");
  EXPECT_EQ(d.docs[0].url, "http://a");
  EXPECT_EQ(d.docs[0].meta_json, "{\"text\":\"other\"}");
  EXPECT_EQ(d.docs[1].text, "beta\nline");
  EXPECT_EQ(d.docs[1].source, dir.file("c.ndjson") + ":5");
  EXPECT_EQ(d.docs[1].meta_json, "{}");
}

TEST(ReaderJsonl, BadLinesBetweenGoodOnesAreReportedByLineAndSkipped) {
  TempDir dir;
  write_file(dir.file("bad.jsonl"),
             "{\"text\": \"good one\"}\n"                       // 1
             "{\"text\": \"unterminated}\n"                     // 2 invalid
             "[\"an\", \"array\"]\n"                            // 3 not an object
             "{\"body\": \"no text field\"}\n"                  // 4 missing text
             "{\"text\": 42}\n"                                 // 5 text not a string
             "{\"text\": \"good two\"} trailing\n"              // 6 invalid
             "{\"text\": \"caf\xe9\", \"lang\": \"fr\"}\n"      // 7 invalid UTF-8: repaired, kept
             "not json at all\n"                                // 8 invalid
             "{\"text\": \"good three\"}");                     // 9, no final newline
  Drained d = drain(dir.file("bad.jsonl"));
  EXPECT_EQ(d.texts(), (std::vector<std::string>{"good one", "caf\xEF\xBF\xBD", "good three"}));
  EXPECT_EQ(d.docs[1].meta_json, "{\"lang\":\"fr\"}");
  std::vector<std::pair<uint64_t, std::string>> got;
  for (const auto& i : d.issues) got.emplace_back(i.line, i.reason);
  EXPECT_EQ(got, (std::vector<std::pair<uint64_t, std::string>>{
                     {2, "invalid_json"}, {3, "invalid_json"}, {4, "missing_text_field"},
                     {5, "missing_text_field"}, {6, "invalid_json"}, {7, "invalid_utf8"}, {8, "invalid_json"}}));
  EXPECT_EQ(d.counts["invalid_json"], 4u);
  EXPECT_NE(d.issues[1].message.find("bad.jsonl line 3: invalid JSON (expected an object"), std::string::npos)
      << d.issues[1].message;
  EXPECT_NE(d.issues[0].message.find("the line was skipped"), std::string::npos);
}

TEST(ReaderJsonl, ZstdMultiFrameAndTruncatedZstd) {
  TempDir dir;
  const auto paras = paragraphs();
  std::string frames, plain;
  std::string part;
  for (size_t i = 0; i < paras.size(); ++i) {
    part += json({{"text", paras[i]}}).dump() + "\n";
    if (i % 10 == 9 || i + 1 == paras.size()) { frames += zstd_frame(part); plain += part; part.clear(); }
  }
  write_file(dir.file("p.jsonl.zst"), frames);
  Drained d = drain(dir.file("p.jsonl.zst"));
  EXPECT_EQ(d.texts(), paras);
  EXPECT_TRUE(d.issues.empty());

  write_file(dir.file("cut.jsonl.zst"), frames.substr(0, frames.size() * 2 / 3));
  d = drain(dir.file("cut.jsonl.zst"));
  ASSERT_GT(d.docs.size(), 10u);
  ASSERT_LT(d.docs.size(), paras.size());
  for (size_t i = 0; i < d.docs.size(); ++i) EXPECT_EQ(d.docs[i].text, paras[i]);
  ASSERT_EQ(d.issues.size(), 1u);
  EXPECT_EQ(d.issues[0].reason, "truncated_stream");
  EXPECT_NE(d.issues[0].message.find("truncated zstd stream at compressed offset"), std::string::npos);
}

TEST(ReaderJsonl, LongLineIsSkippedAndTheNeighboursSurvive) {
  TempDir dir;
  write_file(dir.file("l.jsonl"), "{\"text\": \"a\"}\n{\"text\": \"" + std::string(5000, 'z') +
                                       "\"}\n{\"text\": \"b\"}\n");
  ReaderOptions opt;
  opt.max_record_bytes = 4096;
  Drained d = drain(dir.file("l.jsonl"), opt);
  EXPECT_EQ(d.texts(), (std::vector<std::string>{"a", "b"}));
  ASSERT_EQ(d.issues.size(), 1u);
  EXPECT_EQ(d.issues[0].reason, "record_too_long");
  EXPECT_EQ(d.issues[0].line, 2u);
}
