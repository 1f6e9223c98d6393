// pii.hpp: every rule at the top of pii.cpp, masked and not masked, on short inputs whose answer
// is obvious by construction, then counts, overlaps, idempotence, UTF-8 around matches, real text
// and the [prep.pii] section. Not a speed test (the speed is measured in docs/quality.md).
#include "smelt/refine/pii.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "smelt/common/config_schema.hpp"
#include "smelt/common/utf8.hpp"

using namespace smelt;

namespace {

PiiConfig all_kinds() {
  PiiConfig c;
  c.phones = true;
  return c;
}

PiiConfig every_address() {  // private and reserved addresses too
  PiiConfig c = all_kinds();
  c.public_ips_only = false;
  return c;
}

std::string masked(const std::string& in, const PiiConfig& c = all_kinds()) {
  std::string s = in;
  pii_mask(c, s);
  return s;
}

// in masked under c must equal want, and masking the result again must change nothing.
void expect_mask(const std::string& in, const std::string& want, const PiiConfig& c = all_kinds()) {
  std::string s = in;
  PiiCounts n = pii_mask(c, s);
  EXPECT_EQ(s, want) << "input: " << in;
  EXPECT_EQ(n.total() == 0, s == in) << "input: " << in;
  std::string again = s;
  EXPECT_EQ(pii_mask(c, again).total(), 0u) << "input: " << in;
  EXPECT_EQ(again, s) << "input: " << in;
}

void expect_kept(const std::string& in, const PiiConfig& c = all_kinds()) {
  expect_mask(in, in, c);
}

std::string read_data(const std::string& name) {
  std::ifstream f(std::string(SMELT_TEST_DATA) + "/" + name, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_FALSE(ss.str().empty()) << name;
  return ss.str();
}

}  // namespace

TEST(PiiEmail, Masked) {
  expect_mask("Write to john.doe@example.com today.", "Write to email@example.com today.");
  expect_mask("<a@b.org>", "<email@example.com>");
  expect_mask("(a@b.org),", "(email@example.com),");
  expect_mask("mail a@b.org.", "mail email@example.com.");
  expect_mask("mailto:x_y+tag@mail.example.co.uk", "mailto:email@example.com");
  expect_mask("o'brien!#$%&*=?^`{|}~-x@ex-ample.io", "email@example.com");
  expect_mask("mjd-perl-memoize+@plover.com", "email@example.com");
  expect_mask("first.m.last@sub.dept.example.org;", "email@example.com;");
  expect_mask("A1@B2.Example.COM", "email@example.com");
  expect_mask("git@github.com:user/repo.git", "email@example.com:user/repo.git");
  expect_mask("user@xn--mnchen-3ya.de and user@example.xn--p1ai",
              "email@example.com and email@example.com");
}

TEST(PiiEmail, InsideWordsAndPunctuation) {
  // The whole well-formed address is masked, whatever letters it is glued to.
  expect_mask("xuser@example.com", "email@example.com");
  expect_mask("x.user@example.comfoo", "email@example.com");
  expect_mask("user@example.com_x", "email@example.com_x");  // '_' cannot continue a domain
  // Leading atext punctuation and ".." are not part of the local part.
  expect_mask("=john@x.com", "=email@example.com");
  expect_mask("'john@x.com'", "'email@example.com'");
  expect_mask("see...john@x.com", "see...email@example.com");
  expect_mask("a..john@x.com", "a..email@example.com");
  expect_mask("a@b.com@c.org", "email@example.com@c.org");  // the first address wins
  // '/' ends the local part: on the web it is a path.
  expect_mask("http://host.org/contact/a@b.org", "http://host.org/contact/email@example.com");
  expect_mask("{ann,bob}@cs.example.edu", "{ann,email@example.com");  // RFC atext: '}' is one
}

TEST(PiiEmail, NotMasked) {
  for (const char* s :
       {"user@localhost", "lodash@4.17.21", "react@latest", "name at host dot com",
        "name [at] host.com", "name(at)host.com", "@handle and @user.name", "a@b.c",
        "john.@x.com", ".@x.com", "a@-b.org", "a@b-.org", "a@b..org", "a@.org", "user@example.1",
        "josé@example.com", "user@münchen.de", "user@example.中国", "2@3.45", "@@@@",
        "a@b.org-based", "\"quoted name\"@ x.org"}) {
    expect_kept(s);
  }
  // A local part longer than 64 bytes is not an address (base64, hashes).
  expect_kept(std::string(65, 'a') + "@example.com");
  expect_mask(std::string(64, 'a') + "@example.com", "email@example.com");
  // Labels of 63 bytes at most.
  expect_kept("a@" + std::string(64, 'b') + ".com");
}

TEST(PiiEmail, Utf8AroundTheAddress) {
  expect_mask("请联系john@example.com获取资料", "请联系email@example.com获取资料");
  expect_mask("邮箱：a.b@c-d.cn。", "邮箱：email@example.com。");
  std::string s = "电子邮件user@example.org，谢谢";
  pii_mask(all_kinds(), s);
  EXPECT_TRUE(utf8_valid(s));
  EXPECT_EQ(s, "电子邮件email@example.com，谢谢");
}

TEST(PiiIpv4, Masked) {
  expect_mask("Server 8.8.8.8 answered", "Server 0.0.0.0 answered");
  expect_mask("(8.8.4.4).", "(0.0.0.0).");
  expect_mask("8.8.8.8:53 and 1.1.1.0/24", "0.0.0.0:53 and 0.0.0.0/24");
  expect_mask("from 23.1.2.3-23.1.2.9", "from 0.0.0.0-0.0.0.0");
  expect_mask("255.0.0.1", "255.0.0.1");  // 224/3 is not public
  expect_mask("223.255.255.255", "0.0.0.0");
  expect_mask("服务器8.8.8.8。", "服务器0.0.0.0。");
  // A known false positive: a four-part version number that is a valid public address.
  expect_mask("Linux 2.6.32.1", "Linux 0.0.0.0");
}

TEST(PiiIpv4, NotMasked) {
  for (const PiiConfig& c : {all_kinds(), every_address()})
    for (const char* s : {"1.2.3.4.5", "v1.2.3.4", "10.0.0.256", "01.2.3.4", "8.8.8.08", "8.8.8.8a",
                          "a8.8.8.8", "x.8.8.8.8", "8.8.8.8.x", "1.2.3", "999.1.1.1", "1.2.3.4567",
                          "8.8.8", "8..8.8.8", "1234.5.6.7"})
      expect_kept(s, c);
}

TEST(PiiIpv4, PublicOnly) {
  for (const char* s : {"0.1.2.3", "10.0.0.1", "100.64.0.0", "127.0.0.1", "169.254.1.1",
                        "172.16.0.0", "172.31.255.255", "192.0.0.8", "192.0.2.1", "192.88.99.1",
                        "192.168.1.1", "198.18.0.1", "198.19.255.255", "198.51.100.7",
                        "203.0.113.9", "224.0.0.1", "240.0.0.1", "255.255.255.255"}) {
    expect_kept(s);
    expect_mask(s, s == std::string("0.0.0.0") ? s : "0.0.0.0", every_address());
  }
  for (const char* s : {"100.63.255.255", "100.128.0.0", "172.15.255.255", "172.32.0.0",
                        "192.169.0.0", "198.20.0.0", "11.0.0.1", "126.255.255.255", "128.0.0.1"})
    expect_mask(s, "0.0.0.0");
}

TEST(PiiIpv6, Masked) {
  expect_mask("dns 2001:4860:4860::8888.", "dns ::.");
  expect_mask("2a00:1450:4001:0828:0000:0000:0000:200e", "::");
  expect_mask("2001:4860:4860:0:0:0:0:8888", "::");
  expect_mask("[2606:4700:4700::1111]:443", "[::]:443");
  expect_mask("2001:4860::8888 is 2001:4860:0:0:0:0:0:8888", ":: is ::");
  expect_mask("2A00:1450:4001:828::200E", "::");
  expect_mask("2001:4860:4860::", "::");  // a trailing "::"
  expect_mask("地址2001:4860:4860::8888。", "地址::。");
  std::string s = "::ffff:8.8.8.8";  // IPv4-mapped: one IPv6 address
  PiiCounts n = pii_mask(all_kinds(), s);
  EXPECT_EQ(s, "::");
  EXPECT_EQ(n.ipv6, 1u);
  EXPECT_EQ(n.ipv4, 0u);
}

TEST(PiiIpv6, NotMasked) {
  for (const PiiConfig& c : {all_kinds(), every_address()})
    for (const char* s :
         {"12:30:45", "at 12:30", "2024-01-15 12:30:45.123", "00:1a:2b:3c:4d:5e",
          "00-1A-2B-3C-4D-5E", "00:1a:2b:ff:fe:3c:4d:5e", "std::vector<int>", "a::b::c", "ab::cd",
          "Foo::Bar", "fe80::1", "::1", "::", "1:2:3:4:5:6:7:8", "2001:4860:4860::8888::1",
          "2001:4860:4860:0:0:0:0:8888:1", "x2001:4860:4860::8888", "2001:4860:4860::8888x",
          "2001:4860:4860::88888", "1.2001:4860:4860::8888", "2001:4860:4860:0:0:0:8888",
          "::ffff:1.2.3.4.5"})
      expect_kept(s, c);
}

TEST(PiiIpv6, PublicOnly) {
  for (const char* s : {"2001:db8::1:2", "2001:db8:85a3::8a2e:370:7334", "3fff:0:0::1",
                        "fe80::1ff:fe23:4567:890a", "fd00:1234:5678::1", "ff02::1:ff00:1",
                        "0000:0:0:0:0:0:0:1", "::ffff:10.0.0.1", "::ffff:192.168.1.1",
                        "64:ff9b::a00:1", "cafe::bad:1"}) {
    expect_kept(s);
    std::string m = masked(s, every_address());
    EXPECT_TRUE(m == "::" || m == "0.0.0.0") << s << " -> " << m;
  }
  expect_mask("fe80::1ff:fe23:4567:890a%eth0", "::%eth0", every_address());
  expect_mask("3fff:1000::1", "::");  // just past 3fff::/20
}

TEST(PiiPhone, Masked) {
  expect_mask("call +1 (555) 123-4567 now", "call 000-000-0000 now");
  expect_mask("555-123-4567", "000-000-0000");
  expect_mask("(555) 123-4567.", "000-000-0000.");
  expect_mask("(555)123-4567", "000-000-0000");
  expect_mask("555.123.4567 or 555 123 4567", "000-000-0000 or 000-000-0000");
  expect_mask("1-800-555-0199", "000-000-0000");
  expect_mask("+1-555-123-4567", "000-000-0000");
  expect_mask("Tel: +44 20 7946 0958.", "Tel: 000-000-0000.");
  expect_mask("+33 1 23 45 67 89", "000-000-0000");
  expect_mask("+44 (0)20 7946 0958", "000-000-0000");
  expect_mask("+49-30-12345678", "000-000-0000");
  expect_mask("+14155552671", "000-000-0000");
  expect_mask("电话：+86 138 0013 8000。", "电话：000-000-0000。");
  // The groups stop before the digit that would pass 15 (E.164's limit).
  expect_mask("+44 20 7946 0958 123456", "000-000-0000 123456");
  // ... and before a group glued to a letter (here the start of an e-mail address).
  expect_mask("+44 20 7946 0958A1a@b.org", "000-000-0000 email@example.com");
}

TEST(PiiPhone, NotMasked) {
  for (const char* s :
       {"5551234567", "2024-01-15", "2024-01-15T12:30", "123-456-7890", "055-123-4567",
        "555 123-4567", "555-123.4567", "555-123-4567-89", "555-123-45678", "ISBN 978-555-123-4567",
        "x555-123-4567", "+12", "+1234567", "+2024-01-15", "020 7946 0958", "1+555123",
        "+1234567890123456", "12.10.2023", "C++ 555", "(555) 123-456", "+44 (0)", "8.8.8.8"}) {
    PiiConfig c = all_kinds();
    c.ips = false;
    expect_kept(s, c);
  }
  // Off by default.
  std::string s = "call 555-123-4567";
  EXPECT_EQ(pii_mask(PiiConfig{}, s).total(), 0u);
  EXPECT_EQ(s, "call 555-123-4567");
}

TEST(PiiMask, CountsPerKind) {
  std::string s =
      "Mail a@b.org or c.d@e.co.uk; hosts 8.8.8.8, 1.1.1.1 and 10.0.0.1; "
      "v6 2001:4860:4860::8888; phone +44 20 7946 0958, (555) 123-4567, 555-123-4567.";
  PiiCounts n = pii_mask(all_kinds(), s);
  EXPECT_EQ(n.emails, 2u);
  EXPECT_EQ(n.ipv4, 2u);
  EXPECT_EQ(n.ipv6, 1u);
  EXPECT_EQ(n.phones, 3u);
  EXPECT_EQ(n.total(), 8u);
  EXPECT_EQ(s,
            "Mail email@example.com or email@example.com; hosts 0.0.0.0, 0.0.0.0 and 10.0.0.1; "
            "v6 ::; phone 000-000-0000, 000-000-0000, 000-000-0000.");
  PiiCounts sum;
  sum += n;
  sum += n;
  EXPECT_EQ(sum.total(), 16u);
  EXPECT_EQ(sum.phones, 6u);

  std::vector<PiiMatch> m;
  pii_find(all_kinds(), "x 8.8.8.8 a@b.org", m);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].begin, 2u);
  EXPECT_EQ(m[0].end, 9u);
  EXPECT_STREQ(pii_kind_name(m[0].kind), "ipv4");
  EXPECT_STREQ(pii_kind_name(m[1].kind), "email");
}

