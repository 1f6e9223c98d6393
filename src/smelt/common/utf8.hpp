// UTF-8 helpers: decode one code point, validate, repair. Not a Unicode database (that is utf8proc).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace smelt {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Decodes the code point starting at s[i]; advances i past it. Invalid or truncated sequences
// (overlongs, surrogates, > U+10FFFF) yield U+FFFD and advance one byte.
char32_t utf8_next(std::string_view s, size_t& i);

// True if s is well-formed UTF-8.
bool utf8_valid(std::string_view s);

// Byte offset of the first invalid sequence, or s.size() when s is valid.
size_t utf8_first_invalid(std::string_view s);

// Appends s to out with each maximal ill-formed subpart replaced by one U+FFFD (Unicode section 3.9,
// as Python and the WHATWG decoder do); returns how many were replaced.
size_t utf8_repair_append(std::string_view s, std::string& out);

// Appends the UTF-8 encoding of cp to out.
void utf8_append(char32_t cp, std::string& out);

// Number of code points (invalid bytes count one each).
size_t utf8_length(std::string_view s);

}  // namespace smelt
