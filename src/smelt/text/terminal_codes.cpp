#include "smelt/text/terminal_codes.hpp"

namespace smelt {
namespace {

bool in(unsigned char c, unsigned char lo, unsigned char hi) { return c >= lo && c <= hi; }

// The byte at s[i] starts a control code: a C0 control other than the whitespace ones, DEL, or a
// C1 control (U+0080-U+009F, C2 80..9F in UTF-8).
bool control_at(std::string_view s, size_t i) {
  const unsigned char c = s[i];
  if (c < 0x20) return !in(c, '\t', '\r');  // \t \n \v \f \r are 9..13
  if (c == 0x7f) return true;
  return c == 0xc2 && i + 1 < s.size() && in(s[i + 1], 0x80, 0x9f);
}

// A CSI's parameters (0x30-0x3F) and intermediates (0x20-0x2F) from s[i], then its final byte
// (0x40-0x7E): the index past it, or past what matched when the final byte is missing.
size_t skip_csi_body(std::string_view s, size_t i) {
  while (i < s.size() && in(s[i], 0x30, 0x3f)) i++;
  while (i < s.size() && in(s[i], 0x20, 0x2f)) i++;
  if (i < s.size() && in(s[i], 0x40, 0x7e)) i++;
  return i;
}

// A string command's body from s[i] up to BEL or ESC \ (both included), never past a newline.
size_t skip_string_body(std::string_view s, size_t i) {
  for (; i < s.size() && s[i] != '\n'; i++) {
    if (s[i] == '\a') return i + 1;
    if (s[i] == '\x1b' && i + 1 < s.size() && s[i + 1] == '\\') return i + 2;
  }
  return i;
}

// The control code at s[i] (control_at(s, i) holds, and it is not a backspace): the index past it.
size_t skip_code(std::string_view s, size_t i) {
  const unsigned char c = s[i];
  if (c == 0xc2) return (unsigned char)s[i + 1] == 0x9b ? skip_csi_body(s, i + 2) : i + 2;
  if (c != 0x1b || i + 1 == s.size()) return i + 1;
  const char n = s[i + 1];
  if (n == '[') return skip_csi_body(s, i + 2);
  if (n == ']' || n == 'P' || n == 'X' || n == '^' || n == '_') return skip_string_body(s, i + 2);
  size_t j = i + 1;  // ESC, intermediates, one final byte (ESC ( B, ESC 7, ESC =, ...)
  while (j < s.size() && in(s[j], 0x20, 0x2f)) j++;
  if (j < s.size() && in(s[j], 0x30, 0x7e)) j++;
  return j;
}

// A backspace: the last character of out goes, unless out is empty or ends a line.
void erase_last_char(std::string& out) {
  if (out.empty() || out.back() == '\n') return;
  size_t k = out.size() - 1;
  while (k > 0 && ((unsigned char)out[k] & 0xc0) == 0x80) k--;
  out.resize(k);
}

}  // namespace

TerminalStrip strip_terminal_codes(std::string& text) {
  TerminalStrip r;
  const std::string_view s = text;
  size_t i = 0;
  while (i < s.size() && !control_at(s, i)) i++;
  if (i == s.size()) return r;
  std::string out(s.substr(0, i));
  out.reserve(s.size());
  while (i < s.size()) {
    if (!control_at(s, i)) {
      out.push_back(s[i++]);
      continue;
    }
    r.sequences++;
    if (s[i] == '\b') {
      erase_last_char(out);
      i++;
    } else {
      i = skip_code(s, i);
    }
  }
  r.bytes = text.size() - out.size();
  text = std::move(out);
  return r;
}

}  // namespace smelt
