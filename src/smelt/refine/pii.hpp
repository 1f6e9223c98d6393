// Personal-data masking for prep: e-mail addresses, IPv4 and IPv6 addresses and (off by default)
// phone numbers are replaced by fixed placeholders, as datatrove's PIIFormatter does for FineWeb.
// A hand-written scanner (no regex); the exact rules are at the top of pii.cpp and in
// docs/quality.md. Not names, street addresses, IDs or secrets, and not obfuscated addresses
// ("name at host dot com").
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "smelt/common/config.hpp"

namespace smelt {

struct PiiConfig {
  bool enabled = true;          // prep's switch: false leaves every document as it is
  bool emails = true;
  bool ips = true;              // IPv4 and IPv6
  bool public_ips_only = true;  // leave private, loopback, link-local, documentation, multicast
                                // and reserved ranges (they identify no one; datatrove's default)
  bool phones = false;          // off by default: phone shapes are looser than addresses
  std::string email_placeholder = "email@example.com";  // RFC 2606 reserved domain
  std::string ipv4_placeholder = "0.0.0.0";             // unspecified address (RFC 1122)
  std::string ipv6_placeholder = "::";                  // unspecified address (RFC 4291)
  std::string phone_placeholder = "000-000-0000";       // no valid number has area code 000
};

// Reads [prep.pii] of root into c through its field table: wrong types and unknown keys go to
// errors; the values are judged by pii_config_validate.
void pii_config_read(const toml::table& root, PiiConfig& c, std::vector<std::string>& errors);
// The section with every key (the resolved config).
toml::table pii_config_to_toml(const PiiConfig& c);
struct SectionDoc;
SectionDoc pii_config_doc();  // [prep.pii]'s field table (docs check)

// Every placeholder must be valid UTF-8 without line breaks and must not be masked again by c
// (so masking stays idempotent). One message per bad key ("[prep.pii] email_placeholder = ...");
// empty when c is usable.
std::vector<std::string> pii_config_validate(const PiiConfig& c);

struct PiiCounts {
  uint64_t emails = 0, ipv4 = 0, ipv6 = 0, phones = 0;
  uint64_t total() const { return emails + ipv4 + ipv6 + phones; }
  PiiCounts& operator+=(const PiiCounts& o);
};

// Replaces every match of the kinds c enables by its placeholder, in place, and counts them.
// Deterministic and thread-safe (no state). Matches are ASCII, so valid UTF-8 stays valid. A
// match equal to its placeholder is left and not counted. Where matches overlap, the one that
// starts first wins (the longer one at the same start). A replacement changes the neighbours of
// the text around it ("8888+44 20 7946 0958": the phone number is glued to the IPv6 address
// until that becomes "::"), so a pass that replaced something is followed by another, at most
// kPiiMaxPasses in all: masking masked text then changes nothing. Most documents take one pass,
// those with matches two.
inline constexpr int kPiiMaxPasses = 4;
PiiCounts pii_mask(const PiiConfig& c, std::string& text);

// One match, for tests and tools: text[begin, end) is an address of kind.
enum class PiiKind : uint8_t { kEmail, kIpv4, kIpv6, kPhone };
struct PiiMatch {
  size_t begin = 0, end = 0;
  PiiKind kind = PiiKind::kEmail;
};
// Every match, in text order, not overlapping; a match equal to its placeholder is included (it
// still occupies its place: pii_mask just leaves it).
void pii_find(const PiiConfig& c, std::string_view text, std::vector<PiiMatch>& out);
const char* pii_kind_name(PiiKind k);  // "email", "ipv4", "ipv6", "phone"

}  // namespace smelt
