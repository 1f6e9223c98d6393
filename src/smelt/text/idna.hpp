// Internationalised host names: RFC 3492 Punycode and the ASCII ("xn--") form of a host, so that
// "bücher.de" and "xn--bcher-kva.de" compare equal. Not a full UTS 46 validator: no bidi or
// CONTEXTJ rules, no length limits, no rejection of disallowed code points (a blocklist only
// needs both spellings of one host to map to one key).
#pragma once
#include <string>
#include <string_view>

namespace smelt {

// RFC 3492 section 6.3: the basic code points of in, then the deltas of the others; no "xn--"
// prefix, case kept. False when in holds an invalid code point (> U+10FFFF, a surrogate) or the
// delta overflows 32 bits (out is then unspecified).
bool punycode_encode(std::u32string_view in, std::string& out);
// RFC 3492 section 6.2, the inverse; false on a non-basic byte, a bad digit or overflow.
bool punycode_decode(std::string_view in, std::u32string& out);

// The ASCII form of a host name, label by label: the host is mapped as UTS 46 non-transitional
// processing (the WHATWG URL standard's choice) maps it, approximated with utf8proc: lower case,
// NFKC, default-ignorable code points dropped; U+3002, U+FF0E and U+FF61 separate labels like
// '.'; then every label with a non-ASCII code point becomes "xn--" + punycode and ASCII is
// lower-cased. "Bücher.DE" -> "xn--bcher-kva.de", "faß.de" -> "xn--fa-hia.de" (ß is kept).
// Appends to out; false on invalid UTF-8 (out then holds the labels converted so far).
bool idna_to_ascii(std::string_view host, std::string& out);

}  // namespace smelt
