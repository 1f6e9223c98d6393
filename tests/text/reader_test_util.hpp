// Helpers for the reader tests: temp folders, gzip/zstd compression through the libraries, real
// text from the installed Python/Linux documentation, and draining a DocReader.
// Not a test itself; header-only so each *_test.cpp stays one executable.
#pragma once
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "smelt/text/doc_reader.hpp"
#include "test_files.hpp"

namespace smelt::test {

// A fresh folder under the system temp folder, removed with everything in it at scope end.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("smelt-readers-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::error_code ec; std::filesystem::remove_all(path_, ec); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};


// One complete gzip member holding s.
inline std::string gzip_member(const std::string& s, int level = 6) {
  z_stream zs;
  std::memset(&zs, 0, sizeof(zs));
  deflateInit2(&zs, level, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&zs, s.size()) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(s.data()));
  zs.avail_in = static_cast<uInt>(s.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// A raw zlib stream (RFC 1950), as in "Content-Encoding: deflate".
inline std::string zlib_stream(const std::string& s) {
  uLongf n = compressBound(s.size());
  std::string out(n, '\0');
  compress2(reinterpret_cast<Bytef*>(out.data()), &n, reinterpret_cast<const Bytef*>(s.data()), s.size(), 6);
  out.resize(n);
  return out;
}

// One zstd frame holding s.
inline std::string zstd_frame(const std::string& s, int level = 3) {
  std::string out(ZSTD_compressBound(s.size()), '\0');
  size_t n = ZSTD_compress(out.data(), out.size(), s.data(), s.size(), level);
  out.resize(n);
  return out;
}

// Real text: a file of the installed documentation (the tests need python3.11-doc, linux-doc-6.1).
inline std::string doc_file(const std::string& rel) {
  const std::string path = "/usr/share/doc/" + rel;
  std::string s = read_file(path);
  EXPECT_FALSE(s.empty()) << "missing real-text sample " << path;
  return s;
}

inline std::string data_file(const std::string& rel) {
  return std::string(SMELT_TEST_DATA) + "/readers/" + rel;
}

struct Drained {
  std::vector<RawDoc> docs;
  std::vector<ReadIssue> issues;
  std::map<std::string, uint64_t> counts;
  InputFormat format = InputFormat::kUnknown;
  uint64_t bytes_read = 0;

  size_t issues_with(const std::string& reason) const {
    size_t n = 0;
    for (const auto& i : issues) n += i.reason == reason;
    return n;
  }
  std::vector<std::string> texts() const {
    std::vector<std::string> t;
    for (const auto& d : docs) t.push_back(d.text);
    return t;
  }
};

// Opens path and reads every document and issue.
inline Drained drain(const std::string& path, const ReaderOptions& opt = {}) {
  Drained out;
  Status err;
  auto reader = doc_reader_open(path, opt, err);
  EXPECT_TRUE(reader) << err.message();
  if (!reader) return out;
  reader->on_issue = [&](const ReadIssue& i) { out.issues.push_back(i); };
  RawDoc doc;
  while (reader->next(doc)) out.docs.push_back(doc);
  EXPECT_FALSE(reader->next(doc));  // stays at the end
  out.counts = reader->issue_counts();
  out.format = reader->format();
  out.bytes_read = reader->bytes_read();
  return out;
}

}  // namespace smelt::test