TEST(PiiMask, OverlapsFirstStartWins) {
  // An e-mail whose local part is a dotted quad: one e-mail, no IPv4.
  std::string s = "8.8.8.8@example.com";
  PiiCounts n = pii_mask(all_kinds(), s);
  EXPECT_EQ(s, "email@example.com");
  EXPECT_EQ(n.emails, 1u);
  EXPECT_EQ(n.ipv4, 0u);
  // An e-mail domain cannot hold an IPv4 ("a@8.8.8.8" has no letter TLD), and an IPv4 followed by
  // ".name" is part of a longer dotted run.
  expect_mask("a@8.8.8.8", "a@0.0.0.0");
  expect_mask("a@8.8.8.8.nip.io", "email@example.com");  // a well-formed domain
  expect_kept("host 8.8.8.8.nip.io");
}

TEST(PiiMask, SecondPassForGluedMatches) {
  // The '+' touches the IPv6 address, so the phone number is not one until the address is "::".
  std::string s = "2001:4860:4860::8888+44 20 7946 0958";
  PiiCounts n = pii_mask(all_kinds(), s);
  EXPECT_EQ(s, "::000-000-0000");
  EXPECT_EQ(n.ipv6, 1u);
  EXPECT_EQ(n.phones, 1u);
  expect_mask("2001:4860:4860::8888+44 20 7946 0958", "::000-000-0000");
}

