// reader_warc.cpp on a real WARC written by wget (tests/data/readers, see its README) whose pages
// are compared byte for byte with the files the server sent, plus records built here from real
// pages: chunked/gzip/deflate HTTP bodies, charsets, WET conversion records, and damaged records
// (broken headers, wrong lengths, oversized blocks, garbage) between good ones that must survive.
#include <gtest/gtest.h>

#include "reader_test_util.hpp"
#include "smelt/common/utf8.hpp"

using namespace smelt;
using namespace smelt::test;

namespace {

const char* kBase = "http://127.0.0.1:8765/";
// The pages wget fetched into docs.warc, in order (the PNG and the 404 are not documents).
const std::vector<std::string> kDocsWarcPages = {
    "python3.11-doc/html/about.html",         "python3.11-doc/html/bugs.html",
    "python3.11-doc/html/copyright.html",     "python3.11-doc/html/library/zlib.html",
    "linux-doc-6.1/html/translations/zh_CN/index.html", "python3.11-doc/html/library/gzip.html"};

std::string warc_record(const std::string& type, const std::string& block, const std::string& uri = "",
                        const std::string& id = "", const std::string& extra = "") {
  std::string h = "WARC/1.1\r\nWARC-Type: " + type + "\r\n";
  if (!id.empty()) h += "WARC-Record-ID: <" + id + ">\r\n";
  if (!uri.empty()) h += "WARC-Target-URI: " + uri + "\r\n";
  h += "WARC-Date: 2024-05-01T10:00:00Z\r\n" + extra;
  h += "Content-Length: " + std::to_string(block.size()) + "\r\n\r\n";
  return h + block + "\r\n\r\n";
}

std::string http(const std::string& headers, const std::string& body, const std::string& status = "200 OK") {
  return "HTTP/1.1 " + status + "\r\nServer: test\r\n" + headers + "\r\n" + body;
}

std::string html_response(const std::string& body, const std::string& extra_headers = "") {
  return http("Content-Type: text/html\r\n" + extra_headers, body);
}

std::string chunked(const std::string& body, size_t size, const std::string& ext = "") {
  std::string out;
  for (size_t i = 0; i < body.size(); i += size) {
    const std::string part = body.substr(i, size);
    char hex[32];
    std::snprintf(hex, sizeof(hex), "%zx", part.size());
    out += std::string(hex) + ext + "\r\n" + part + "\r\n";
  }
  return out + "0\r\nX-Trailer: yes\r\n\r\n";
}

std::string page(int i) {
  static const std::vector<std::string> pages = {
      doc_file("python3.11-doc/html/about.html"), doc_file("python3.11-doc/html/bugs.html"),
      doc_file("python3.11-doc/html/copyright.html"),
      doc_file("linux-doc-6.1/html/translations/zh_CN/index.html")};
  return pages[static_cast<size_t>(i) % pages.size()];
}

std::string uuid(int i) { return "urn:uuid:00000000-0000-4000-8000-" + std::to_string(100000000000 + i); }

}  // namespace

