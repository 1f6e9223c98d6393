// doc_reader.cpp: format detection by name and by content, the factory's errors, the line splitter
// (CRLF, unterminated last line, lines over the limit skipped with bounded memory, a 100 MB line
// on disk), empty files in every format, and progress in compressed bytes.
#include "smelt/text/doc_reader.hpp"

#include <sys/resource.h>

#include <gtest/gtest.h>

#include "reader_test_util.hpp"
#include "smelt/text/readers_internal.hpp"

using namespace smelt;
using namespace smelt::test;

TEST(DocReaderDetect, ByExtensionAfterStrippingCompression) {
  EXPECT_EQ(input_format_detect("a/b/CC-MAIN-1.warc.gz", ""), InputFormat::kWarc);
  EXPECT_EQ(input_format_detect("x.wet.gz", ""), InputFormat::kWarc);
  EXPECT_EQ(input_format_detect("x.WARC", ""), InputFormat::kWarc);
  EXPECT_EQ(input_format_detect("shard.jsonl.zst", "WARC/1.0"), InputFormat::kJsonl);  // name wins
  EXPECT_EQ(input_format_detect("x.json.zstd", ""), InputFormat::kJsonl);
  EXPECT_EQ(input_format_detect("x.ndjson", ""), InputFormat::kJsonl);
  EXPECT_EQ(input_format_detect("page.htm", ""), InputFormat::kHtml);
  EXPECT_EQ(input_format_detect("page.xhtml.gz", ""), InputFormat::kHtml);
  EXPECT_EQ(input_format_detect("README.md", "{\"a\":1}"), InputFormat::kText);
  EXPECT_EQ(input_format_detect("notes.text", ""), InputFormat::kText);
  EXPECT_EQ(input_format_detect("dir.warc/notes.txt", ""), InputFormat::kText);  // only the file name counts
}

TEST(DocReaderDetect, ByContentWhenTheNameSaysNothing) {
  EXPECT_EQ(input_format_detect("dump", "WARC/1.1\r\nWARC-Type: warcinfo\r\n"), InputFormat::kWarc);
  EXPECT_EQ(input_format_detect("dump.gz", "\n  {\"text\": \"x\"}\n"), InputFormat::kJsonl);
  EXPECT_EQ(input_format_detect("dump", "\xEF\xBB\xBF{\"text\": \"x\"}"), InputFormat::kJsonl);
  EXPECT_EQ(input_format_detect("index", "\n<!DOCTYPE HTML PUBLIC>"), InputFormat::kHtml);
  EXPECT_EQ(input_format_detect("page.php", "<?xml version='1.0'?>\n<HTML lang=en>"), InputFormat::kHtml);
  EXPECT_EQ(input_format_detect("x", "<!-- c -->\n<head><title>t</title>"), InputFormat::kHtml);
  EXPECT_EQ(input_format_detect("x", std::string(2000, 'a') + "<html>"), InputFormat::kText);  // past 1 KiB
  EXPECT_EQ(input_format_detect("LICENSE", "Permission is hereby granted"), InputFormat::kText);
  EXPECT_EQ(input_format_detect("empty", ""), InputFormat::kText);
  EXPECT_STREQ(input_format_name(InputFormat::kWarc), "warc");
  EXPECT_STREQ(input_format_name(InputFormat::kJsonl), "jsonl");
}

TEST(DocReaderOpen, DetectsFromDecompressedContentAndReportsErrors) {
  TempDir dir;
  write_file(dir.file("noext"), gzip_member("{\"text\": \"hello\"}\n"));
  Drained d = drain(dir.file("noext"));
  EXPECT_EQ(d.format, InputFormat::kJsonl);
  ASSERT_EQ(d.docs.size(), 1u);
  EXPECT_EQ(d.docs[0].text, "hello");

  Status err;
  EXPECT_FALSE(doc_reader_open(dir.file("missing.jsonl"), {}, err));
  EXPECT_NE(err.message().find("missing.jsonl"), std::string::npos);
}

TEST(DocReaderOpen, EmptyFilesGiveNoDocumentsAndNoIssues) {
  TempDir dir;
  for (std::string name : {"e.txt", "e.jsonl", "e.warc", "e.html", "e", "e.warc.gz", "e.jsonl.zst"}) {
    std::string content;
    if (name == "e.warc.gz") content = gzip_member("");
    if (name == "e.jsonl.zst") content = zstd_frame("");
    write_file(dir.file(name), content);
    for (TextUnit unit : {TextUnit::kFile, TextUnit::kParagraph, TextUnit::kLine}) {
      ReaderOptions opt;
      opt.text_unit = unit;
      Drained d = drain(dir.file(name), opt);
      EXPECT_TRUE(d.docs.empty()) << name;
      EXPECT_TRUE(d.issues.empty()) << name;
      EXPECT_TRUE(d.counts.empty()) << name;
    }
  }
}