TEST(PiiMask, IdempotentAndPlaceholdersNotCounted) {
  const std::string text =
      "a@b.org 8.8.8.8 2001:4860:4860::8888 +44 20 7946 0958 10.0.0.1 fe80::1:2:3 "
      "<x@y.com>, (8.8.4.4). 请联系john@example.com获取 =z@q.net ...w@v.info";
  for (const PiiConfig& c : {all_kinds(), every_address()}) {
    std::string once = text;
    EXPECT_GT(pii_mask(c, once).total(), 0u);
    std::string twice = once;
    EXPECT_EQ(pii_mask(c, twice).total(), 0u);
    EXPECT_EQ(twice, once);
  }
  // A placeholder in the input is left and not counted, but still found.
  std::string s = "email@example.com and 0.0.0.0";
  EXPECT_EQ(pii_mask(every_address(), s).total(), 0u);
  std::vector<PiiMatch> m;
  pii_find(every_address(), s, m);
  EXPECT_EQ(m.size(), 2u);
}

TEST(PiiMask, IdempotentOnGluedPieces) {
  // Addresses, numbers and punctuation glued at random: the hardest case for idempotence.
  const char* pieces[] = {"8.8.8.8", "a@b.org", "2001:4860::8888", "::", "+44 20 7946 0958",
                          "555-123-4567", "中", "@", "::ffff:", "1.", ".", ":", "0", "f", "x", " ",
                          "-", "+", "(", "]", "_", "/"};
  uint64_t state = 7;
  auto next = [&state] {  // a 64-bit LCG (Knuth's MMIX constants)
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return state >> 33;
  };
  uint64_t found = 0;
  for (int it = 0; it < 20000; ++it) {
    std::string s;
    for (uint64_t k = next() % 16; k > 0; --k) s += pieces[next() % std::size(pieces)];
    for (const PiiConfig& c : {all_kinds(), every_address()}) {
      std::string once = s;
      found += pii_mask(c, once).total();
      std::string twice = once;
      ASSERT_EQ(pii_mask(c, twice).total(), 0u) << s << " -> " << once << " -> " << twice;
      ASSERT_TRUE(utf8_valid(once)) << s;
    }
  }
  EXPECT_GT(found, 10000u);
}