TEST(ReaderWarc, RealWgetWarcGivesTheServedPagesByteForByte) {
  const std::string path = data_file("docs.warc");
  Drained d = drain(path);
  EXPECT_EQ(d.format, InputFormat::kWarc);
  EXPECT_TRUE(d.issues.empty()) << d.issues[0].message;
  ASSERT_EQ(d.docs.size(), kDocsWarcPages.size());
  const std::string raw = read_file(path);
  for (size_t i = 0; i < d.docs.size(); ++i) {
    const RawDoc& doc = d.docs[i];
    EXPECT_EQ(doc.text, doc_file(kDocsWarcPages[i])) << kDocsWarcPages[i];
    EXPECT_TRUE(doc.is_html);
    EXPECT_EQ(doc.url, kBase + kDocsWarcPages[i]);  // angle brackets of WARC/1.0 removed
    EXPECT_EQ(doc.id.rfind("urn:uuid:", 0), 0u) << doc.id;
    EXPECT_EQ(doc.id.find('<'), std::string::npos);
    EXPECT_NE(raw.find("WARC-Record-ID: <" + doc.id + ">"), std::string::npos);
    EXPECT_EQ(doc.charset, "");  // http.server sends no charset
    EXPECT_EQ(doc.record, i);
    // source = "<path>@<offset>" and the record starts at that offset
    ASSERT_EQ(doc.source.rfind(path + "@", 0), 0u);
    const size_t off = std::stoull(doc.source.substr(path.size() + 1));
    EXPECT_EQ(raw.substr(off, 29), "WARC/1.0\r\nWARC-Type: response");
  }
  // the PNG and the 404 are counted, silently
  EXPECT_EQ(d.counts["non_html"], 1u);
  EXPECT_EQ(d.counts["http_status"], 1u);
  EXPECT_EQ(d.bytes_read, raw.size());
}

TEST(ReaderWarc, RealWgetGzipPerRecordWarc) {
  Drained d = drain(data_file("docs-small.warc.gz"));  // wget's default: one gzip member per record
  EXPECT_TRUE(d.issues.empty());
  ASSERT_EQ(d.docs.size(), 3u);
  EXPECT_EQ(d.docs[0].text, doc_file("python3.11-doc/html/about.html"));
  EXPECT_EQ(d.docs[1].text, doc_file("python3.11-doc/html/bugs.html"));
  EXPECT_EQ(d.docs[2].text, doc_file("linux-doc-6.1/html/translations/zh_CN/index.html"));
}

TEST(ReaderWarc, ZstdFramesAndTruncatedGzipKeepTheRecordsBeforeTheCut) {
  TempDir dir;
  const std::string raw = read_file(data_file("docs.warc"));
  Drained full = drain(data_file("docs.warc"));
  // zstd frames cut at arbitrary places, not at record boundaries
  std::string zst;
  for (size_t i = 0; i < raw.size(); i += 40000) zst += zstd_frame(raw.substr(i, 40000));
  write_file(dir.file("docs.warc.zst"), zst);
  Drained z = drain(dir.file("docs.warc.zst"));
  EXPECT_EQ(z.texts(), full.texts());
  EXPECT_TRUE(z.issues.empty());

  const std::string gz = gzip_member(raw);
  write_file(dir.file("cut.warc.gz"), gz.substr(0, gz.size() * 6 / 10));
  Drained c = drain(dir.file("cut.warc.gz"));
  ASSERT_GE(c.docs.size(), 2u);
  ASSERT_LT(c.docs.size(), full.docs.size());
  for (size_t i = 0; i < c.docs.size(); ++i) EXPECT_EQ(c.docs[i].text, full.docs[i].text);
  ASSERT_EQ(c.issues.size(), 1u);  // no bad_warc_length for the cut record: only the damage
  EXPECT_EQ(c.issues[0].reason, "truncated_stream");
  EXPECT_NE(c.issues[0].message.find("truncated gzip stream at compressed offset"), std::string::npos);
}

