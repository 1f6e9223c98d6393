// byte_stream.cpp against real text compressed by zlib/zstd here: round trips for plain, multi-member
// gzip and multi-frame zstd, and damaged streams (truncated, corrupt, trailing junk) that must
// deliver a prefix of the original and then say where they broke.
#include "smelt/text/byte_stream.hpp"

#include <gtest/gtest.h>

#include "reader_test_util.hpp"

using namespace smelt;
using namespace smelt::test;

namespace {

// Real text, a few hundred KB: pages of the Python documentation.
std::string real_text() {
  return doc_file("python3.11-doc/html/library/zlib.html") + doc_file("python3.11-doc/html/library/gzip.html") +
         doc_file("python3.11-doc/html/bugs.html") + doc_file("python3.11-doc/html/library/json.html");
}

struct ReadAll {
  std::string data;
  std::string error;
  uint64_t compressed = 0;
};

ReadAll read_all(const std::string& path, size_t chunk = 1 << 16) {
  ReadAll r;
  Status err;
  auto s = byte_stream_open(path, err);
  EXPECT_TRUE(s) << err.message();
  if (!s) return r;
  std::string buf(chunk, '\0');
  for (;;) {
    size_t n = s->read(buf.data(), buf.size());
    if (n == 0) break;
    r.data.append(buf.data(), n);
  }
  EXPECT_EQ(s->read(buf.data(), buf.size()), 0u);
  r.error = s->error();
  r.compressed = s->compressed_offset();
  return r;
}

bool is_prefix(const std::string& p, const std::string& s) {
  return p.size() <= s.size() && s.compare(0, p.size(), p) == 0;
}

}  // namespace

TEST(ByteStream, PlainReadsEveryByteInSmallAndLargeReads) {
  TempDir dir;
  const std::string text = real_text();
  write_file(dir.file("a.txt"), text);
  for (size_t chunk : {size_t(1), size_t(7), size_t(4096), size_t(4 << 20)}) {
    if (chunk == 1) {  // one byte at a time is slow; use a shorter file
      write_file(dir.file("small.txt"), text.substr(0, 5000));
      EXPECT_EQ(read_all(dir.file("small.txt"), 1).data, text.substr(0, 5000));
      continue;
    }
    ReadAll r = read_all(dir.file("a.txt"), chunk);
    EXPECT_EQ(r.data, text);
    EXPECT_EQ(r.error, "");
    EXPECT_EQ(r.compressed, text.size());
  }
}

TEST(ByteStream, EmptyFileIsAnEmptyStream) {
  TempDir dir;
  write_file(dir.file("empty"), "");
  ReadAll r = read_all(dir.file("empty"));
  EXPECT_EQ(r.data, "");
  EXPECT_EQ(r.error, "");
}

TEST(ByteStream, MissingFileAndFolderAreErrorsNamingThePath) {
  TempDir dir;
  Status err;
  EXPECT_FALSE(byte_stream_open(dir.file("nope.gz"), err));
  EXPECT_FALSE(err.is_ok());
  EXPECT_NE(err.message().find("nope.gz"), std::string::npos);
  err = Status::ok();
  EXPECT_FALSE(byte_stream_open(dir.file(""), err));
  EXPECT_NE(err.message().find("directory"), std::string::npos);
}

TEST(ByteStream, GzipMultiMemberIsReadWholeWhateverTheName) {
  TempDir dir;
  const std::string text = real_text();
  const size_t third = text.size() / 3;
  const std::string gz = gzip_member(text.substr(0, third)) + gzip_member(text.substr(third, third)) +
                         gzip_member(text.substr(2 * third));
  write_file(dir.file("multi.txt"), gz);  // no .gz in the name: magic bytes decide
  ReadAll r = read_all(dir.file("multi.txt"));
  EXPECT_EQ(r.data, text);
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.compressed, gz.size());
  // an empty member in the middle is fine too
  write_file(dir.file("m2.gz"), gzip_member("abc") + gzip_member("") + gzip_member("def"));
  EXPECT_EQ(read_all(dir.file("m2.gz")).data, "abcdef");
}

