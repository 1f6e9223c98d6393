// charset.hpp: header and <meta> sniffing, and iconv conversion of real Chinese pages (GBK, Big5)
// and hand-made byte sequences whose decoding is known. Not the HTML extractor (html_extract_test).
#include "smelt/text/charset.hpp"

#include <gtest/gtest.h>

#include "test_files.hpp"
#include <iconv.h>

#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "smelt/common/utf8.hpp"

using namespace smelt;

namespace {

std::string read_page(const std::string& name) { return test::read_file(std::string(SMELT_SOURCE_DIR) + "/bench/prep/pages/" + name); }

// Encodes UTF-8 text into `to` with glibc iconv directly (the test's own, independent encoder).
std::string encode(const std::string& utf8, const char* to) {
  iconv_t cd = iconv_open(to, "UTF-8");
  EXPECT_NE(cd, reinterpret_cast<iconv_t>(-1));
  std::string out(utf8.size() * 2 + 16, '\0');
  char* in = const_cast<char*>(utf8.data());
  size_t in_left = utf8.size();
  char* o = out.data();
  size_t o_left = out.size();
  size_t r = iconv(cd, &in, &in_left, &o, &o_left);
  EXPECT_NE(r, static_cast<size_t>(-1)) << "text not representable in " << to;
  iconv_close(cd);
  out.resize(out.size() - o_left);
  return out;
}

size_t count(const std::string& s, std::string_view needle) {
  size_t n = 0;
  for (size_t p = 0; (p = s.find(needle, p)) != std::string::npos; p += needle.size()) ++n;
  return n;
}

}  // namespace

TEST(Charset, FromContentType) {
  EXPECT_EQ(charset_from_content_type("text/html; charset=GBK"), "gbk");
  EXPECT_EQ(charset_from_content_type("text/html;charset=\"Big5\""), "big5");
  EXPECT_EQ(charset_from_content_type("text/html; Charset = 'utf-8'; q=1"), "utf-8");
  EXPECT_EQ(charset_from_content_type("text/html"), "");
  EXPECT_EQ(charset_from_content_type(""), "");
  EXPECT_EQ(charset_from_content_type("text/html; charset="), "");
}

TEST(Charset, SniffHtml) {
  EXPECT_EQ(charset_sniff_html("<html><head><meta charset=\"gb2312\"></head>"), "gb2312");
  EXPECT_EQ(charset_sniff_html("<META HTTP-EQUIV='Content-Type' CONTENT='text/html; charset=Big5'>"), "big5");
  EXPECT_EQ(charset_sniff_html("<meta charset=utf-8>"), "utf-8");
  EXPECT_EQ(charset_sniff_html("<meta name=description content=x><meta charset='GBK'/>"), "gbk");
  EXPECT_EQ(charset_sniff_html("\xEF\xBB\xBF<meta charset=gbk>"), "utf-8");  // the BOM wins
  EXPECT_EQ(charset_sniff_html("\xFF\xFE<\0h\0"), "utf-16le");
  EXPECT_EQ(charset_sniff_html("<p>charset=gbk in text is not a declaration</p>"), "");
  EXPECT_EQ(charset_sniff_html(std::string(5000, ' ') + "<meta charset=gbk>"), "");  // beyond 4 KiB
  EXPECT_EQ(charset_sniff_html(read_page("zh_docs_kernel_highmem_gbk.html")), "gbk");
  EXPECT_EQ(charset_sniff_html(read_page("zh_docs_kernel_bug_bisect_big5.html")), "big5");
  EXPECT_EQ(charset_sniff_html(read_page("news_cnn.html")), "iso-8859-1");
}

TEST(Charset, KnownSequences) {
  std::string out;
  EXPECT_EQ(charset_to_utf8("\xD6\xD0\xCE\xC4", "gbk", out), 0u);  // 中文 in GBK
  EXPECT_EQ(out, "中文");
  EXPECT_EQ(charset_to_utf8("\xD6\xD0\xCE\xC4", "GB2312", out), 0u);
  EXPECT_EQ(out, "中文");
  EXPECT_EQ(charset_to_utf8("\x81\x30\x81\x30", "gb18030", out), 0u);  // four-byte GB18030: U+0080
  EXPECT_EQ(out, "\xC2\x80");
  EXPECT_EQ(charset_to_utf8("\xA4\xA4\xA4\xE5", "big5", out), 0u);  // 中文 in Big5
  EXPECT_EQ(out, "中文");
  EXPECT_EQ(charset_to_utf8("\x93quoted\x94 caf\xE9", "iso-8859-1", out), 0u);  // WHATWG: windows-1252
  EXPECT_EQ(out, "“quoted” café");
  EXPECT_EQ(charset_to_utf8(std::string("\xFF\xFEh\0i\0", 6), "", out), 0u);  // sniffed UTF-16LE BOM
  EXPECT_EQ(out, "hi");
  EXPECT_EQ(charset_to_utf8("\xEF\xBB\xBFplain", "", out), 0u);  // UTF-8 BOM dropped
  EXPECT_EQ(out, "plain");
}

