// GPT-2's byte-level alphabet: each byte as a printable character (bytes_to_unicode), the form in
// which tokenizer.json stores vocabulary and merges. Internal to tokenizer/.
#pragma once
#include <array>
#include <string>
#include <string_view>

namespace smelt {

// byte -> the UTF-8 text of its alphabet character
const std::array<std::string, 256>& byte_level_alphabet();
// alphabet text -> raw bytes; false when a character is not in the alphabet
bool byte_level_decode(std::string_view s, std::string& out);
std::string byte_level_encode(std::string_view bytes);

}  // namespace smelt
