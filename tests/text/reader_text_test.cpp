// reader_text.cpp on real documentation text (English and Chinese): the three text units with
// ids by line, invalid UTF-8 repaired and reported, binary junk skipped between good lines,
// oversized records skipped, and a truncated gzip file that keeps the lines before the cut.
#include <gtest/gtest.h>

#include "reader_test_util.hpp"
#include "smelt/common/utf8.hpp"

using namespace smelt;
using namespace smelt::test;

namespace {

std::string english() { return doc_file("python3.11-doc/html/_sources/bugs.rst.txt"); }
std::string chinese() { return doc_file("linux-doc-6.1/html/_sources/translations/zh_CN/index.rst.txt"); }

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t e = s.find('\n', pos);
    if (e == std::string::npos) e = s.size();
    out.push_back(s.substr(pos, e - pos));
    pos = e + 1;
  }
  return out;
}

bool blank(const std::string& s) { return s.find_first_not_of(" \t\r\f\v") == std::string::npos; }

ReaderOptions unit(TextUnit u) {
  ReaderOptions o;
  o.text_unit = u;
  return o;
}

}  // namespace

TEST(ReaderText, FileUnitIsTheWholeFile) {
  TempDir dir;
  const std::string text = chinese();
  write_file(dir.file("zh.txt"), text);
  Drained d = drain(dir.file("zh.txt"));
  EXPECT_EQ(d.format, InputFormat::kText);
  ASSERT_EQ(d.docs.size(), 1u);
  EXPECT_EQ(d.docs[0].text, text);
  EXPECT_EQ(d.docs[0].id, dir.file("zh.txt") + ":1");
  EXPECT_EQ(d.docs[0].source, d.docs[0].id);
  EXPECT_FALSE(d.docs[0].is_html);
  EXPECT_TRUE(d.issues.empty());
}

TEST(ReaderText, LineUnitGivesEachNonBlankLineWithItsNumber) {
  TempDir dir;
  const std::string text = english();
  write_file(dir.file("bugs.txt"), text);
  Drained d = drain(dir.file("bugs.txt"), unit(TextUnit::kLine));
  std::vector<std::string> want;
  std::vector<std::string> ids;
  const auto lines = split_lines(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    if (blank(lines[i])) continue;
    want.push_back(lines[i]);
    ids.push_back(dir.file("bugs.txt") + ":" + std::to_string(i + 1));
  }
  EXPECT_EQ(d.texts(), want);
  ASSERT_EQ(d.docs.size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(d.docs[i].id, ids[i]);
    EXPECT_EQ(d.docs[i].record, i);
  }
}