TEST(Charset, InvalidBytesBecomeReplacementAndDecodingGoesOn) {
  std::string out;
  // GBK: a lone lead byte between valid characters
  size_t bad = charset_to_utf8("\xD6\xD0\xFF\xCE\xC4", "gbk", out);
  EXPECT_GE(bad, 1u);
  EXPECT_EQ(out.rfind("中", 0), 0u);
  EXPECT_NE(out.find("\xEF\xBF\xBD"), std::string::npos);
  EXPECT_EQ(out.substr(out.size() - 3), "文");
  // truncated at the end
  bad = charset_to_utf8("\xA4\xA4\xA4", "big5", out);
  EXPECT_EQ(bad, 1u);
  EXPECT_EQ(out, "中\xEF\xBF\xBD");
  // UTF-8 with garbage, and an unknown charset falls back to UTF-8
  EXPECT_EQ(charset_to_utf8("a\xFF" "b", "utf-8", out), 1u);
  EXPECT_EQ(out, "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(charset_to_utf8("a\xC3\xA9\xFF", "x-no-such-charset", out), 1u);
  EXPECT_EQ(out, "aé\xEF\xBF\xBD");
  EXPECT_TRUE(utf8_valid(out));
}

TEST(Charset, ValidUtf8WinsOverAStaleLegacyDeclaration) {
  std::string out;
  EXPECT_EQ(charset_to_utf8("<meta charset=gbk>中文", "", out), 0u);
  EXPECT_EQ(out, "<meta charset=gbk>中文");
  EXPECT_EQ(charset_to_utf8("中文", "big5", out), 0u);
  EXPECT_EQ(out, "中文");
}

TEST(Charset, RealChinesePageRoundTripsThroughGb18030) {
  // a real UTF-8 Chinese page, encoded by iconv itself, must decode to exactly the original
  const std::string page = read_page("zh_news_bbc.html");
  ASSERT_GT(page.size(), 10000u);
  ASSERT_TRUE(utf8_valid(page));
  std::string out;
  // (GB18030 covers all of Unicode; this page has a few characters outside GBK)
  for (const char* enc : {"GB18030"}) {
    std::string encoded = encode(page, enc);
    ASSERT_FALSE(utf8_valid(encoded));
    EXPECT_EQ(charset_to_utf8(encoded, "gbk", out), 0u) << enc;
    EXPECT_EQ(out, page) << enc;
  }
}

TEST(Charset, RealBig5AndGbkPagesFromTheBenchmarkSet) {
  std::string out;
  EXPECT_EQ(charset_to_utf8(read_page("zh_docs_kernel_bug_bisect_big5.html"), "", out), 0u);
  EXPECT_GT(count(out, "二分"), 5u);
  EXPECT_NE(out.find("（英文版）最後更新：2016年10月28日"), std::string::npos);
  EXPECT_EQ(charset_to_utf8(read_page("zh_docs_kernel_highmem_gbk.html"), "", out), 0u);
  EXPECT_NE(out.find("高内存是什么？"), std::string::npos);
  // the declared charset from a header overrides nothing when it agrees
  EXPECT_EQ(charset_to_utf8(read_page("zh_docs_kernel_highmem_gbk.html"), "GBK", out), 0u);
  EXPECT_NE(out.find("高内存是什么？"), std::string::npos);
}

TEST(Charset, ThreadsKeepTheirOwnConverters) {
  const std::string page = read_page("zh_news_bbc.html");
  const std::string gbk = encode(page, "GB18030");
  const std::string big5 = read_page("zh_docs_kernel_bug_bisect_big5.html");
  std::string big5_utf8;
  charset_to_utf8(big5, "big5", big5_utf8);
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::string out;
      int good = 0;
      for (int i = 0; i < 20; ++i) {
        charset_to_utf8(gbk, "gbk", out);
        good += out == page;
        charset_to_utf8(big5, "big5", out);
        good += out == big5_utf8;
      }
      ok[t] = good;
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(ok[t], 40);
}
