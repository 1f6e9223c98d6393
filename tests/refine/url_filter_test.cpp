// url_filter.hpp on a small UT1-shaped folder written per test (categories adult/ and gambling/),
// one test per matching rule of url_filter.cpp; and text/idna.hpp (RFC 3492's own samples, Python's
// punycode codec for the others), which the host rule stands on. Not a speed test.
#include "smelt/refine/url_filter.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <thread>

#include "smelt/common/config_schema.hpp"
#include "smelt/text/idna.hpp"
#include "test_files.hpp"

using namespace smelt;
namespace fs = std::filesystem;

namespace {

// ---- text/idna ----------------------------------------------------------------------------

std::string puny(std::u32string_view s) {
  std::string out;
  EXPECT_TRUE(punycode_encode(s, out));
  return out;
}

TEST(Punycode, Rfc3492Samples) {
  // RFC 3492 section 7.1: (A) Arabic (Egyptian), (B) Chinese (simplified), (L) 3<nen>B<gumi>...
  std::u32string a = {0x0644, 0x064A, 0x0647, 0x0645, 0x0627, 0x0628, 0x062A, 0x0643, 0x0644,
                      0x0645, 0x0648, 0x0634, 0x0639, 0x0631, 0x0628, 0x064A, 0x061F};
  EXPECT_EQ(puny(a), "egbpdaj6bu4bxfgehfvwxn");
  EXPECT_EQ(puny(U"他们为什么不说中文"), "ihqwcrb4cv8a8dqg056pqjye");
  EXPECT_EQ(puny(U"3年B組金八先生"), "3B-ww4c5e180e575a65lsy2b");
  // Python's "punycode" codec for these.
  EXPECT_EQ(puny(U"bücher"), "bcher-kva");
  EXPECT_EQ(puny(U"münchen-casino"), "mnchen-casino-wob");
  EXPECT_EQ(puny(U"ü"), "tda");
  EXPECT_EQ(puny(U"пример"), "e1afmkfd");
  EXPECT_EQ(puny(U"abc"), "abc-");
  std::u32string back;
  ASSERT_TRUE(punycode_decode("3B-ww4c5e180e575a65lsy2b", back));
  EXPECT_EQ(back, U"3年B組金八先生");
  ASSERT_TRUE(punycode_decode("egbpdaj6bu4bxfgehfvwxn", back));
  EXPECT_EQ(back, a);
}

TEST(Punycode, RoundTripsRandomStringsAndRefusesBadInput) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    std::u32string s;
    for (int n = static_cast<int>(rng() % 12); n >= 0; --n) {
      uint32_t c = rng() % 4 == 0 ? 'a' + rng() % 26 : 0x80 + rng() % 0x2FF80;
      if (c >= 0xD800 && c <= 0xDFFF) c = 'z';
      s.push_back(static_cast<char32_t>(c));
    }
    std::string enc;
    ASSERT_TRUE(punycode_encode(s, enc));
    std::u32string dec;
    ASSERT_TRUE(punycode_decode(enc, dec)) << enc;
    EXPECT_EQ(dec, s) << enc;
  }
  std::string out;
  EXPECT_FALSE(punycode_encode(std::u32string(1, char32_t{0xD800}), out));
  std::u32string dec;
  EXPECT_FALSE(punycode_decode("ab-!", dec));     // not a digit
  EXPECT_FALSE(punycode_decode("b\xc3\xbc-a", dec));  // non-basic before the delimiter
  EXPECT_FALSE(punycode_decode("99999999999", dec));  // overflow
}

std::string ascii_host(std::string_view h) {
  std::string out;
  EXPECT_TRUE(idna_to_ascii(h, out)) << h;
  return out;
}