TEST(ReaderText, ParagraphUnitSplitsOnBlankLines) {
  TempDir dir;
  const std::string text = english() + "\n\n" + chinese();
  write_file(dir.file("p.md"), text);
  // independent split: runs of non-blank lines
  std::vector<std::string> want, ids;
  const auto lines = split_lines(text);
  std::string cur;
  size_t first = 0;
  for (size_t i = 0; i <= lines.size(); ++i) {
    if (i == lines.size() || blank(lines[i])) {
      if (first) { want.push_back(cur); ids.push_back(dir.file("p.md") + ":" + std::to_string(first)); }
      cur.clear();
      first = 0;
      continue;
    }
    if (!first) first = i + 1; else cur += '\n';
    cur += lines[i];
  }
  Drained d = drain(dir.file("p.md"), unit(TextUnit::kParagraph));
  EXPECT_GT(want.size(), 20u);
  EXPECT_EQ(d.texts(), want);
  ASSERT_EQ(d.docs.size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(d.docs[i].id, ids[i]);
}

TEST(ReaderText, InvalidUtf8IsRepairedReportedAndKept) {
  TempDir dir;
  const std::string good = "第一行：内核文档";
  write_file(dir.file("u.txt"), good + "\ncaf\xe9 au lait\n" + good + "\n");
  Drained d = drain(dir.file("u.txt"), unit(TextUnit::kLine));
  ASSERT_EQ(d.docs.size(), 3u);
  EXPECT_EQ(d.docs[1].text, "caf\xEF\xBF\xBD au lait");
  EXPECT_TRUE(utf8_valid(d.docs[1].text));
  EXPECT_EQ(d.docs[2].text, good);
  ASSERT_EQ(d.issues.size(), 1u);
  EXPECT_EQ(d.issues[0].reason, "invalid_utf8");
  EXPECT_EQ(d.issues[0].line, 2u);
  EXPECT_NE(d.issues[0].message.find("u.txt line 2: invalid UTF-8 at byte 3"), std::string::npos)
      << d.issues[0].message;
}

TEST(ReaderText, BinaryJunkIsSkippedAndTheLinesAroundItSurvive) {
  TempDir dir;
  std::string junk;
  for (int i = 0; i < 600; ++i) {  // every byte value but NUL and LF, in a scrambled order
    int b = (i * 37 + 11) % 256;
    junk.push_back(static_cast<char>(b == 0 || b == '\n' ? 1 : b));
  }
  write_file(dir.file("b.txt"), "first line\n" + junk + "\nmiddle line\n" + std::string("ab\0cd", 5) + "\nlast line\n");
  Drained d = drain(dir.file("b.txt"), unit(TextUnit::kLine));
  EXPECT_EQ(d.texts(), (std::vector<std::string>{"first line", "middle line", "last line"}));
  EXPECT_EQ(d.issues_with("binary"), 2u);
  EXPECT_EQ(d.counts["binary"], 2u);
  // a whole binary file in file mode
  std::string png = doc_file("python3.11-doc/html/_images/hashlib-blake2-tree.png");
  write_file(dir.file("image"), png);
  Drained f = drain(dir.file("image"));
  EXPECT_TRUE(f.docs.empty());
  EXPECT_EQ(f.issues_with("binary"), 1u);
}

TEST(ReaderText, RecordsOverTheLimitAreSkippedAndReported) {
  TempDir dir;
  const std::string text = english();
  write_file(dir.file("t.txt"), text);
  ReaderOptions opt;
  opt.max_record_bytes = 1000;
  Drained d = drain(dir.file("t.txt"), opt);  // file unit: the whole file is one record
  EXPECT_TRUE(d.docs.empty());
  ASSERT_EQ(d.issues_with("record_too_long"), 1u);
  EXPECT_NE(d.issues[0].message.find(std::to_string(text.size()) + " bytes"), std::string::npos);

  opt.text_unit = TextUnit::kParagraph;
  write_file(dir.file("p.txt"), "short one\n\n" + std::string(600, 'a') + "\n" + std::string(600, 'b') +
                                    "\n\nshort two\n");
  d = drain(dir.file("p.txt"), opt);
  EXPECT_EQ(d.texts(), (std::vector<std::string>{"short one", "short two"}));
  ASSERT_EQ(d.issues.size(), 1u);
  EXPECT_EQ(d.issues[0].reason, "record_too_long");
  EXPECT_EQ(d.issues[0].line, 3u);
}

TEST(ReaderText, TruncatedGzipKeepsTheLinesBeforeTheCut) {
  TempDir dir;
  const std::string text = doc_file("python3.11-doc/html/_sources/glossary.rst.txt") +
                           doc_file("python3.11-doc/html/_sources/license.rst.txt");
  const std::string gz = gzip_member(text);
  write_file(dir.file("cut.txt.gz"), gz.substr(0, gz.size() / 2));
  Drained d = drain(dir.file("cut.txt.gz"), unit(TextUnit::kLine));
  std::vector<std::string> all;
  for (const auto& l : split_lines(text)) if (!blank(l)) all.push_back(l);
  ASSERT_GT(d.docs.size(), all.size() / 4);
  ASSERT_LT(d.docs.size(), all.size());
  for (size_t i = 0; i < d.docs.size(); ++i) ASSERT_EQ(d.docs[i].text, all[i]) << i;
  ASSERT_EQ(d.issues.size(), 1u);
  EXPECT_EQ(d.issues[0].reason, "truncated_stream");
  EXPECT_NE(d.issues[0].message.find("truncated gzip stream at compressed offset"), std::string::npos);

  // file unit: the one record is incomplete, so nothing is delivered, but the damage is reported
  Drained f = drain(dir.file("cut.txt.gz"));
  EXPECT_TRUE(f.docs.empty());
  EXPECT_EQ(f.issues_with("truncated_stream"), 1u);
}
