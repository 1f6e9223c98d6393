// reader_html.cpp: a real documentation page (plain and gzip) is one HTML document named by its
// path, byte for byte; pages over the limit and binary files are skipped and reported.
#include <gtest/gtest.h>

#include "reader_test_util.hpp"

using namespace smelt;
using namespace smelt::test;

TEST(ReaderHtml, WholePageIsOneHtmlDocument) {
  TempDir dir;
  const std::string page = doc_file("linux-doc-6.1/html/translations/zh_CN/index.html");
  write_file(dir.file("index.html"), page);
  write_file(dir.file("page"), page);                    // detected by content
  write_file(dir.file("index.htm.gz"), gzip_member(page));
  for (std::string name : {"index.html", "page", "index.htm.gz"}) {
    Drained d = drain(dir.file(name));
    EXPECT_EQ(d.format, InputFormat::kHtml) << name;
    ASSERT_EQ(d.docs.size(), 1u) << name;
    const RawDoc& doc = d.docs[0];
    EXPECT_EQ(doc.text, page);
    EXPECT_TRUE(doc.is_html);
    EXPECT_EQ(doc.charset, "");  // left to extraction's <meta> sniff
    EXPECT_EQ(doc.id, dir.file(name));
    EXPECT_EQ(doc.source, dir.file(name));
    EXPECT_EQ(doc.url, "");
    EXPECT_TRUE(d.issues.empty());
  }
}

TEST(ReaderHtml, OversizedAndBinaryPagesAreSkipped) {
  TempDir dir;
  const std::string page = doc_file("python3.11-doc/html/library/zlib.html");
  write_file(dir.file("big.html"), page);
  ReaderOptions opt;
  opt.max_record_bytes = 10000;
  Drained d = drain(dir.file("big.html"), opt);
  EXPECT_TRUE(d.docs.empty());
  ASSERT_EQ(d.issues.size(), 1u);
  EXPECT_EQ(d.issues[0].reason, "record_too_long");

  write_file(dir.file("img.html"), doc_file("python3.11-doc/html/_images/hashlib-blake2-tree.png"));
  d = drain(dir.file("img.html"));
  EXPECT_TRUE(d.docs.empty());
  EXPECT_EQ(d.issues_with("binary"), 1u);
}

TEST(ReaderHtml, NonUtf8PageIsPassedOnUntouched) {
  TempDir dir;
  // Latin-1 bytes are not UTF-8, but charset conversion happens later: bytes pass through as they are
  const std::string page = "<html><head><meta charset=\"iso-8859-1\"></head><body>Caf\xe9 cr\xe8me</body></html>";
  write_file(dir.file("latin1.html"), page);
  Drained d = drain(dir.file("latin1.html"));
  ASSERT_EQ(d.docs.size(), 1u);
  EXPECT_EQ(d.docs[0].text, page);
  EXPECT_TRUE(d.issues.empty());
}