TEST(ReaderWarc, DamagedRecordsBetweenGoodOnesAreReportedAndSkipped) {
  TempDir dir;
  std::string file;
  std::vector<std::pair<uint64_t, std::string>> want_issues;
  std::vector<std::string> want_texts;
  int n = 0;
  auto good = [&] {
    const std::string body = page(n);
    file += warc_record("response", html_response(body), "https://example.org/" + std::to_string(n), uuid(n));
    want_texts.push_back(body);
    ++n;
  };
  auto bad = [&](const std::string& rec, const std::string& reason) {
    want_issues.emplace_back(file.size(), reason);
    file += rec;
  };
  bad("this file starts with garbage\r\n", "bad_warc_header");
  good();
  bad("WARC/1.0\r\nWARC-Type: response\r\nthis header line has no colon\r\nContent-Length: 10\r\n\r\n0123456789\r\n\r\n",
      "bad_warc_header");
  good();
  {  // Content-Length too long: runs into the next record
    std::string rec = warc_record("response", html_response(page(7)));
    const std::string cl = "Content-Length: " + std::to_string(html_response(page(7)).size());
    rec.replace(rec.find(cl), cl.size(), "Content-Length: " + std::to_string(html_response(page(7)).size() + 300));
    bad(rec, "bad_warc_length");
  }
  good();
  {  // Content-Length too short
    std::string rec = warc_record("response", html_response(page(5)));
    const std::string cl = "Content-Length: " + std::to_string(html_response(page(5)).size());
    rec.replace(rec.find(cl), cl.size(), "Content-Length: " + std::to_string(html_response(page(5)).size() - 100));
    bad(rec, "bad_warc_length");
  }
  good();
  bad("WARC/1.0\r\nWARC-Type: response\r\nContent-Length: 12ab\r\n\r\nHTTP/1.1 200\r\n\r\n", "bad_warc_header");
  good();
  bad("WARC/1.0\r\nWARC-Type: conversion\r\n\r\nno length at all\r\n\r\n", "bad_warc_header");
  good();
  bad("WARC/1.0\r\nWARC-Type: response\r\nContent-Length: 100000\r\n\r\nHTTP/1.1 200 OK\r\n\r\n<html>cut", "bad_warc_length");
  write_file(dir.file("damaged.warc"), file);

  Drained d = drain(dir.file("damaged.warc"));
  EXPECT_EQ(d.texts(), want_texts);
  std::vector<std::pair<uint64_t, std::string>> got;
  for (const auto& i : d.issues) got.emplace_back(i.offset, i.reason);
  EXPECT_EQ(got, want_issues);
  for (size_t i = 0; i < d.docs.size(); ++i) {
    EXPECT_EQ(d.docs[i].url, "https://example.org/" + std::to_string(i));
    EXPECT_EQ(d.docs[i].id, uuid(static_cast<int>(i)));
  }
  ASSERT_FALSE(d.issues.empty());
  EXPECT_NE(d.issues[0].message.find("damaged.warc at offset 0:"), std::string::npos) << d.issues[0].message;
}

TEST(ReaderWarc, ChunkedGzipAndDeflateBodiesAreDecoded) {
  TempDir dir;
  const std::string p0 = page(0), p1 = page(1), p2 = page(2), p3 = page(3);
  std::string file;
  file += warc_record("response", html_response(chunked(p0, 1000), "Transfer-Encoding: chunked\r\n"), "u0", uuid(0));
  file += warc_record("response", html_response(gzip_member(p1), "Content-Encoding: gzip\r\n"), "u1", uuid(1));
  file += warc_record("response",
                      html_response(chunked(gzip_member(p2), 777, ";ext=1"),
                                    "Transfer-Encoding: chunked\r\nContent-Encoding: gzip\r\n"), "u2", uuid(2));
  file += warc_record("response", html_response(zlib_stream(p3), "Content-Encoding: deflate\r\n"), "u3", uuid(3));
  file += warc_record("response", html_response("\x1b\x2c\x00 brotli bytes", "Content-Encoding: br\r\n"), "u4", uuid(4));
  // "chunked" in the header but the archiver stored the de-chunked body: read as it is
  file += warc_record("response", html_response(p0, "Transfer-Encoding: chunked\r\n"), "u5", uuid(5));
  // a gzip body cut short: the part that decodes is kept
  const std::string gz = gzip_member(p1);
  file += warc_record("response", html_response(gz.substr(0, gz.size() / 2), "Content-Encoding: gzip\r\n"), "u6", uuid(6));
  write_file(dir.file("enc.warc.gz"), gzip_member(file));
  Drained d = drain(dir.file("enc.warc.gz"));
  ASSERT_EQ(d.docs.size(), 6u);
  EXPECT_EQ(d.docs[0].text, p0);
  EXPECT_EQ(d.docs[1].text, p1);
  EXPECT_EQ(d.docs[2].text, p2);
  EXPECT_EQ(d.docs[3].text, p3);
  EXPECT_EQ(d.docs[4].text, p0);
  EXPECT_EQ(d.docs[4].url, "u5");
  EXPECT_GT(d.docs[5].text.size(), 100u);
  EXPECT_EQ(p1.compare(0, d.docs[5].text.size(), d.docs[5].text), 0);
  ASSERT_EQ(d.issues.size(), 1u);
  EXPECT_EQ(d.issues[0].reason, "unsupported_encoding");
}

