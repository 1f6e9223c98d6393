// The English function-word and Chinese stop-word lists behind english_stop_id and zh_stop_id,
// as small open-addressing tables built once. Not a tokenizer: callers hand in packed words.
#include <array>
#include <cstdint>
#include <cstring>

#include "smelt/refine/language.hpp"

namespace smelt {
namespace {

// Gopher's eight first (Rae et al. 2021, A.1.1), then frequent English function words that are
// rare as words in other Latin-script languages ("a", "in", "on", "an", "was", "will", "die",
// "so" and "do" are left out: they are common words in French, German, Italian or Portuguese).
constexpr const char* kEnglish[] = {
    "the", "be", "to", "of", "and", "that", "have", "with",
    "is", "are", "were", "been", "has", "had", "it", "its", "this", "these", "those", "for",
    "from", "by", "at", "as", "or", "not", "but", "which", "who", "they", "you", "we", "he",
    "she", "his", "her", "their", "there", "would", "can", "could", "if", "what", "when", "more",
    "one", "also", "than", "then", "into", "about", "my", "our", "does", "may", "should", "only",
    "them", "such", "some", "other", "your", "how", "because", "where"};

// Frequent Chinese function characters and words; one id each (a 64-bit mask holds them all).
constexpr const char32_t kZhSingle[] = {
    U'的', U'了', U'是', U'在', U'和', U'有', U'我', U'这', U'不', U'人', U'也', U'就', U'都', U'上',
    U'他', U'们', U'你', U'她', U'它', U'中', U'为', U'与', U'及', U'或', U'被', U'把', U'对', U'从',
    U'到', U'而', U'但', U'所'};
constexpr const char32_t kZhPair[][2] = {
    {U'一', U'个'}, {U'我', U'们'}, {U'他', U'们'}, {U'你', U'们'}, {U'没', U'有'}, {U'什', U'么'},
    {U'这', U'个'}, {U'那', U'个'}, {U'因', U'为'}, {U'所', U'以'}, {U'但', U'是'}, {U'可', U'以'},
    {U'自', U'己'}, {U'如', U'果'}, {U'这', U'些'}, {U'已', U'经'}};
static_assert(std::size(kZhSingle) + std::size(kZhPair) == kZhStopWords);
static_assert(kZhStopWords <= 64);

struct Filter {
  uint64_t bits[64] = {};
  constexpr void add(char32_t c) { bits[(c >> 6) & 63] |= uint64_t{1} << (c & 63); }
};
constexpr Filter make_filter() {
  Filter f;
  for (char32_t c : kZhSingle) f.add(c);
  for (auto& p : kZhPair) { f.add(p[0]); f.add(p[1]); }
  return f;
}
constexpr Filter kFilter = make_filter();

// Linear-probing table of 256 uint64 keys (0 = empty) -> id.
struct Table {
  std::array<uint64_t, 256> key{};
  std::array<int8_t, 256> id{};
  static size_t slot(uint64_t k) { return (k * 0x9E3779B97F4A7C15ULL) >> 56; }
  void add(uint64_t k, int v) {
    size_t s = slot(k);
    while (key[s] != 0) s = (s + 1) & 255;
    key[s] = k;
    id[s] = static_cast<int8_t>(v);
  }
  int find(uint64_t k) const {
    for (size_t s = slot(k);; s = (s + 1) & 255) {
      if (key[s] == k) return id[s];
      if (key[s] == 0) return -1;
    }
  }
};

uint64_t pack_ascii(const char* w) {
  uint64_t k = 0;
  for (size_t i = 0; w[i]; ++i) k |= static_cast<uint64_t>(static_cast<unsigned char>(w[i])) << (8 * i);
  return k;
}

// Chinese keys: first code point in the low 32 bits, second (or 0) in the high 32 bits.
uint64_t pack_zh(char32_t a, char32_t b) { return static_cast<uint64_t>(a) | (static_cast<uint64_t>(b) << 32); }

const Table& english_table() {
  static const Table t = [] {
    Table x;
    for (size_t i = 0; i < std::size(kEnglish); ++i) x.add(pack_ascii(kEnglish[i]), static_cast<int>(i));
    return x;
  }();
  return t;
}

const Table& zh_table() {
  static const Table t = [] {
    Table x;
    int id = 0;
    for (char32_t c : kZhSingle) x.add(pack_zh(c, 0), id++);
    for (auto& p : kZhPair) x.add(pack_zh(p[0], p[1]), id++);
    return x;
  }();
  return t;
}

}  // namespace

int english_stop_id(uint64_t packed_lower) {
  if (packed_lower == 0) return -1;
  return english_table().find(packed_lower);
}

extern const uint64_t kZhStopFilter[64];
const uint64_t kZhStopFilter[64] = {
#define R(i) kFilter.bits[i], kFilter.bits[i + 1], kFilter.bits[i + 2], kFilter.bits[i + 3]
    R(0),  R(4),  R(8),  R(12), R(16), R(20), R(24), R(28),
    R(32), R(36), R(40), R(44), R(48), R(52), R(56), R(60)
#undef R
};

int zh_stop_id(char32_t first, char32_t second) { return zh_table().find(pack_zh(first, second)); }

}  // namespace smelt