TEST(Idna, HostsTakeTheirAsciiForm) {
  EXPECT_EQ(ascii_host("Bücher.DE"), "xn--bcher-kva.de");
  EXPECT_EQ(ascii_host("BÜCHER.de"), "xn--bcher-kva.de");
  EXPECT_EQ(ascii_host("xn--BCHER-kva.de"), "xn--bcher-kva.de");
  EXPECT_EQ(ascii_host("faß.de"), "xn--fa-hia.de");  // non-transitional: ß stays
  EXPECT_EQ(ascii_host("пример。рф"), "xn--e1afmkfd.xn--p1ai");  // ideographic full stop
  EXPECT_EQ(ascii_host("ｅｘａｍｐｌｅ．com"), "example.com");  // full-width: NFKC
  EXPECT_EQ(ascii_host("bu\xcc\x88" "cher.de"), "xn--bcher-kva.de");  // u + combining diaeresis: NFC
  std::string out;
  EXPECT_FALSE(idna_to_ascii("b\xff.de", out));
}

// ---- normalisation (rules 1, 2, 5) --------------------------------------------------------

std::pair<std::string, std::string> norm(std::string_view url) {
  std::string host, path;
  url_filter_normalise(url, host, path);
  return {host, path};
}

TEST(UrlFilterNormalise, SchemeUserinfoPortCaseDotAndWww) {
  using P = std::pair<std::string, std::string>;
  EXPECT_EQ(norm("https://WWW.Example.COM./A/b?Q=1#Frag"), (P{"example.com", "/a/b?q=1"}));
  EXPECT_EQ(norm("http://user:pw@example.com:8080/x"), (P{"example.com", "/x"}));
  EXPECT_EQ(norm("example.com:8080"), (P{"example.com", ""}));
  EXPECT_EQ(norm("example.com/page"), (P{"example.com", "/page"}));
  EXPECT_EQ(norm("//cdn.example.com/x"), (P{"cdn.example.com", "/x"}));
  EXPECT_EQ(norm("  ftp://example.com?x  "), (P{"example.com", "?x"}));
  EXPECT_EQ(norm("http://[2001:DB8::1]:443/"), (P{"[2001:db8::1]", "/"}));
  EXPECT_EQ(norm("http://www.com/"), (P{"www.com", "/"}));  // a dot must remain
  EXPECT_EQ(norm("http://www.www.example.com"), (P{"www.example.com", ""}));  // one www. only
  EXPECT_EQ(norm("http://Bücher.de/Ä"), (P{"xn--bcher-kva.de", "/Ä"}));  // path: ASCII case only
  std::string host, path;
  EXPECT_FALSE(url_filter_normalise("", host, path));
  EXPECT_FALSE(url_filter_normalise("https:///path", host, path));
}

TEST(UrlFilterNormalise, WordsSplitAtNonAlphanumerics) {
  std::vector<std::string> w;
  url_filter_words("https://Free-PORN.example.com/Videos_2024/x%20Casino?q=Straße#hidden", w);
  EXPECT_EQ(w, (std::vector<std::string>{"free", "porn", "example", "com", "videos", "2024", "x", "casino",
                                         "q", "straße"}));
  url_filter_words("http://user:secret@site.ru/ПОРНО-видео", w);
  EXPECT_EQ(w, (std::vector<std::string>{"site", "ru", "порно", "видео"}));
}

// ---- lists ----------------------------------------------------------------------------------

class UrlFilterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = fs::temp_directory_path() / ("smelt-url-filter-" + std::to_string(getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(tmp_);
    ut1_ = tmp_ / "blacklists";
    fs::create_directories(ut1_ / "adult");
    fs::create_directories(ut1_ / "gambling");
    write("blacklists/README", "not a category\n");
    write("blacklists/adult/domains",
          "# UT1 adult\n\nexample-adult.com\nWWW.Shouting.NET\nxn--bcher-kva.de\n10.1.2.3\r\n"
          "  spaced.org  \nbad entry.com\n*.wild.org\n");
    write("blacklists/adult/urls", "freehost.com/~user/porn\nvideos.example.org/adult/\nmixed.org\n");
    write("blacklists/gambling/domains", "casino.net\nmünchen-casino.de\nexample-adult.com\n");
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(tmp_);
  }
  void write(const std::string& rel, const std::string& text) { test::write_file((tmp_ / rel).string(), text); }

  std::unique_ptr<UrlFilter> load(UrlFilterConfig c) {
    std::unique_ptr<UrlFilter> f;
    Status s = UrlFilter::load(c, f);
    EXPECT_TRUE(s.is_ok()) << s.message();
    return f;
  }
  UrlFilterConfig ut1() const {
    UrlFilterConfig c;
    c.blocklists = {ut1_.string()};
    return c;
  }
  std::string load_error(const UrlFilterConfig& c) {
    std::unique_ptr<UrlFilter> f;
    Status s = UrlFilter::load(c, f);
    EXPECT_FALSE(s.is_ok());
    return s.message();
  }

  fs::path tmp_, ut1_;
};