TEST(ReaderWarc, CharsetComesFromTheHttpContentType) {
  TempDir dir;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"text/html; charset=ISO-8859-1", "iso-8859-1"},
      {"text/html;charset=\"GBK\"", "gbk"},
      {"text/html; Charset = 'Shift_JIS' ; foo=bar", "shift_jis"},
      {"application/xhtml+xml; charset=utf-8", "utf-8"},
      {"TEXT/HTML", ""},
      {"text/html; notcharset=x", ""}};
  std::string file;
  for (const auto& [ct, cs] : cases) file += warc_record("response", http("Content-Type: " + ct + "\r\n", page(0)));
  // no Content-Type at all: sniffed as HTML from the body
  file += warc_record("response", http("", page(1)));
  write_file(dir.file("cs.warc"), file);
  Drained d = drain(dir.file("cs.warc"));
  ASSERT_EQ(d.docs.size(), cases.size() + 1);
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(d.docs[i].charset, cases[i].second) << cases[i].first;
  EXPECT_EQ(d.docs.back().text, page(1));
  // with no WARC-Record-ID the id falls back to the source
  EXPECT_EQ(d.docs[0].id, d.docs[0].source);
}

TEST(ReaderWarc, WetConversionRecordsArePlainText) {
  TempDir dir;
  const std::string en = doc_file("python3.11-doc/html/_sources/bugs.rst.txt");
  const std::string zh = doc_file("linux-doc-6.1/html/_sources/translations/zh_CN/index.rst.txt");
  std::string file = warc_record("warcinfo", "software: test\r\nformat: WARC File Format 1.1\r\n");
  const std::string r1 = warc_record("conversion", en, "https://docs.python.org/3/bugs.html", uuid(1),
                                     "WARC-Refers-To: <urn:uuid:x>\r\nContent-Type: text/plain\r\n");
  const std::string r2 = warc_record("conversion", "Caf\xe9 " + zh, "https://kernel.org/zh", uuid(2),
                                     "Content-Type: text/plain\r\n");
  const std::string r3 = warc_record("conversion", "  \r\n", "https://empty", uuid(3));
  file += r1 + r2 + r3;
  // Common Crawl style: one gzip member per record
  std::string gz;
  size_t pos = 0;
  for (const std::string& r : {file.substr(0, file.size() - r1.size() - r2.size() - r3.size()), r1, r2, r3}) {
    gz += gzip_member(r);
    pos += r.size();
  }
  write_file(dir.file("CC-MAIN-x.warc.wet.gz"), gz);
  Drained d = drain(dir.file("CC-MAIN-x.warc.wet.gz"));
  EXPECT_EQ(d.format, InputFormat::kWarc);
  ASSERT_EQ(d.docs.size(), 2u);
  EXPECT_EQ(d.docs[0].text, en);
  EXPECT_FALSE(d.docs[0].is_html);
  EXPECT_EQ(d.docs[0].url, "https://docs.python.org/3/bugs.html");
  EXPECT_EQ(d.docs[0].id, uuid(1));
  EXPECT_EQ(d.docs[1].text, "Caf\xEF\xBF\xBD " + zh);
  EXPECT_TRUE(utf8_valid(d.docs[1].text));
  ASSERT_EQ(d.issues.size(), 1u);
  EXPECT_EQ(d.issues[0].reason, "invalid_utf8");
  EXPECT_EQ(d.issues[0].offset, file.size() - r2.size() - r3.size());
  EXPECT_EQ(d.counts["empty"], 1u);
}