TEST(ByteStream, ZstdMultiFrameWithSkippableFrameIsReadWhole) {
  TempDir dir;
  const std::string text = real_text();
  const size_t half = text.size() / 2;
  // a skippable frame: magic 0x184D2A50, 4-byte size, payload
  const std::string skippable = std::string("\x50\x2A\x4D\x18\x03\x00\x00\x00xyz", 11);
  const std::string zst = zstd_frame(text.substr(0, half)) + skippable + zstd_frame(text.substr(half), 19);
  write_file(dir.file("frames.bin"), zst);
  ReadAll r = read_all(dir.file("frames.bin"), 1000);
  EXPECT_EQ(r.data, text);
  EXPECT_EQ(r.error, "");
  // a file that starts with a skippable frame is still detected as zstd
  write_file(dir.file("skip-first.zst"), skippable + zstd_frame("hello"));
  EXPECT_EQ(read_all(dir.file("skip-first.zst")).data, "hello");
}

TEST(ByteStream, TruncatedGzipDeliversAPrefixThenNamesTheOffset) {
  TempDir dir;
  const std::string text = real_text();
  const std::string gz = gzip_member(text);
  for (size_t cut : {gz.size() / 2, gz.size() - 3, size_t(20)}) {
    write_file(dir.file("cut.gz"), gz.substr(0, cut));
    ReadAll r = read_all(dir.file("cut.gz"));
    EXPECT_TRUE(is_prefix(r.data, text));
    if (cut == gz.size() / 2) EXPECT_GT(r.data.size(), text.size() / 3);
    EXPECT_NE(r.error.find("truncated gzip stream at compressed offset"), std::string::npos) << r.error;
  }
}

TEST(ByteStream, TruncatedZstdDeliversAPrefixThenNamesTheOffset) {
  TempDir dir;
  const std::string text = real_text();
  const std::string zst = zstd_frame(text.substr(0, 100000)) + zstd_frame(text.substr(100000));
  const size_t first = zstd_frame(text.substr(0, 100000)).size();
  write_file(dir.file("cut.zst"), zst.substr(0, first + (zst.size() - first) / 2));
  ReadAll r = read_all(dir.file("cut.zst"));
  EXPECT_TRUE(is_prefix(r.data, text));
  EXPECT_GE(r.data.size(), 100000u);  // the whole first frame survives
  EXPECT_NE(r.error.find("truncated zstd stream at compressed offset"), std::string::npos) << r.error;
}

TEST(ByteStream, CorruptStreamsStopWithAnError) {
  TempDir dir;
  const std::string text = real_text();
  std::string gz = gzip_member(text);
  for (size_t i = gz.size() / 2; i < gz.size() / 2 + 64; ++i) gz[i] = static_cast<char>(gz[i] ^ 0x5a);
  write_file(dir.file("bad.gz"), gz);
  ReadAll r = read_all(dir.file("bad.gz"));
  EXPECT_TRUE(is_prefix(r.data.substr(0, 1000), text));
  EXPECT_NE(r.error.find("gzip stream at compressed offset"), std::string::npos) << r.error;

  std::string zst = zstd_frame(text);
  for (size_t i = zst.size() / 2; i < zst.size() / 2 + 64; ++i) zst[i] = static_cast<char>(zst[i] ^ 0x5a);
  write_file(dir.file("bad.zst"), zst);
  r = read_all(dir.file("bad.zst"));
  EXPECT_NE(r.error.find("zstd stream at compressed offset"), std::string::npos) << r.error;
}

TEST(ByteStream, JunkAfterTheLastGzipMemberIsReportedAfterTheData) {
  TempDir dir;
  write_file(dir.file("junk.gz"), gzip_member("first member\n") + "not gzip at all");
  ReadAll r = read_all(dir.file("junk.gz"));
  EXPECT_EQ(r.data, "first member\n");
  EXPECT_NE(r.error.find("after the end of a gzip member"), std::string::npos) << r.error;
}