TEST_F(UrlFilterTest, DomainsBlockTheirSubdomainsOnly) {
  auto f = load(ut1());
  for (const char* u : {"http://example-adult.com/", "https://a.b.example-adult.com/x", "example-adult.com",
                        "http://shouting.net", "http://www.shouting.net/", "http://SHOUTING.net"})
    EXPECT_TRUE(f->check(u).blocked) << u;
  for (const char* u : {"http://notexample-adult.com/", "http://example-adult.com.evil.org/",
                        "http://example-adult.co/", "http://com/", "http://good.org/example-adult.com"})
    EXPECT_FALSE(f->check(u).blocked) << u;
  UrlFilter::Verdict v = f->check("http://x.Example-Adult.com/page");
  EXPECT_STREQ(v.kind, "domain");
  EXPECT_EQ(v.list, "blacklists");
  EXPECT_EQ(v.category, "adult");  // also in gambling: the category loaded first (by name) wins
  EXPECT_EQ(v.matched, "example-adult.com");
  EXPECT_EQ(f->check("casino.net/poker").category, "gambling");
}

TEST_F(UrlFilterTest, WwwCaseAndTrailingDot) {
  auto f = load(ut1());
  EXPECT_TRUE(f->check("http://WWW.EXAMPLE-ADULT.COM./").blocked);
  EXPECT_TRUE(f->check("http://www.casino.net").blocked);
  EXPECT_EQ(f->check("http://shouting.net").matched, "shouting.net");  // "WWW.Shouting.NET" in the list
}

TEST_F(UrlFilterTest, IdnMatchesEitherSpelling) {
  auto f = load(ut1());
  // punycode in the list, Unicode in the URL
  EXPECT_TRUE(f->check("http://bücher.de/").blocked);
  EXPECT_TRUE(f->check("http://www.BÜCHER.de/").blocked);
  EXPECT_TRUE(f->check("http://shop.xn--bcher-kva.de/").blocked);
  // Unicode in the list, punycode in the URL
  UrlFilter::Verdict v = f->check("https://xn--mnchen-casino-wob.de/");
  EXPECT_TRUE(v.blocked);
  EXPECT_EQ(v.category, "gambling");
  EXPECT_EQ(v.matched, "xn--mnchen-casino-wob.de");
  EXPECT_TRUE(f->check("https://München-Casino.de/").blocked);
  EXPECT_FALSE(f->check("http://bucher.de/").blocked);
}

TEST_F(UrlFilterTest, PortUserinfoNoSchemeAndEmpty) {
  auto f = load(ut1());
  EXPECT_TRUE(f->check("http://user:pw@example-adult.com:8080/x").blocked);
  EXPECT_FALSE(f->check("http://example-adult.com@good.org/").blocked);  // the host is good.org
  EXPECT_TRUE(f->check("example-adult.com/page.html").blocked);
  EXPECT_TRUE(f->check("//example-adult.com/").blocked);
  EXPECT_FALSE(f->check("").blocked);
  EXPECT_FALSE(f->check("   ").blocked);
  EXPECT_FALSE(f->check("http://").blocked);
}

TEST_F(UrlFilterTest, IpAddressesMatchWhole) {
  auto f = load(ut1());
  EXPECT_TRUE(f->check("http://10.1.2.3:80/").blocked);
  EXPECT_FALSE(f->check("http://110.1.2.3/").blocked);
  EXPECT_FALSE(f->check("http://10.1.2.30/").blocked);
}