TEST(PiiMask, SwitchesAndPlaceholders) {
  const std::string text = "a@b.org 8.8.8.8 2001:4860:4860::8888 555-123-4567";
  PiiConfig off = all_kinds();
  off.enabled = false;
  expect_kept(text, off);
  PiiConfig no_mail = all_kinds();
  no_mail.emails = false;
  expect_mask(text, "a@b.org 0.0.0.0 :: 000-000-0000", no_mail);
  PiiConfig no_ip = all_kinds();
  no_ip.ips = false;
  expect_mask(text, "email@example.com 8.8.8.8 2001:4860:4860::8888 000-000-0000", no_ip);
  PiiConfig own = all_kinds();
  own.email_placeholder = "<EMAIL>";
  own.ipv4_placeholder = "<IP>";
  own.ipv6_placeholder = "";
  own.phone_placeholder = "<电话>";
  expect_mask(text, "<EMAIL> <IP>  <电话>", own);
}

TEST(PiiMask, ThreadsAgree) {
  std::string text;
  for (int i = 0; i < 200; ++i)
    text += "word " + std::to_string(i) + " u" + std::to_string(i) + "@host.org 8.8." +
            std::to_string(i % 256) + ".1 中文 ";
  std::string want = text;
  PiiCounts n = pii_mask(all_kinds(), want);
  EXPECT_EQ(n.emails, 200u);
  EXPECT_EQ(n.ipv4, 200u);
  std::vector<std::string> got(8, text);
  std::vector<std::thread> th;
  for (auto& g : got) th.emplace_back([&g] { pii_mask(all_kinds(), g); });
  for (auto& t : th) t.join();
  for (const auto& g : got) EXPECT_EQ(g, want);
}