TEST(ReaderWarc, OtherRecordTypesAndNonHtmlAreSkippedSilently) {
  TempDir dir;
  std::string file;
  file += warc_record("warcinfo", "software: x\r\n");
  file += warc_record("request", "GET / HTTP/1.1\r\nHost: a\r\n\r\n", "http://a/");
  file += warc_record("metadata", "fetchTimeMs: 12\r\n", "http://a/");
  file += warc_record("revisit", "HTTP/1.1 200 OK\r\n\r\n", "http://a/");
  file += warc_record("resource", page(0), "file:///x");
  file += warc_record("response", http("Content-Type: image/png\r\n", doc_file("python3.11-doc/html/_images/tk_msg.png")));
  file += warc_record("response", http("Content-Type: application/pdf\r\n", "%PDF-1.4"));
  file += warc_record("response", "dns answer, not HTTP", "dns:example.org");
  file += warc_record("response", html_response("<html>moved</html>").replace(9, 6, "301 Moved"));
  file += warc_record("response", html_response(""));
  file += warc_record("response", html_response(page(2)), "http://kept/");
  write_file(dir.file("mixed.warc"), file);
  Drained d = drain(dir.file("mixed.warc"));
  ASSERT_EQ(d.docs.size(), 1u);
  EXPECT_EQ(d.docs[0].url, "http://kept/");
  EXPECT_TRUE(d.issues.empty());
  EXPECT_EQ(d.counts["non_html"], 2u);
  EXPECT_EQ(d.counts["non_http"], 1u);
  EXPECT_EQ(d.counts["http_status"], 1u);
  EXPECT_EQ(d.counts["empty"], 1u);
}

TEST(ReaderWarc, OversizedRecordsAreSkippedWithoutLosingTheNextOnes) {
  TempDir dir;
  const std::string big = doc_file("python3.11-doc/html/library/zlib.html");  // ~50 KB
  std::string file;
  file += warc_record("response", html_response(page(0)), "a");
  const uint64_t off_big = file.size();
  file += warc_record("response", html_response(big), "big");
  file += warc_record("response", html_response(page(1)), "b");
  // an oversized image: skipped and counted, not reported
  file += warc_record("response", http("Content-Type: image/png\r\n", std::string(60000, 'p')), "img");
  file += warc_record("response", html_response(page(2)), "c");
  // a wrong, huge Content-Length over the limit: the next record is found inside the claimed block
  const uint64_t off_wrong = file.size();
  file += "WARC/1.0\r\nWARC-Type: response\r\nContent-Length: 999999999\r\n\r\nHTTP/1.1 200 OK\r\n\r\n<html>x</html>\r\n\r\n";
  file += warc_record("response", html_response(page(3)), "d");
  write_file(dir.file("big.warc"), file);
  ReaderOptions opt;
  opt.max_record_bytes = 30000;
  Drained d = drain(dir.file("big.warc"), opt);
  ASSERT_EQ(d.docs.size(), 4u);
  EXPECT_EQ(d.docs[0].url, "a");
  EXPECT_EQ(d.docs[1].url, "b");
  EXPECT_EQ(d.docs[2].url, "c");
  EXPECT_EQ(d.docs[3].url, "d");
  EXPECT_EQ(d.docs[3].text, page(3));
  std::vector<std::pair<uint64_t, std::string>> got;
  for (const auto& i : d.issues) got.emplace_back(i.offset, i.reason);
  EXPECT_EQ(got, (std::vector<std::pair<uint64_t, std::string>>{{off_big, "record_too_long"},
                                                                  {off_wrong, "bad_warc_length"}}));
  EXPECT_EQ(d.counts["non_html"], 1u);
}