TEST_F(UrlFilterTest, UrlEntriesMatchHostAndPathPrefix) {
  auto f = load(ut1());
  for (const char* u : {"http://videos.example.org/adult", "http://videos.example.org/adult/",
                        "https://www.videos.example.org/adult/clip?id=3", "videos.example.org/adult?x=1",
                        "http://Videos.Example.org/ADULT/x", "http://freehost.com/~user/porn/index.html",
                        "http://mixed.org/anything", "http://mixed.org"})
    EXPECT_TRUE(f->check(u).blocked) << u;
  for (const char* u : {"http://videos.example.org/adult2", "http://videos.example.org/", "http://example.org/adult",
                        "http://sub.videos.example.org/adult", "http://freehost.com/~user/", "http://sub.mixed.org/",
                        "http://videos.example.org/x#/adult"})
    EXPECT_FALSE(f->check(u).blocked) << u;
  UrlFilter::Verdict v = f->check("http://videos.example.org/adult/clip");
  EXPECT_STREQ(v.kind, "url");
  EXPECT_EQ(v.category, "adult");
  EXPECT_EQ(v.matched, "videos.example.org/adult");
}

TEST_F(UrlFilterTest, CommentsBlankLinesAndMalformedLines) {
  auto f = load(ut1());
  EXPECT_TRUE(f->check("http://spaced.org/").blocked);  // surrounding spaces trimmed
  EXPECT_TRUE(f->check("http://a.wild.org/").blocked);  // "*." dropped
  std::string s = f->summary();
  EXPECT_NE(s.find("1 lists, 2 categories, 8 domains, 3 urls, 0 banned words"), std::string::npos) << s;
  EXPECT_NE(s.find("1 malformed line skipped (first: "), std::string::npos) << s;
  EXPECT_NE(s.find("adult/domains:8: \"bad entry.com\": a space inside"), std::string::npos) << s;
}

TEST_F(UrlFilterTest, BannedWordsAreWholeWordsAnyCase) {
  write("words.txt", "# banned\nPorn\n\nxxx\nnot one\n");
  UrlFilterConfig c;
  c.banned_words = {"Casino", "порно"};
  c.banned_words_files = {(tmp_ / "words.txt").string()};
  auto f = load(c);
  for (const char* u : {"https://site.com/free-porn-videos", "https://PORN.site.com/", "site.com/a%20casino",
                        "http://site.com/?q=XXX", "http://site.ru/ПОРНО-видео", "http://site.com/Casino_Royale"})
    EXPECT_TRUE(f->check(u).blocked) << u;
  for (const char* u : {"https://site.com/pornography", "http://classic.com/", "http://site.com/x#porn",
                        "http://site.com/casinos", "http://porn:pw@site.com/"})
    EXPECT_FALSE(f->check(u).blocked) << u;
  UrlFilter::Verdict v = f->check("https://site.com/free-PORN-videos");
  EXPECT_STREQ(v.kind, "word");
  EXPECT_EQ(v.list, "words.txt");
  EXPECT_EQ(v.matched, "porn");
  EXPECT_EQ(f->check("http://x.com/casino").list, "banned_words");
  EXPECT_NE(f->summary().find("words.txt:5: \"not one\": not one word"), std::string::npos) << f->summary();
}

TEST_F(UrlFilterTest, AllowListWinsOverEveryBlock) {
  write("allow.txt", "safe.example-adult.com\n# comment\n");
  UrlFilterConfig c = ut1();
  c.banned_words = {"porn"};
  c.allow_lists = {(tmp_ / "allow.txt").string()};
  c.allow_domains = {"casino.net"};
  auto f = load(c);
  UrlFilter::Verdict v = f->check("http://safe.example-adult.com/porn");
  EXPECT_FALSE(v.blocked);
  EXPECT_TRUE(v.allowed);
  EXPECT_EQ(v.category, "adult");  // the block it overrode
  EXPECT_FALSE(f->check("http://www.x.safe.example-adult.com/").blocked);
  EXPECT_FALSE(f->check("http://casino.net/porn").blocked);
  EXPECT_TRUE(f->check("http://example-adult.com/").blocked);
  EXPECT_TRUE(f->check("http://other.example-adult.com/").blocked);
  EXPECT_FALSE(f->check("http://good.org/").allowed);  // not blocked: nothing to allow
}

