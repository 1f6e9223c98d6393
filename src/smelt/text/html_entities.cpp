// HTML character references: the named-entity table and the decoder for &name; &#NNN; &#xHHH;.
// Not the full HTML5 list (2,231 names): the 253 of HTML 4.01 plus about 110 common HTML5 additions
// (apos, typographic quotes and dashes, arrows, Latin Extended-A letters, ASCII punctuation names).
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "smelt/common/utf8.hpp"
#include "smelt/text/html_extract.hpp"

namespace smelt {
namespace {

struct Entity {
  std::string_view name;
  uint32_t cp;
};

// Sorted by name (byte order), for binary search.
constexpr Entity kEntities[] = {
    {"AElig", 0xC6}, {"AMP", 0x26}, {"Aacute", 0xC1}, {"Acirc", 0xC2}, {"Agrave", 0xC0},
    {"Alpha", 0x391}, {"Aogon", 0x104}, {"Aring", 0xC5}, {"Atilde", 0xC3}, {"Auml", 0xC4},
    {"Beta", 0x392}, {"COPY", 0xA9}, {"Cacute", 0x106}, {"Ccaron", 0x10C}, {"Ccedil", 0xC7},
    {"Chi", 0x3A7}, {"Dagger", 0x2021}, {"Delta", 0x394}, {"ETH", 0xD0}, {"Eacute", 0xC9},
    {"Ecaron", 0x11A}, {"Ecirc", 0xCA}, {"Egrave", 0xC8}, {"Eogon", 0x118}, {"Epsilon", 0x395},
    {"Eta", 0x397}, {"Euml", 0xCB}, {"GT", 0x3E}, {"Gamma", 0x393}, {"Gbreve", 0x11E}, {"Hat", 0x5E},
    {"Iacute", 0xCD}, {"Icirc", 0xCE}, {"Idot", 0x130}, {"Igrave", 0xCC}, {"Iota", 0x399},
    {"Iuml", 0xCF}, {"Kappa", 0x39A}, {"LT", 0x3C}, {"Lambda", 0x39B}, {"LeftArrow", 0x2190},
    {"Lstrok", 0x141}, {"MediumSpace", 0x205F}, {"Mu", 0x39C}, {"Nacute", 0x143}, {"NewLine", 0xA},
    {"NoBreak", 0x2060}, {"Ntilde", 0xD1}, {"Nu", 0x39D}, {"OElig", 0x152}, {"Oacute", 0xD3},
    {"Ocirc", 0xD4}, {"Ograve", 0xD2}, {"Omega", 0x3A9}, {"Omicron", 0x39F}, {"Oslash", 0xD8},
    {"Otilde", 0xD5}, {"Ouml", 0xD6}, {"Phi", 0x3A6}, {"Pi", 0x3A0}, {"Prime", 0x2033}, {"Psi", 0x3A8},
    {"QUOT", 0x22}, {"REG", 0xAE}, {"Rcaron", 0x158}, {"Rho", 0x3A1}, {"RightArrow", 0x2192},
    {"Sacute", 0x15A}, {"Scaron", 0x160}, {"Scedil", 0x15E}, {"Sigma", 0x3A3}, {"THORN", 0xDE},
    {"TRADE", 0x2122}, {"Tab", 0x9}, {"Tau", 0x3A4}, {"Theta", 0x398}, {"Uacute", 0xDA},
    {"Ucirc", 0xDB}, {"Ugrave", 0xD9}, {"Upsilon", 0x3A5}, {"Uring", 0x16E}, {"Uuml", 0xDC},
    {"Xi", 0x39E}, {"Yacute", 0xDD}, {"Yuml", 0x178}, {"Zacute", 0x179}, {"Zcaron", 0x17D},
    {"Zdot", 0x17B}, {"ZeroWidthSpace", 0x200B}, {"Zeta", 0x396}, {"aacute", 0xE1}, {"acirc", 0xE2},
    {"acute", 0xB4}, {"aelig", 0xE6}, {"agrave", 0xE0}, {"alefsym", 0x2135}, {"alpha", 0x3B1},
    {"amp", 0x26}, {"and", 0x2227}, {"ang", 0x2220}, {"angst", 0xC5}, {"aogon", 0x105}, {"apos", 0x27},
    {"aring", 0xE5}, {"ast", 0x2A}, {"asymp", 0x2248}, {"atilde", 0xE3}, {"auml", 0xE4},
    {"bdquo", 0x201E}, {"beta", 0x3B2}, {"brvbar", 0xA6}, {"bsol", 0x5C}, {"bull", 0x2022},
    {"cacute", 0x107}, {"cap", 0x2229}, {"caret", 0x2041}, {"ccaron", 0x10D}, {"ccedil", 0xE7},
    {"cedil", 0xB8}, {"cent", 0xA2}, {"check", 0x2713}, {"chi", 0x3C7}, {"cir", 0x25CB},
    {"circ", 0x2C6}, {"clubs", 0x2663}, {"colon", 0x3A}, {"comma", 0x2C}, {"commat", 0x40},
    {"cong", 0x2245}, {"copy", 0xA9}, {"copysr", 0x2117}, {"crarr", 0x21B5}, {"cross", 0x2717},
    {"cup", 0x222A}, {"curren", 0xA4}, {"dArr", 0x21D3}, {"dagger", 0x2020}, {"darr", 0x2193},
    {"dash", 0x2010}, {"dcaron", 0x10F}, {"deg", 0xB0}, {"delta", 0x3B4}, {"diams", 0x2666},
    {"divide", 0xF7}, {"dollar", 0x24}, {"eacute", 0xE9}, {"ecaron", 0x11B}, {"ecirc", 0xEA},
    {"egrave", 0xE8}, {"ell", 0x2113}, {"empty", 0x2205}, {"emsp", 0x2003}, {"ensp", 0x2002},
    {"eogon", 0x119}, {"epsilon", 0x3B5}, {"equals", 0x3D}, {"equiv", 0x2261}, {"eta", 0x3B7},
    {"eth", 0xF0}, {"euml", 0xEB}, {"euro", 0x20AC}, {"excl", 0x21}, {"exist", 0x2203},
    {"female", 0x2640}, {"flat", 0x266D}, {"fnof", 0x192}, {"forall", 0x2200}, {"frac12", 0xBD},
    {"frac13", 0x2153}, {"frac14", 0xBC}, {"frac23", 0x2154}, {"frac34", 0xBE}, {"frasl", 0x2044},
    {"gamma", 0x3B3}, {"gbreve", 0x11F}, {"ge", 0x2265}, {"grave", 0x60}, {"gt", 0x3E},
    {"hArr", 0x21D4}, {"hairsp", 0x200A}, {"half", 0xBD}, {"harr", 0x2194}, {"hearts", 0x2665},
    {"hellip", 0x2026}, {"hyphen", 0x2010}, {"iacute", 0xED}, {"icirc", 0xEE}, {"iexcl", 0xA1},
    {"igrave", 0xEC}, {"image", 0x2111}, {"incare", 0x2105}, {"infin", 0x221E}, {"inodot", 0x131},
    {"int", 0x222B}, {"iota", 0x3B9}, {"iquest", 0xBF}, {"isin", 0x2208}, {"iuml", 0xEF},
    {"kappa", 0x3BA}, {"lArr", 0x21D0}, {"lambda", 0x3BB}, {"lang", 0x27E8}, {"laquo", 0xAB},
    {"larr", 0x2190}, {"lbrace", 0x7B}, {"lbrack", 0x5B}, {"lceil", 0x2308}, {"lcub", 0x7B},
    {"ldquo", 0x201C}, {"le", 0x2264}, {"leftarrow", 0x2190}, {"lfloor", 0x230A}, {"lowast", 0x2217},
    {"lowbar", 0x5F}, {"loz", 0x25CA}, {"lpar", 0x28}, {"lrm", 0x200E}, {"lsaquo", 0x2039},
    {"lsqb", 0x5B}, {"lsquo", 0x2018}, {"lstrok", 0x142}, {"lt", 0x3C}, {"macr", 0xAF},
    {"male", 0x2642}, {"mdash", 0x2014}, {"micro", 0xB5}, {"midast", 0x2A}, {"middot", 0xB7},
    {"minus", 0x2212}, {"mu", 0x3BC}, {"nabla", 0x2207}, {"nacute", 0x144}, {"natural", 0x266E},
    {"nbsp", 0xA0}, {"ncaron", 0x148}, {"ndash", 0x2013}, {"ne", 0x2260}, {"ni", 0x220B},
    {"not", 0xAC}, {"notin", 0x2209}, {"nsub", 0x2284}, {"ntilde", 0xF1}, {"nu", 0x3BD}, {"num", 0x23},
    {"numero", 0x2116}, {"numsp", 0x2007}, {"oacute", 0xF3}, {"ocirc", 0xF4}, {"oelig", 0x153},
    {"ograve", 0xF2}, {"ohm", 0x3A9}, {"oline", 0x203E}, {"omega", 0x3C9}, {"omicron", 0x3BF},
    {"oplus", 0x2295}, {"or", 0x2228}, {"ordf", 0xAA}, {"ordm", 0xBA}, {"oslash", 0xF8},
    {"otilde", 0xF5}, {"otimes", 0x2297}, {"ouml", 0xF6}, {"para", 0xB6}, {"part", 0x2202},
    {"percnt", 0x25}, {"period", 0x2E}, {"permil", 0x2030}, {"perp", 0x22A5}, {"phi", 0x3C6},
    {"phone", 0x260E}, {"pi", 0x3C0}, {"piv", 0x3D6}, {"plus", 0x2B}, {"plusmn", 0xB1},
    {"pound", 0xA3}, {"prime", 0x2032}, {"prod", 0x220F}, {"prop", 0x221D}, {"psi", 0x3C8},
    {"puncsp", 0x2008}, {"quest", 0x3F}, {"quot", 0x22}, {"rArr", 0x21D2}, {"radic", 0x221A},
    {"rang", 0x27E9}, {"raquo", 0xBB}, {"rarr", 0x2192}, {"rbrace", 0x7D}, {"rbrack", 0x5D},
    {"rcaron", 0x159}, {"rceil", 0x2309}, {"rcub", 0x7D}, {"rdquo", 0x201D}, {"real", 0x211C},
    {"reg", 0xAE}, {"rfloor", 0x230B}, {"rho", 0x3C1}, {"rightarrow", 0x2192}, {"rlm", 0x200F},
    {"rpar", 0x29}, {"rsaquo", 0x203A}, {"rsqb", 0x5D}, {"rsquo", 0x2019}, {"sacute", 0x15B},
    {"sbquo", 0x201A}, {"scaron", 0x161}, {"scedil", 0x15F}, {"sdot", 0x22C5}, {"sect", 0xA7},
    {"semi", 0x3B}, {"setminus", 0x2216}, {"sharp", 0x266F}, {"shy", 0xAD}, {"sigma", 0x3C3},
    {"sigmaf", 0x3C2}, {"sim", 0x223C}, {"smallsetminus", 0x2216}, {"sol", 0x2F}, {"spades", 0x2660},
    {"star", 0x2606}, {"starf", 0x2605}, {"sub", 0x2282}, {"sube", 0x2286}, {"sum", 0x2211},
    {"sung", 0x266A}, {"sup", 0x2283}, {"sup1", 0xB9}, {"sup2", 0xB2}, {"sup3", 0xB3},
    {"supe", 0x2287}, {"szlig", 0xDF}, {"tau", 0x3C4}, {"tcaron", 0x165}, {"there4", 0x2234},
    {"theta", 0x3B8}, {"thetasym", 0x3D1}, {"thinsp", 0x2009}, {"thorn", 0xFE}, {"tilde", 0x2DC},
    {"times", 0xD7}, {"trade", 0x2122}, {"uArr", 0x21D1}, {"uacute", 0xFA}, {"uarr", 0x2191},
    {"ucirc", 0xFB}, {"ugrave", 0xF9}, {"uml", 0xA8}, {"upsih", 0x3D2}, {"upsilon", 0x3C5},
    {"uring", 0x16F}, {"uuml", 0xFC}, {"verbar", 0x7C}, {"vert", 0x7C}, {"weierp", 0x2118},
    {"xi", 0x3BE}, {"yacute", 0xFD}, {"yen", 0xA5}, {"yuml", 0xFF}, {"zacute", 0x17A},
    {"zcaron", 0x17E}, {"zdot", 0x17C}, {"zeta", 0x3B6}, {"zwj", 0x200D}, {"zwnj", 0x200C},
};

// Names a browser also accepts without the ';' (the legacy subset that is common in real pages).
constexpr Entity kLegacy[] = {{"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"nbsp", 0xA0},
                              {"copy", 0xA9}, {"reg", 0xAE}, {"AMP", '&'}, {"LT", '<'}, {"GT", '>'}};

// windows-1252 meanings of &#128; .. &#159;, as the HTML5 parser maps them.
constexpr uint16_t kC1[32] = {0x20AC, 0x81,   0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021,
                              0x02C6, 0x2030, 0x0160, 0x2039, 0x0152, 0x8D,   0x017D, 0x8F,
                              0x90,   0x2018, 0x2019, 0x201C, 0x201D, 0x2022, 0x2013, 0x2014,
                              0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0x9D,   0x017E, 0x0178};

bool is_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

bool html_entity_lookup(std::string_view name, char32_t& cp) {
  const Entity* end = kEntities + sizeof(kEntities) / sizeof(kEntities[0]);
  const Entity* it = std::lower_bound(kEntities, end, name,
                                      [](const Entity& e, std::string_view n) { return e.name < n; });
  if (it == end || it->name != name) return false;
  cp = it->cp;
  return true;
}

size_t html_decode_entity(std::string_view s, size_t i, char32_t& cp) {
  const size_t n = s.size();
  if (i >= n || s[i] != '&') return 0;
  size_t j = i + 1;
  if (j < n && s[j] == '#') {
    ++j;
    bool hex = j < n && (s[j] == 'x' || s[j] == 'X');
    if (hex) ++j;
    size_t start = j;
    uint32_t v = 0;
    while (j < n) {
      int d = hex ? hex_value(s[j]) : (s[j] >= '0' && s[j] <= '9' ? s[j] - '0' : -1);
      if (d < 0) break;
      if (v <= 0x10FFFF) v = v * (hex ? 16 : 10) + static_cast<uint32_t>(d);
      ++j;
    }
    if (j == start) return 0;
    if (j < n && s[j] == ';') ++j;
    if (v == 0 || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) v = kReplacementChar;
    else if (v >= 0x80 && v <= 0x9F) v = kC1[v - 0x80];
    cp = v;
    return j - i;
  }
  size_t start = j;
  while (j < n && j - start < 32 && is_alnum(s[j])) ++j;
  if (j == start) return 0;
  std::string_view name = s.substr(start, j - start);
  if (j < n && s[j] == ';' && html_entity_lookup(name, cp)) return j + 1 - i;
  // without ';' (or unknown with it): the longest legacy name that prefixes the run
  size_t best = 0;
  for (const Entity& e : kLegacy) {
    if (e.name.size() > best && name.substr(0, e.name.size()) == e.name) {
      best = e.name.size();
      cp = e.cp;
    }
  }
  return best ? best + 1 : 0;
}

void html_decode_entities(std::string_view s, std::string& out) {
  size_t i = 0;
  while (i < s.size()) {
    size_t amp = s.find('&', i);
    if (amp == std::string_view::npos) amp = s.size();
    out.append(s.data() + i, amp - i);
    i = amp;
    if (i >= s.size()) break;
    char32_t cp;
    size_t len = html_decode_entity(s, i, cp);
    if (len == 0) {
      out.push_back('&');
      ++i;
    } else {
      utf8_append(cp, out);
      i += len;
    }
  }
}

}  // namespace smelt