TEST(PiiMask, RealText) {
  // Kernel, Python and MAINTAINERS text, English and Chinese: every '@' in them but one
  // ("@dataclass" in english.txt) is in an e-mail address, and nothing else is an address or a
  // phone number (all kinds on, private addresses included). The result stays valid UTF-8.
  struct Case { const char* name; uint64_t emails; };
  for (const Case& k : {Case{"dedup/en_kernel_howto.txt", 4}, Case{"dedup/zh_kernel_howto.txt", 10},
                        Case{"dedup/en_python_floatingpoint.txt", 1},
                        Case{"dedup/zh_kernel_management_style.txt", 1},
                        Case{"quality/maintainers.txt", 27}, Case{"quality/zh_prose.txt", 1},
                        Case{"quality/en_prose.txt", 0}, Case{"tokenizer/chinese.txt", 21},
                        Case{"tokenizer/english.txt", 0}}) {
    std::string text = read_data(k.name);
    std::string once = text;
    PiiCounts n = pii_mask(every_address(), once);
    EXPECT_EQ(n.emails, k.emails) << k.name;
    EXPECT_EQ(n.total(), n.emails) << k.name;
    EXPECT_TRUE(utf8_valid(once)) << k.name;
    std::string twice = once;
    EXPECT_EQ(pii_mask(every_address(), twice).total(), 0u) << k.name;
    EXPECT_EQ(twice, once) << k.name;
  }
}