TEST_F(UrlFilterTest, CategoriesCategoryFoldersAndPlainFiles) {
  UrlFilterConfig c = ut1();
  c.categories = {"gambling"};
  auto f = load(c);
  EXPECT_TRUE(f->check("casino.net").blocked);
  EXPECT_EQ(f->check("example-adult.com").category, "gambling");
  EXPECT_FALSE(f->check("shouting.net").blocked);

  c = {};
  c.blocklists = {(ut1_ / "adult").string()};  // one category folder
  f = load(c);
  EXPECT_EQ(f->check("shouting.net").list, "adult");
  EXPECT_EQ(f->check("shouting.net").category, "adult");

  write("mine.txt", "mine.org\nother.org/path/\n");
  c.blocklists = {(tmp_ / "mine.txt").string()};
  c.block_domains = {"Inline.ORG"};
  c.block_urls = {"inline.net/p"};
  f = load(c);
  UrlFilter::Verdict v = f->check("http://a.mine.org");
  EXPECT_EQ(v.list, "mine.txt");
  EXPECT_EQ(v.category, "");
  EXPECT_STREQ(f->check("other.org/path/x").kind, "url");  // a line with a path is a URL entry
  EXPECT_FALSE(f->check("other.org/").blocked);
  EXPECT_EQ(f->check("www.inline.org").list, "block_domains");
  EXPECT_EQ(f->check("inline.net/p/q").list, "block_urls");
}

TEST_F(UrlFilterTest, MissingListsAreClearErrorsAtLoad) {
  UrlFilterConfig c;
  c.blocklists = {(tmp_ / "nope").string()};
  std::string e = load_error(c);
  EXPECT_NE(e.find("[prep.url_filter] blocklists: \"" + (tmp_ / "nope").string() + "\": no such file or folder"),
            std::string::npos) << e;
  EXPECT_NE(e.find("expected a UT1 folder"), std::string::npos) << e;

  fs::create_directories(ut1_ / "empty");
  e = load_error(ut1());
  EXPECT_NE(e.find((ut1_ / "empty").string() + ": holds neither a `domains` nor a `urls` file"), std::string::npos) << e;
  fs::remove(ut1_ / "empty");

  fs::create_directories(tmp_ / "nocat");
  c.blocklists = {(tmp_ / "nocat").string()};
  EXPECT_NE(load_error(c).find("a folder without categories"), std::string::npos);

  c = ut1();
  c.categories = {"adult", "violence"};
  EXPECT_NE(load_error(c).find("categories: \"violence\" is not a subfolder"), std::string::npos);

  c = {};
  c.banned_words_files = {(tmp_ / "words.txt").string()};
  e = load_error(c);
  EXPECT_NE(e.find("banned_words_files: \"" + (tmp_ / "words.txt").string() + "\": no such file"), std::string::npos);
  EXPECT_NE(e.find("expected a file with one word per line"), std::string::npos) << e;
  c = {};
  c.allow_lists = {(tmp_ / "allow.txt").string()};
  EXPECT_NE(load_error(c).find("allow_lists: \""), std::string::npos);
}

TEST_F(UrlFilterTest, ContentHashFollowsTheEntries) {
  uint64_t h = load(ut1())->content_hash();
  EXPECT_EQ(load(ut1())->content_hash(), h);
  write("blacklists/gambling/domains", "münchen-casino.de\nexample-adult.com\ncasino.net\n# reordered\n");
  EXPECT_EQ(load(ut1())->content_hash(), h);  // same entries, same hash
  write("blacklists/gambling/domains", "casino.net\nmünchen-casino.de\nexample-adult.com\npoker.net\n");
  uint64_t h2 = load(ut1())->content_hash();
  EXPECT_NE(h2, h);
  write("blacklists/adult/urls", "freehost.com/~user/porn\n");
  EXPECT_NE(load(ut1())->content_hash(), h2);
  UrlFilterConfig c = ut1();
  c.allow_domains = {"casino.net"};
  EXPECT_NE(load(c)->content_hash(), load(ut1())->content_hash());
}