TEST(DocReaderOpen, BytesReadCountsCompressedBytes) {
  TempDir dir;
  std::string jsonl;
  for (int i = 0; i < 2000; ++i) jsonl += "{\"text\": \"line " + std::to_string(i) + " of the test corpus\"}\n";
  const std::string gz = gzip_member(jsonl);
  write_file(dir.file("p.jsonl.gz"), gz);
  Drained d = drain(dir.file("p.jsonl.gz"));
  EXPECT_EQ(d.docs.size(), 2000u);
  EXPECT_EQ(d.bytes_read, gz.size());
}

// ---- the line splitter, through its internal interface ------------------------------------

namespace {
std::unique_ptr<InputBuffer> buffer_over(const std::string& path, uint64_t limit, size_t chunk) {
  Status err;
  auto s = byte_stream_open(path, err);
  EXPECT_TRUE(s) << err.message();
  return std::make_unique<InputBuffer>(std::move(s), limit, chunk);
}
}  // namespace

TEST(LineSplitter, SplitsCrLfAndKeepsAnUnterminatedLastLine) {
  TempDir dir;
  write_file(dir.file("l.txt"), "one\r\ntwo\n\nfour");
  auto in = buffer_over(dir.file("l.txt"), 1 << 20, 3);  // tiny reads: lines cross refills
  LineSplitter lines(*in, 100);
  Line l;
  std::vector<std::string> got;
  std::vector<uint64_t> offsets;
  while (lines.next(l)) { got.emplace_back(l.text); offsets.push_back(l.offset); EXPECT_EQ(l.number, got.size()); }
  EXPECT_EQ(got, (std::vector<std::string>{"one", "two", "", "four"}));
  EXPECT_EQ(offsets, (std::vector<uint64_t>{0, 5, 9, 10}));
}

TEST(LineSplitter, SkipsLinesOverTheLimitWithoutGrowingTheBuffer) {
  TempDir dir;
  const std::string big(300000, 'x');
  write_file(dir.file("l.txt"), "short\n" + big + "\nafter\n" + big);
  auto in = buffer_over(dir.file("l.txt"), 8192, 4096);
  LineSplitter lines(*in, 1000);
  Line l;
  ASSERT_TRUE(lines.next(l));
  EXPECT_EQ(l.text, "short");
  ASSERT_TRUE(lines.next(l));
  EXPECT_TRUE(l.too_long);
  EXPECT_EQ(l.number, 2u);
  EXPECT_EQ(l.length, big.size());
  EXPECT_EQ(l.offset, 6u);
  ASSERT_TRUE(lines.next(l));
  EXPECT_FALSE(l.too_long);
  EXPECT_EQ(l.text, "after");
  EXPECT_EQ(l.number, 3u);
  ASSERT_TRUE(lines.next(l));  // the unterminated last line is too long too
  EXPECT_TRUE(l.too_long);
  EXPECT_EQ(l.length, big.size());
  EXPECT_FALSE(lines.next(l));
  EXPECT_LE(in->capacity(), 16384u);
}

// A 100 MB line on disk between two short ones: skipped and reported, the neighbours survive, and
// neither the reader's buffer nor the process's peak memory ever holds it.
TEST(DocReaderOpen, HundredMegabyteLineIsSkippedWithBoundedMemory) {
  TempDir dir;
  const std::string path = dir.file("huge.jsonl");
  {
    std::ofstream f(path, std::ios::binary);
    f << "{\"text\": \"before the long line\"}\n{\"text\": \"";
    const std::string block(1 << 20, 'y');
    for (int i = 0; i < 100; ++i) f.write(block.data(), static_cast<std::streamsize>(block.size()));
    f << "\"}\n{\"text\": \"after the long line\"}\n";
  }
  struct rusage before;
  getrusage(RUSAGE_SELF, &before);
  ReaderOptions opt;
  opt.max_record_bytes = 1 << 20;
  Status err;
  auto reader = doc_reader_open(path, opt, err);
  ASSERT_TRUE(reader);
  std::vector<ReadIssue> issues;
  reader->on_issue = [&](const ReadIssue& i) { issues.push_back(i); };
  RawDoc doc;
  std::vector<std::string> texts;
  size_t max_capacity = 0;
  auto* base = dynamic_cast<ReaderBase*>(reader.get());
  ASSERT_NE(base, nullptr);
  while (reader->next(doc)) {
    texts.push_back(doc.text);
    max_capacity = std::max(max_capacity, base->input().capacity());
  }
  max_capacity = std::max(max_capacity, base->input().capacity());
  EXPECT_EQ(texts, (std::vector<std::string>{"before the long line", "after the long line"}));
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_EQ(issues[0].reason, "record_too_long");
  EXPECT_EQ(issues[0].line, 2u);
  EXPECT_NE(issues[0].message.find("huge.jsonl line 2:"), std::string::npos) << issues[0].message;
  EXPECT_LE(max_capacity, 4u << 20);
  struct rusage after;
  getrusage(RUSAGE_SELF, &after);
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 40 * 1024) << "peak RSS grew by KiB";
}