TEST(PiiConfig, ReadValidateRoundTrip) {
  toml::table root = toml::parse(
      "[prep.pii]\nenabled = true\nemails = false\nips = true\npublic_ips_only = false\n"
      "phones = true\nemail_placeholder = \"<EMAIL>\"\nipv4_placeholder = \"<IPV4>\"\n"
      "ipv6_placeholder = \"<IPV6>\"\nphone_placeholder = \"<PHONE>\"\n");
  PiiConfig c;
  std::vector<std::string> errs;
  pii_config_read(root, c, errs);
  EXPECT_TRUE(errs.empty());
  EXPECT_FALSE(c.emails);
  EXPECT_FALSE(c.public_ips_only);
  EXPECT_TRUE(c.phones);
  EXPECT_EQ(c.email_placeholder, "<EMAIL>");
  EXPECT_EQ(c.phone_placeholder, "<PHONE>");
  EXPECT_TRUE(pii_config_validate(c).empty());

  toml::table back;
  config_insert(back, "prep.pii", pii_config_to_toml(c));
  PiiConfig d;
  pii_config_read(back, d, errs);
  EXPECT_TRUE(errs.empty());
  EXPECT_EQ(pii_config_to_toml(d), pii_config_to_toml(c));
  EXPECT_EQ(pii_config_to_toml(PiiConfig{}).size(), 9u);
  EXPECT_EQ(pii_config_doc().section, "prep.pii");
  EXPECT_EQ(pii_config_doc().fields.size(), 9u);

  toml::table typo = toml::parse("[prep.pii]\nemail = false\nphones = \"yes\"\n");
  PiiConfig e;
  pii_config_read(typo, e, errs);
  ASSERT_EQ(errs.size(), 2u);  // unknown key, wrong type
  EXPECT_NE((errs[0] + errs[1]).find("email"), std::string::npos);
  EXPECT_TRUE(e.emails);
  EXPECT_FALSE(e.phones);
}

TEST(PiiConfig, DefaultsAndBadPlaceholders) {
  EXPECT_TRUE(pii_config_validate(PiiConfig{}).empty());
  EXPECT_TRUE(pii_config_validate(every_address()).empty());
  PiiConfig c = all_kinds();
  c.ipv4_placeholder = "x@y.org";  // an e-mail address: masking would not be idempotent
  auto e = pii_config_validate(c);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_NE(e[0].find("[prep.pii] ipv4_placeholder = \"x@y.org\": would be masked again"),
            std::string::npos) << e[0];
  c = all_kinds();
  c.email_placeholder = "line\nbreak";
  c.phone_placeholder = "\xff";
  EXPECT_EQ(pii_config_validate(c).size(), 2u);
  c = all_kinds();
  c.phone_placeholder = "+1 555 123 4567";
  EXPECT_EQ(pii_config_validate(c).size(), 0u);  // equal to itself: left and not counted
  c.phone_placeholder = "call +1 555 123 4567";
  EXPECT_EQ(pii_config_validate(c).size(), 1u);
}