TEST_F(UrlFilterTest, SameVerdictsFromManyThreads) {
  UrlFilterConfig c = ut1();
  c.banned_words = {"porn"};
  auto f = load(c);
  std::vector<std::string> urls = {"http://a.example-adult.com/", "http://good.org/", "http://bücher.de/",
                                   "videos.example.org/adult/x", "http://site.com/porn", "http://casino.net"};
  std::vector<bool> want;
  for (const auto& u : urls) want.push_back(f->check(u).blocked);
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20000; ++i)
        wrong[t] += f->check(urls[i % urls.size()]).blocked != want[i % urls.size()];
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(want, (std::vector<bool>{true, false, true, true, true, true}));
  for (int w : wrong) EXPECT_EQ(w, 0);
}

TEST_F(UrlFilterTest, ManyDomainsNoFalseVerdicts) {
  std::string text;
  for (int i = 0; i < 100000; ++i) text += "site" + std::to_string(i) + ".example\n";
  write("many.txt", text);
  UrlFilterConfig c;
  c.blocklists = {(tmp_ / "many.txt").string()};
  auto f = load(c);
  int wrong = 0;
  for (int i = 0; i < 100000; i += 7) {
    wrong += !f->check("http://www.site" + std::to_string(i) + ".example/x").blocked;
    wrong += f->check("http://site" + std::to_string(i + 100000) + ".example/x").blocked;
  }
  EXPECT_EQ(wrong, 0);
}

// ---- config ---------------------------------------------------------------------------------

TEST(UrlFilterConfig, ReadWriteValidate) {
  toml::table root = toml::parse(R"(
    [prep.url_filter]
    blocklists = ["/data/ut1/blacklists"]
    categories = ["adult"]
    banned_words = ["porn"]
    allow_domains = ["wikipedia.org"]
  )");
  UrlFilterConfig c;
  std::vector<std::string> errors;
  url_filter_config_read(root, c, errors);
  EXPECT_TRUE(errors.empty());
  EXPECT_EQ(c.categories, std::vector<std::string>{"adult"});
  EXPECT_TRUE(url_filter_config_validate(c).empty());
  EXPECT_TRUE(url_filter_config_active(c));
  toml::table t = url_filter_config_to_toml(c);
  EXPECT_EQ(t.size(), url_filter_config_doc().fields.size());
  EXPECT_EQ(url_filter_config_doc().section, "prep.url_filter");

  root = toml::parse("[prep.url_filter]\nblocklist = [\"x\"]\n");
  errors.clear();
  url_filter_config_read(root, c, errors);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("blocklist"), std::string::npos);

  UrlFilterConfig bad;
  bad.categories = {"adult"};
  bad.banned_words = {"foo-bar", "ok"};
  bad.block_domains = {"example.com/path", "fine.org"};
  bad.block_urls = {"example.com/videos"};
  bad.allow_domains = {"not a domain"};
  std::vector<std::string> e = url_filter_config_validate(bad);
  ASSERT_EQ(e.size(), 4u);
  EXPECT_NE(e[0].find("categories: given without blocklists"), std::string::npos) << e[0];
  EXPECT_NE(e[1].find("block_domains: \"example.com/path\""), std::string::npos) << e[1];
  EXPECT_NE(e[2].find("banned_words: \"foo-bar\": not one word"), std::string::npos) << e[2];
  EXPECT_NE(e[3].find("allow_domains: \"not a domain\": a space inside"), std::string::npos) << e[3];
  EXPECT_FALSE(url_filter_config_active(UrlFilterConfig{}));
  UrlFilterConfig off;
  off.enabled = false;
  off.banned_words = {"x"};
  EXPECT_FALSE(url_filter_config_active(off));
}

}  // namespace
