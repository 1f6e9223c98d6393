// GPT-2's bytes_to_unicode (Radford et al. 2019, encoder.py): printable Latin-1 bytes stand for
// themselves, the other 68 bytes map to U+0100.. in order. Not the BPE itself.
#include "smelt/tokenizer/byte_level.hpp"

#include "smelt/common/utf8.hpp"

namespace smelt {

namespace {
struct Alphabet {
  std::array<std::string, 256> text;
  std::array<int16_t, 324> byte_of;  // code point -> byte, -1: not in the alphabet
  Alphabet() {
    byte_of.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; b++) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      char32_t cp = printable ? b : 256 + n++;
      utf8_append(cp, text[b]);
      byte_of[cp] = static_cast<int16_t>(b);
    }
  }
};
const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}
}  // namespace

const std::array<std::string, 256>& byte_level_alphabet() { return alphabet().text; }

bool byte_level_decode(std::string_view s, std::string& out) {
  const Alphabet& a = alphabet();
  size_t i = 0;
  while (i < s.size()) {
    size_t before = i;
    char32_t cp = utf8_next(s, i);
    if (i == before) return false;
    if (cp >= a.byte_of.size() || a.byte_of[cp] < 0) return false;
    out.push_back(static_cast<char>(a.byte_of[cp]));
  }
  return true;
}

std::string byte_level_encode(std::string_view bytes) {
  const auto& t = alphabet().text;
  std::string out;
  for (unsigned char c : bytes) out += t[c];
  return out;
}

}  // namespace smelt
