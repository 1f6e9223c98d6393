// HTML to main text in one hand-written pass: a lexer (memchr for '<') keeps an element stack and
// cuts visible text into blocks; boilerplate is then dropped by Readability-style container scoring
// and jusText-style block classification. Not a DOM, not a browser, not an HTML5 tree builder.
//
// Selection, after the pass:
//  1. Elements that are boilerplate by name (nav, aside, footer, menu, form controls) or by a
//     class/id/role hint (navigation, menu, sidebar, breadcrumb, comment, share, related, cookie,
//     advert, signature, ...) contribute no text at all (Readability's "unlikely candidates"), nor
//     do hidden ones (hidden, aria-hidden, style display:none, <template>).
//  2. Each text block of 25+ weighted characters scores 1 + commas + min(3, length/100) for the
//     parent of its element, half for the grandparent and a sixth above (Readability, Arc90 2009).
//     A container's score starts from its tag and class/id hints (article/main/articleBody raise
//     it) and is multiplied by (1 - link density). The best container wins; when three of the top
//     five sit under one ancestor, that ancestor wins; siblings scoring near the winner join it.
//  3. Threads (forum posts, comment rows, replies): when the winner, or an ancestor at most 8
//     levels up, has 3+ siblings of the same shape (tag and class, digits ignored) that each hold
//     real text (15+ characters outside links, link density under 0.5), and it holds at most 2/3
//     of their text, all of them are taken, not the longest one alone. Each post is cut as its
//     template says: the element at the winner's place in the first post, found in every post by
//     the same path of shapes, is the post's body and all its text is kept (short lines and bare
//     links too, less lines that recur in half the posts: "reply"); the rest of a post (author,
//     date, number, controls) is dropped. The thread's title (h1, or the block that repeats the
//     page's <title>) and what lies between it and the posts (an opening post kept apart) join.
//  4. The winning blocks are classified as jusText does (Pomikálek 2011): link-dense blocks are
//     bad, long ones good, short ones keep or lose their place by their neighbours; a heading is
//     kept when good text follows it; the page's title before the text is kept (the last h1, or
//     a block that repeats the <title>, with no long text between).
// Lengths are in code points with each CJK character weighted 3, so Chinese pages score like
// English ones without word splitting; Chinese commas and full stops count as punctuation.
// A class hint can be wrong for a whole page: a discussion page is mostly "comment" elements. When
// little survives, or eight times more was dropped for a class than kept, the page is read again
// without class hints.
#include "smelt/text/html_extract.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "smelt/common/cjk.hpp"
#include "smelt/common/utf8.hpp"

namespace smelt {
namespace {

enum TagFlag : uint32_t {
  kBlock = 1u << 0,      // breaks text, gets a Node
  kVoid = 1u << 1,       // never has content
  kRawSkip = 1u << 2,    // content skipped up to the matching end tag
  kBoilerTag = 1u << 3,  // boilerplate by its name alone (when removing boilerplate)
  kHeading = 1u << 4,
  kCell = 1u << 5,       // td, th
  kRow = 1u << 6,        // tr
  kPre = 1u << 7,
  kLink = 1u << 8,       // a
  kTitle = 1u << 9,
  kStrongPos = 1u << 10, // article, main: a container the author marked as content
  kBr = 1u << 11,
  kPara = 1u << 12,      // p
  kLi = 1u << 13,
  kDtDd = 1u << 14,
  kListRoot = 1u << 15,  // ul, ol, menu, dl: end the search for an open li/dt/dd
  kTable = 1u << 16,
  kClosesP = 1u << 17,   // opening it closes an open <p>
  kHr = 1u << 18,
  kBody = 1u << 19,      // html, body: never boilerplate
  kSvgLike = 1u << 20,   // svg, math: may be self-closed
};

struct TagInfo {
  std::string_view name;
  uint32_t flags;
  int8_t base;  // Readability's initial score for a container of this tag
};

constexpr uint32_t kBP = kBlock | kClosesP;

// Sorted by name for binary search. Tags not listed are inline (span, b, em, custom elements...).
constexpr TagInfo kTags[] = {
    {"a", kLink, 0},
    {"address", kBP, -3},
    {"applet", kRawSkip, 0},
    {"area", kVoid, 0},
    {"article", kBP | kStrongPos, 10},
    {"aside", kBP | kBoilerTag, -10},
    {"audio", kRawSkip, 0},
    {"base", kVoid, 0},
    {"blockquote", kBP, 3},
    {"body", kBlock | kBody, 0},
    {"br", kVoid | kBr, 0},
    {"button", kRawSkip, 0},
    {"canvas", kRawSkip, 0},
    {"caption", kBlock, 0},
    {"center", kBP, 0},
    {"col", kVoid, 0},
    {"dd", kBP | kDtDd, -3},
    {"details", kBP, 0},
    {"dialog", kBP | kBoilerTag, 0},
    {"dir", kBP | kListRoot, -3},
    {"div", kBP, 5},
    {"dl", kBP | kListRoot, -3},
    {"dt", kBP | kDtDd, -3},
    {"embed", kVoid, 0},
    {"fieldset", kBP, 0},
    {"figcaption", kBP | kBoilerTag, 0},
    {"figure", kBP, 0},
    {"footer", kBP | kBoilerTag, -10},
    {"form", kBP, -3},
    {"frameset", kRawSkip, 0},
    {"h1", kBP | kHeading, -5},
    {"h2", kBP | kHeading, -5},
    {"h3", kBP | kHeading, -5},
    {"h4", kBP | kHeading, -5},
    {"h5", kBP | kHeading, -5},
    {"h6", kBP | kHeading, -5},
    {"head", kBlock, 0},
    {"header", kBP, 0},
    {"hgroup", kBP, 0},
    {"hr", kVoid | kHr | kClosesP, 0},
    {"html", kBlock | kBody, 0},
    {"iframe", kRawSkip, 0},
    {"img", kVoid, 0},
    {"input", kVoid, 0},
    {"keygen", kVoid, 0},
    {"legend", kBlock, 0},
    {"li", kBP | kLi, -3},
    {"link", kVoid, 0},
    {"main", kBP | kStrongPos, 10},
    {"map", kRawSkip, 0},
    {"math", kRawSkip | kSvgLike, 0},
    {"menu", kBP | kListRoot | kBoilerTag, -3},
    {"meta", kVoid, 0},
    {"nav", kBP | kBoilerTag, -10},
    {"noembed", kRawSkip, 0},
    {"noframes", kRawSkip, 0},
    {"noscript", kRawSkip, 0},
    {"object", kRawSkip, 0},
    {"ol", kBP | kListRoot, -3},
    {"optgroup", kRawSkip, 0},
    {"option", kRawSkip, 0},
    {"p", kBP | kPara, 0},
    {"param", kVoid, 0},
    {"plaintext", kRawSkip, 0},
    {"pre", kBP | kPre, 3},
    {"script", kRawSkip, 0},
    {"section", kBP, 0},
    {"select", kRawSkip, 0},
    {"source", kVoid, 0},
    {"style", kRawSkip, 0},
    {"summary", kBP, 0},
    {"svg", kRawSkip | kSvgLike, 0},
    {"table", kBP | kTable, 0},
    {"tbody", kBlock, 0},
    {"td", kBlock | kCell, 3},
    {"template", kRawSkip, 0},
    {"textarea", kRawSkip, 0},
    {"tfoot", kBlock, 0},
    {"th", kBlock | kCell, -5},
    {"thead", kBlock, 0},
    {"title", kTitle, 0},
    {"tr", kBlock | kRow, 0},
    {"track", kVoid, 0},
    {"ul", kBP | kListRoot, -3},
    {"video", kRawSkip, 0},
    {"wbr", kVoid, 0},
    {"xmp", kRawSkip, 0},
};

const TagInfo* tag_lookup(std::string_view name) {
  const TagInfo* end = kTags + sizeof(kTags) / sizeof(kTags[0]);
  const TagInfo* it =
      std::lower_bound(kTags, end, name, [](const TagInfo& t, std::string_view n) { return t.name < n; });
  return (it != end && it->name == name) ? it : nullptr;
}

// Character classes for the text scanner.
enum : uint8_t { kChNormal = 0, kChSpace = 1, kChAmp = 2 };
struct CharTable {
  uint8_t c[256];
  constexpr CharTable() : c{} {
    c[static_cast<unsigned char>(' ')] = kChSpace;
    c[static_cast<unsigned char>('\t')] = kChSpace;
    c[static_cast<unsigned char>('\n')] = kChSpace;
    c[static_cast<unsigned char>('\r')] = kChSpace;
    c[static_cast<unsigned char>('\f')] = kChSpace;
    c[static_cast<unsigned char>('&')] = kChAmp;
  }
};
constexpr CharTable kChars;

inline char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }
inline bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
inline bool is_ws(char c) { return kChars.c[static_cast<unsigned char>(c)] == kChSpace; }
inline bool is_alnum(char c) { return is_alpha(c) || (c >= '0' && c <= '9'); }

uint32_t hash_name(std::string_view s) {
  uint32_t h = 2166136261u;
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
  return h;
}

// Case-insensitive equality of s[i..] with a lowercase word.
bool match_nocase(std::string_view s, size_t i, std::string_view word) {
  if (i + word.size() > s.size()) return false;
  for (size_t k = 0; k < word.size(); ++k)
    if (lower(s[i + k]) != word[k]) return false;
  return true;
}

// ---- class / id / role hints -------------------------------------------------------------------

// Class/id words are split into tokens at anything not a letter or digit. A token that starts with
// a strong prefix marks the element as boilerplate: its text is dropped.
constexpr std::string_view kStrongNegativePrefixes[] = {
    "comment", "share", "sharing", "social", "related", "cookie", "advert", "promo", "sponsor",
    "newsletter", "subscri", "popup", "modal", "disqus", "outbrain", "taboola", "recommend", "gdpr",
    "consent", "byline", "author", "caption", "credit", "headerlink", "signature"};
constexpr std::string_view kStrongNegativeWords[] = {"ad", "ads", "adv", "share", "embed", "print"};
// Weak ones do the same unless the same class word also says "content" or "body" ("wy-nav-content"
// holds a whole Read the Docs page), like Readability's "maybe candidate" rule, word by word.
constexpr std::string_view kNegativePrefixes[] = {
    "nav", "menu", "breadcrumb", "sidebar", "footer", "widget", "pagination", "pager", "masthead",
    "toolbar", "trending", "popular", "signup", "login", "skip", "dateline", "timestamp", "copyright",
    "tags", "tagcloud", "rss", "footnote", "jump", "banner", "hidden", "screenreader", "sronly",
    "printonly", "breaking", "ticker", "newsticker", "shoutbox", "skyscraper", "donate", "crumbs",
    "meta", "controls"};
constexpr std::string_view kNegativeWords[] = {"tag", "sr", "foot", "top", "login", "date", "time", "noprint"};
// Tokens that raise a container's score (Readability's "positive" pattern).
constexpr std::string_view kPositivePrefixes[] = {"article", "body", "content", "entry", "hentry", "main",
                                                  "page", "post", "text", "blog", "story", "prose",
                                                  "markdown", "document"};
// Tokens that lower it without dropping the text.
constexpr std::string_view kSoftNegativePrefixes[] = {"contact", "media", "scroll", "tool", "extra",
                                                      "header", "combx", "remark", "rail", "aside"};

bool starts_with_any(std::string_view tok, const std::string_view* list, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (tok.size() >= list[i].size() && tok.compare(0, list[i].size(), list[i]) == 0) return true;
  return false;
}

template <size_t N>
bool starts_with_any(std::string_view tok, const std::string_view (&list)[N]) {
  return starts_with_any(tok, list, N);
}

template <size_t N>
bool equals_any(std::string_view tok, const std::string_view (&list)[N]) {
  for (auto w : list)
    if (tok == w) return true;
  return false;
}

struct Hints {
  bool negative = false;  // boilerplate: drop the text
  bool strong_positive = false;
  bool main_content = false;  // role=main, <main>, itemprop=articleBody: the page's one main part
  int weight = 0;         // Readability's class weight: +25 positive, -25 negative
};

// Reads class and id values (already lowercased, concatenated with a space).
void hints_from_class_id(std::string_view v, Hints& h) {
  bool pos = false, soft = false;
  // a table of contents, by whole class words ("toc-backref" on a heading's own link is not one)
  for (size_t w = 0; w < v.size();) {
    size_t e = v.find(' ', w);
    if (e == std::string_view::npos) e = v.size();
    std::string_view word = v.substr(w, e - w);
    if (word == "toc" || word == "table-of-contents" || (word.rfind("toc-", 0) == 0 && word != "toc-backref"))
      h.negative = true;
    w = e + 1;
  }
  // one class word (space separated) at a time: its tokens are the words between '-' and '_'
  for (size_t w = 0; w < v.size();) {
    size_t e = v.find(' ', w);
    if (e == std::string_view::npos) e = v.size();
    bool strong = false, weak = false, word_pos = false, word_content = false;
    size_t i = w;
    char tok[48];
    while (i < e) {
      while (i < e && !is_alnum(v[i])) ++i;
      size_t t = 0;
      while (i < e && is_alnum(v[i])) {
        if (t < sizeof(tok)) tok[t++] = v[i];
        ++i;
      }
      if (t == 0) break;
      std::string_view token(tok, t);
      strong |= starts_with_any(token, kStrongNegativePrefixes) || equals_any(token, kStrongNegativeWords);
      weak |= starts_with_any(token, kNegativePrefixes) || equals_any(token, kNegativeWords);
      word_pos |= starts_with_any(token, kPositivePrefixes);
      word_content |= token.rfind("content", 0) == 0 || token.rfind("body", 0) == 0;
      if (starts_with_any(token, kSoftNegativePrefixes)) soft = true;
      if (token == "articlebody") h.strong_positive = true;
    }
    if (strong || (weak && !word_content)) h.negative = true;
    pos |= word_pos;
    w = e + 1;
  }
  if (pos) h.weight += 25;
  if (soft || h.negative) h.weight -= 25;
}

// ---- the extractor ----------------------------------------------------------------------------

struct Node {      // a block-level element
  int32_t parent;  // node index; -1 for the document
  int32_t end;     // index of its last descendant node
  uint32_t flags;  // TagFlag of its tag
  uint32_t class_hash;
  uint32_t shape;  // tag name and class with digits left out: "post bg1" and "post bg2" match
  uint32_t text_cp = 0, link_cp = 0;  // kept text in its subtree
  uint32_t block_begin = 0, block_end = 0;  // its blocks: [block_begin, block_end) in blocks_
  float score = 0;
  int8_t base = 0;
  int8_t weight = 0;
  bool scored = false;
  bool strong = false;  // article, main, role=main, itemprop=articleBody
};

struct Block {         // one run of text between block boundaries
  uint32_t begin, end; // in text_
  int32_t owner;       // innermost block element
  int32_t row;         // enclosing <tr> node, or -1
  int32_t cell;        // enclosing <td>/<th> node, or -1
  uint32_t cp = 0, cjk = 0, link_cp = 0, commas = 0, stops = 0;
  uint8_t heading = 0;
  bool pre = false;
  uint32_t weighted() const { return cp + 2 * cjk; }
  double link_density() const { return cp ? static_cast<double>(link_cp) / cp : 0.0; }
};

struct Open {          // an element on the stack
  uint32_t name_hash;
  uint32_t flags;
  int32_t node;        // its Node if block-level, else -1
  int32_t saved_row, saved_cell;
  uint8_t heading;     // its level if a heading
  bool boiler, boiler_class, hidden;
  // a main-content element inside class-hinted boilerplate: the depths it suspended
  int saved_boiler_depth;
  uint32_t saved_class_depth;
  bool suspended;
};

constexpr size_t kMaxDepth = 1024;
// How far down the stack an end tag or an implied close looks: bounds the work per tag on hostile
// input (thousands of unmatched end tags) at the price of not repairing deeper mis-nesting.
constexpr size_t kMaxSearch = 256;

class Extractor {
 public:
  Extractor(std::string_view html, const HtmlExtractOptions& opt, bool use_class_hints)
      : s_(html), opt_(opt), remove_(opt.remove_boilerplate), class_hints_(use_class_hints) {}

  void run(HtmlExtractResult& out);
  uint64_t dropped_by_class() const { return dropped_by_class_; }

 private:
  // lexer
  size_t markup(size_t i);
  size_t start_tag(size_t i);
  size_t end_tag(size_t i);
  size_t skip_raw(size_t i, std::string_view name, size_t* close_at = nullptr);
  void text(const char* p, const char* q);
  void append_cp(char32_t cp);
  void line_break();
  // tree
  void open_element(const TagInfo* info, uint32_t hash, const Hints& hints, bool hidden,
                    uint32_t class_hash, uint32_t shape, bool in_page_link);
  void pop_to(size_t k);
  void pop_implied(uint32_t flags);
  void finish_block();
  // selection
  void select(std::vector<uint32_t>& keep);
  void classify(const std::vector<uint32_t>& cand, const std::vector<uint8_t>& post_text,
                std::vector<uint32_t>& keep);
  void emit(const std::vector<uint32_t>& keep, std::string& out);
  double node_final(const Node& n) const {
    double ld = n.text_cp ? static_cast<double>(n.link_cp) / n.text_cp : 0.0;
    return n.score * (1.0 - ld);
  }
  void credit(int32_t node, double s);
  int32_t find_thread(int32_t from) const;
  bool repeats_title(const Block& b) const;
  uint32_t find_title(uint32_t before, bool near) const;
  void mark_post_text(int32_t post, int32_t body, std::vector<uint8_t>& post_text) const;

  std::string_view s_;
  const HtmlExtractOptions& opt_;
  bool remove_, class_hints_;

  std::vector<Open> stack_;
  std::vector<Node> nodes_;
  std::vector<Block> blocks_;
  std::string text_;   // every block's text, back to back
  std::string title_;
  bool in_block_ = false;
  uint32_t block_begin_ = 0, block_link_ = 0;
  int32_t block_owner_ = 0, block_row_ = -1, block_cell_ = -1;
  bool pending_space_ = false;
  int32_t cur_node_ = 0, cur_row_ = -1, cur_cell_ = -1;
  int link_depth_ = 0, boiler_depth_ = 0, hidden_depth_ = 0, pre_depth_ = 0;
  uint8_t heading_ = 0;
  uint64_t tag_count_ = 0, visible_bytes_ = 0, link_bytes_ = 0, dropped_by_class_ = 0;
  uint32_t boiler_by_class_depth_ = 0;
  uint32_t paragraphs_ = 0;
  bool used_fallback_ = false;
};

// ---- lexer ------------------------------------------------------------------------------------

void Extractor::run(HtmlExtractResult& out) {
  nodes_.reserve(s_.size() / 200 + 16);
  blocks_.reserve(s_.size() / 300 + 16);
  text_.reserve(s_.size() / 4 + 64);
  Node doc{};
  doc.parent = -1;
  doc.end = 0;
  doc.flags = kBlock | kBody;
  nodes_.push_back(doc);
  const char* base = s_.data();
  const size_t n = s_.size();
  size_t i = 0;
  while (i < n) {
    const void* lt = std::memchr(base + i, '<', n - i);
    size_t j = lt ? static_cast<size_t>(static_cast<const char*>(lt) - base) : n;
    if (j > i) text(base + i, base + j);
    if (j >= n) break;
    i = markup(j);
  }
  pop_to(0);
  finish_block();
  nodes_[0].end = static_cast<int32_t>(nodes_.size()) - 1;

  out.title = title_;
  out.tag_count = tag_count_;
  out.visible_text_bytes = visible_bytes_;
  out.link_text_bytes = link_bytes_;

  std::vector<uint32_t> keep;
  if (remove_) {
    select(keep);
    out.used_fallback = used_fallback_;
  } else {
    for (uint32_t b = 0; b < blocks_.size(); ++b)
      if (opt_.keep_headings || !blocks_[b].heading) keep.push_back(b);
  }
  out.text.clear();
  if (opt_.keep_title && !title_.empty()) out.text = title_;
  emit(keep, out.text);
  out.paragraphs = paragraphs_;
}

size_t Extractor::markup(size_t i) {
  const size_t n = s_.size();
  if (i + 1 >= n) {
    text(s_.data() + i, s_.data() + n);
    return n;
  }
  char c = s_[i + 1];
  if (is_alpha(c)) return start_tag(i);
  if (c == '/') {
    if (i + 2 < n && is_alpha(s_[i + 2])) return end_tag(i);
    size_t gt = s_.find('>', i + 2);  // "</>" or a bogus comment
    return gt == std::string_view::npos ? n : gt + 1;
  }
  if (c == '!') {
    if (s_.compare(i, 4, "<!--") == 0) {
      size_t e = s_.find("-->", i + 2);
      return e == std::string_view::npos ? n : e + 3;
    }
    if (s_.compare(i, 9, "<![CDATA[") == 0) {
      size_t e = s_.find("]]>", i + 9);
      return e == std::string_view::npos ? n : e + 3;
    }
    size_t gt = s_.find('>', i + 2);  // doctype and other declarations
    return gt == std::string_view::npos ? n : gt + 1;
  }
  if (c == '?') {
    size_t gt = s_.find('>', i + 2);
    return gt == std::string_view::npos ? n : gt + 1;
  }
  text(s_.data() + i, s_.data() + i + 1);  // a stray '<' is text
  return i + 1;
}

size_t Extractor::start_tag(size_t i) {
  const size_t n = s_.size();
  char name_buf[32];
  size_t len = 0, k = i + 1;
  while (k < n && !is_ws(s_[k]) && s_[k] != '/' && s_[k] != '>') {
    if (len < sizeof(name_buf)) name_buf[len] = lower(s_[k]);
    ++len;
    ++k;
  }
  std::string_view name(name_buf, std::min(len, sizeof(name_buf)));
  const TagInfo* info = len <= sizeof(name_buf) ? tag_lookup(name) : nullptr;
  const uint32_t flags = info ? info->flags : 0;

  // attributes: only the few that carry hints are looked at
  std::string_view cls, id, role, itemprop, style, aria_hidden, href;
  bool hidden_attr = false, self_closing = false;
  while (k < n) {
    while (k < n && is_ws(s_[k])) ++k;
    if (k >= n) break;
    if (s_[k] == '>') {
      ++k;
      break;
    }
    if (s_[k] == '/') {
      self_closing = k + 1 < n && s_[k + 1] == '>';
      ++k;
      continue;
    }
    size_t a0 = k;
    ++k;  // the first character may be '=' (spec: part of the name)
    while (k < n && !is_ws(s_[k]) && s_[k] != '/' && s_[k] != '>' && s_[k] != '=') ++k;
    std::string_view aname = s_.substr(a0, k - a0);
    while (k < n && is_ws(s_[k])) ++k;
    std::string_view value;
    if (k < n && s_[k] == '=') {
      ++k;
      while (k < n && is_ws(s_[k])) ++k;
      if (k < n && (s_[k] == '"' || s_[k] == '\'')) {
        const void* q = std::memchr(s_.data() + k + 1, s_[k], n - k - 1);
        size_t qe = q ? static_cast<size_t>(static_cast<const char*>(q) - s_.data()) : n;
        value = s_.substr(k + 1, qe - k - 1);
        k = qe < n ? qe + 1 : n;
      } else {
        size_t v0 = k;
        while (k < n && !is_ws(s_[k]) && s_[k] != '>') ++k;
        value = s_.substr(v0, k - v0);
      }
    }
    switch (aname.size()) {
      case 2: if (match_nocase(aname, 0, "id")) id = value; break;
      case 4:
        if (match_nocase(aname, 0, "role")) role = value;
        else if (match_nocase(aname, 0, "href")) href = value;
        break;
      case 5:
        if (match_nocase(aname, 0, "class")) cls = value;
        else if (match_nocase(aname, 0, "style")) style = value;
        break;
      case 6: if (match_nocase(aname, 0, "hidden")) hidden_attr = true; break;
      case 8: if (match_nocase(aname, 0, "itemprop")) itemprop = value; break;
      case 11: if (match_nocase(aname, 0, "aria-hidden")) aria_hidden = value; break;
      default: break;
    }
  }
  ++tag_count_;
  if (flags & kTitle) {
    size_t end_text;
    size_t e = skip_raw(k, "title", &end_text);
    if (title_.empty() && k < n) {
      std::string raw;
      size_t cut = std::min(end_text, size_t{4096} + k);
      while (cut > k && cut < end_text && (static_cast<unsigned char>(s_[cut]) & 0xC0) == 0x80) --cut;
      html_decode_entities(s_.substr(k, cut - k), raw);
      bool sp = false;
      for (char ch : raw) {
        if (is_ws(ch)) { sp = !title_.empty(); continue; }
        if (sp) title_.push_back(' ');
        sp = false;
        title_.push_back(ch);
      }
    }
    return e;
  }
  if (flags & kRawSkip) {
    if (self_closing && (flags & kSvgLike)) return k;
    return skip_raw(k, name);
  }
  if (flags & kVoid) {
    if (flags & kBr) line_break();
    else if (flags & kHr) {
      pop_implied(flags);
      finish_block();
    }
    return k;
  }

  Hints hints;
  bool hidden = hidden_attr;
  uint32_t class_hash = 0, shape = 0;
  if (!style.empty()) {
    for (size_t p = 0; (p = style.find("display", p)) != std::string_view::npos; p += 7) {
      size_t q = p + 7;
      while (q < style.size() && (is_ws(style[q]) || style[q] == ':')) ++q;
      if (match_nocase(style, q, "none")) hidden = true;
    }
  }
  if (remove_) {
    if (!aria_hidden.empty() && match_nocase(aria_hidden, 0, "true")) hidden = true;
    if ((!cls.empty() || !id.empty())) {
      char buf[256];
      size_t b = 0;
      for (std::string_view v : {cls, id}) {
        for (size_t p = 0; p < v.size() && b < sizeof(buf) - 1; ++p) buf[b++] = lower(v[p]);
        if (b < sizeof(buf)) buf[b++] = ' ';
      }
      hints_from_class_id(std::string_view(buf, b), hints);
      class_hash = hash_name(cls);
      if (!class_hints_) {
        hints.negative = false;
        hints.weight = std::max(hints.weight, 0);
      }
    }
    if (!role.empty()) {
      std::string r;
      for (char ch : role.substr(0, 32)) r.push_back(lower(ch));
      if (r == "navigation" || r == "banner" || r == "contentinfo" || r == "complementary" ||
          r == "menu" || r == "menubar" || r == "search" || r == "dialog" || r == "alert") {
        hints.negative = true;
      } else if (r == "main" || r == "article") {
        hints.strong_positive = true;
        hints.main_content = r == "main";
      }
    }
    if (flags & kBlock) {
      shape = hash_name(name);
      for (char ch : cls)
        if (ch < '0' || ch > '9') shape = (shape ^ static_cast<unsigned char>(lower(ch))) * 16777619u;
    }
    if (!itemprop.empty() && match_nocase(itemprop, 0, "articlebody"))
      hints.strong_positive = hints.main_content = true;
    if (info && info->name == "main") hints.main_content = true;
    if (flags & kStrongPos) hints.strong_positive = true;
    if (hints.strong_positive || (flags & kBody)) hints.negative = false;
  }
  // a link within the page (permalink, footnote, back-reference) is not a way off the page: its
  // text does not count as link text
  const bool in_page = (flags & kLink) && !href.empty() && href[0] == '#';
  open_element(info, hash_name(name), hints, hidden, class_hash, shape, in_page);
  if (info && (flags & kSvgLike) == 0 && self_closing && !(flags & kBlock)) {
    // "<span/>": HTML ignores the slash, but such pages rarely mean an open element; close it
    pop_to(stack_.size() - 1);
  }
  return k;
}

size_t Extractor::end_tag(size_t i) {
  const size_t n = s_.size();
  char name_buf[32];
  size_t len = 0, k = i + 2;
  while (k < n && !is_ws(s_[k]) && s_[k] != '/' && s_[k] != '>') {
    if (len < sizeof(name_buf)) name_buf[len] = lower(s_[k]);
    ++len;
    ++k;
  }
  const void* gt = k < n ? std::memchr(s_.data() + k, '>', n - k) : nullptr;
  size_t next = gt ? static_cast<size_t>(static_cast<const char*>(gt) - s_.data()) + 1 : n;
  std::string_view name(name_buf, std::min(len, sizeof(name_buf)));
  const TagInfo* info = tag_lookup(name);
  const uint32_t flags = info ? info->flags : 0;
  ++tag_count_;
  if (flags & kBr) {
    line_break();
    return next;
  }
  const uint32_t h = hash_name(name);
  const size_t floor = stack_.size() > kMaxSearch ? stack_.size() - kMaxSearch : 0;
  for (size_t d = stack_.size(); d-- > floor;) {
    if (stack_[d].name_hash == h) {
      pop_to(d);
      return next;
    }
    // an end tag does not close past a table or a cell it is not in
    if ((stack_[d].flags & (kTable | kCell)) && !(flags & (kTable | kRow | kCell | kBlock))) break;
  }
  if (flags & kBlock) finish_block();
  return next;
}

// Skips raw text up to the end tag </name>; returns the position after it (close_at: its '<').
size_t Extractor::skip_raw(size_t i, std::string_view name, size_t* close_at) {
  const size_t n = s_.size();
  if (close_at) *close_at = n;
  while (i < n) {
    const void* lt = std::memchr(s_.data() + i, '<', n - i);
    if (!lt) return n;
    size_t j = static_cast<size_t>(static_cast<const char*>(lt) - s_.data());
    if (j + 1 < n && s_[j + 1] == '/' && match_nocase(s_, j + 2, name)) {
      size_t e = j + 2 + name.size();
      if (e >= n || is_ws(s_[e]) || s_[e] == '>' || s_[e] == '/') {
        if (close_at) *close_at = j;
        const void* gt = std::memchr(s_.data() + e, '>', n - std::min(e, n));
        return gt ? static_cast<size_t>(static_cast<const char*>(gt) - s_.data()) + 1 : n;
      }
    }
    i = j + 1;
  }
  return n;
}

void Extractor::text(const char* p, const char* q) {
  const bool skip = boiler_depth_ > 0 || hidden_depth_ > 0;
  if (skip) {
    size_t vis = 0;
    for (const char* c = p; c < q; ++c) vis += !is_ws(*c);
    visible_bytes_ += vis;
    if (link_depth_) link_bytes_ += vis;
    if (boiler_by_class_depth_) dropped_by_class_ += vis;
    return;
  }
  while (p < q) {
    const unsigned char c = static_cast<unsigned char>(*p);
    const uint8_t cls = kChars.c[c];
    if (cls == kChSpace && !pre_depth_) {
      pending_space_ = true;
      ++p;
      continue;
    }
    if (cls == kChAmp) {
      char32_t cp;
      size_t len = html_decode_entity(std::string_view(p, static_cast<size_t>(q - p)), 0, cp);
      if (len == 0) {
        append_cp('&');
        ++p;
      } else {
        if (cp == 0xA0 && !pre_depth_) pending_space_ = true;
        else append_cp(cp);
        p += len;
      }
      continue;
    }
    // a run of ordinary bytes (in <pre>, spaces too)
    const char* r = p;
    while (r < q) {
      uint8_t k = kChars.c[static_cast<unsigned char>(*r)];
      if (k == kChAmp || (k == kChSpace && !pre_depth_)) break;
      ++r;
    }
    if (!in_block_) {
      in_block_ = true;
      block_begin_ = static_cast<uint32_t>(text_.size());
      block_link_ = 0;
      block_owner_ = cur_node_;
      block_row_ = cur_row_;
      block_cell_ = cur_cell_;
    } else if (pending_space_ && !text_.empty() && text_.back() != '\n' &&
               text_.size() > block_begin_) {
      text_.push_back(' ');
    }
    pending_space_ = false;
    text_.append(p, static_cast<size_t>(r - p));
    size_t cps = 0;
    for (const char* c2 = p; c2 < r; ++c2) cps += (static_cast<unsigned char>(*c2) & 0xC0) != 0x80;
    visible_bytes_ += static_cast<size_t>(r - p);
    if (link_depth_) {
      block_link_ += static_cast<uint32_t>(cps);
      link_bytes_ += static_cast<size_t>(r - p);
    }
    p = r;
  }
}

void Extractor::append_cp(char32_t cp) {
  if (boiler_depth_ > 0 || hidden_depth_ > 0) return;
  if (!in_block_) {
    in_block_ = true;
    block_begin_ = static_cast<uint32_t>(text_.size());
    block_link_ = 0;
    block_owner_ = cur_node_;
    block_row_ = cur_row_;
    block_cell_ = cur_cell_;
  } else if (pending_space_ && text_.size() > block_begin_ && text_.back() != '\n') {
    text_.push_back(' ');
  }
  pending_space_ = false;
  utf8_append(cp, text_);
  ++visible_bytes_;
  if (link_depth_) {
    ++block_link_;
    ++link_bytes_;
  }
}

void Extractor::line_break() {
  if (boiler_depth_ > 0 || hidden_depth_ > 0 || !in_block_) return;
  pending_space_ = false;
  if (text_.size() > block_begin_ && text_.back() == '\n') {
    finish_block();  // <br><br>: a paragraph break
    return;
  }
  if (text_.size() > block_begin_) text_.push_back('\n');
}

void Extractor::finish_block() {
  pending_space_ = false;
  if (!in_block_) return;
  in_block_ = false;
  // trim
  while (text_.size() > block_begin_ && (text_.back() == ' ' || text_.back() == '\n' ||
                                         text_.back() == '\t' || text_.back() == '\r'))
    text_.pop_back();
  size_t b = block_begin_;
  while (b < text_.size() && (text_[b] == '\n' || text_[b] == '\r')) ++b;
  if (b >= text_.size()) {
    text_.resize(block_begin_);
    return;
  }
  Block blk;
  blk.begin = static_cast<uint32_t>(b);
  blk.end = static_cast<uint32_t>(text_.size());
  blk.owner = block_owner_;
  blk.row = block_row_;
  blk.cell = block_cell_;
  blk.heading = heading_;
  blk.pre = pre_depth_ > 0;
  const unsigned char* t = reinterpret_cast<const unsigned char*>(text_.data());
  for (size_t k = blk.begin; k < blk.end; ++k) {
    unsigned char c = t[k];
    if ((c & 0xC0) == 0x80) continue;
    ++blk.cp;
    if (c < 0x80) {
      blk.commas += c == ',';
      blk.stops += c == '.' || c == '!' || c == '?';
    } else if ((c & 0xF0) == 0xE0 && k + 2 < blk.end) {  // a 3-byte sequence (text is valid UTF-8)
      const char32_t cp =
          static_cast<char32_t>(((c & 0x0F) << 12) | ((t[k + 1] & 0x3F) << 6) | (t[k + 2] & 0x3F));
      if (is_cjk_wide(cp)) {
        ++blk.cjk;
        blk.commas += cp == 0x3001 || cp == 0xFF0C;                // 、 ，
        blk.stops += cp == 0x3002 || cp == 0xFF01 || cp == 0xFF1F;  // 。 ！ ？
      }
    }
  }
  blk.link_cp = std::min(block_link_, blk.cp);
  Node& owner = nodes_[static_cast<size_t>(blk.owner)];
  owner.text_cp += blk.cp;
  owner.link_cp += blk.link_cp;
  blocks_.push_back(blk);
}

// ---- tree -------------------------------------------------------------------------------------

void Extractor::pop_implied(uint32_t flags) {
  // an open <p> ends at the next block-level start tag (the only things above it are inline)
  if (flags & kClosesP) {
    for (size_t d = stack_.size(); d-- > 0;) {
      if (stack_[d].flags & kPara) {
        pop_to(d);
        break;
      }
      if (stack_[d].flags & kBlock) break;
    }
  }
  if (flags & (kLi | kDtDd | kRow | kCell | kHeading)) {
    const uint32_t same = flags & (kLi | kDtDd | kRow | kCell | kHeading);
    const uint32_t stop = (flags & kLi)     ? (kListRoot | kTable | kCell | kBody)
                          : (flags & kDtDd) ? (kListRoot | kTable | kCell | kBody)
                          : (flags & kRow)  ? (kTable | kBody)
                          : (flags & kCell) ? (kRow | kTable | kBody)
                                            : (kBlock & ~kHeading);
    const size_t floor = stack_.size() > kMaxSearch ? stack_.size() - kMaxSearch : 0;
    for (size_t d = stack_.size(); d-- > floor;) {
      const uint32_t f = stack_[d].flags;
      if (f & same) {
        pop_to(d);
        break;
      }
      if ((flags & kHeading) ? (f & kBlock) : (f & stop)) break;
    }
  }
}

void Extractor::open_element(const TagInfo* info, uint32_t hash, const Hints& hints, bool hidden,
                             uint32_t class_hash, uint32_t shape, bool in_page_link) {
  uint32_t flags = info ? info->flags : 0;
  if (in_page_link) flags &= ~kLink;
  pop_implied(flags);
  if (stack_.size() >= kMaxDepth) {
    if (flags & kBlock) finish_block();
    return;
  }
  Open o{};
  o.name_hash = hash;
  o.flags = flags;
  o.node = -1;
  o.saved_row = cur_row_;
  o.saved_cell = cur_cell_;
  const bool by_tag = remove_ && (flags & kBoilerTag);
  o.boiler = (hints.negative || by_tag) && !hints.strong_positive;
  // The author's own mark for the main content outranks a guess from an ancestor's class name
  // ("wy-grid-for-nav" wraps a whole Read the Docs page); not an ancestor boilerplate by its tag.
  if (hints.main_content && boiler_depth_ > 0 && boiler_by_class_depth_ == static_cast<uint32_t>(boiler_depth_)) {
    o.suspended = true;
    o.saved_boiler_depth = boiler_depth_;
    o.saved_class_depth = boiler_by_class_depth_;
    boiler_depth_ = 0;
    boiler_by_class_depth_ = 0;
  }
  o.hidden = hidden;
  if (flags & kBlock) {
    finish_block();
    Node nd{};
    nd.parent = cur_node_;
    nd.block_begin = nd.block_end = static_cast<uint32_t>(blocks_.size());
    nd.end = static_cast<int32_t>(nodes_.size());
    nd.flags = flags;
    nd.class_hash = class_hash;
    nd.shape = shape;
    nd.base = info ? info->base : 0;
    nd.weight = static_cast<int8_t>(std::clamp(hints.weight + (hints.strong_positive ? 25 : 0), -50, 50));
    nd.strong = hints.strong_positive;
    o.node = static_cast<int32_t>(nodes_.size());
    nodes_.push_back(nd);
    cur_node_ = o.node;
    if (flags & kRow) {
      cur_row_ = o.node;
      cur_cell_ = -1;
    }
    if (flags & kCell) cur_cell_ = o.node;
  }
  if (flags & kLink) ++link_depth_;
  if (o.boiler) {
    ++boiler_depth_;
    o.boiler_class = !by_tag;
    if (o.boiler_class) ++boiler_by_class_depth_;
  }
  if (o.hidden) ++hidden_depth_;
  if (flags & kPre) ++pre_depth_;
  if (flags & kHeading) {
    o.heading = static_cast<uint8_t>(info->name[1] - '0');
    heading_ = o.heading;
  }
  stack_.push_back(o);
}

void Extractor::pop_to(size_t k) {
  while (stack_.size() > k) {
    const Open o = stack_.back();
    if (o.flags & kBlock) finish_block();
    stack_.pop_back();
    if (o.flags & kLink) --link_depth_;
    if (o.boiler) --boiler_depth_;
    if (o.boiler_class) --boiler_by_class_depth_;
    if (o.suspended) {
      boiler_depth_ = o.saved_boiler_depth;
      boiler_by_class_depth_ = o.saved_class_depth;
    }
    if (o.hidden) --hidden_depth_;
    if (o.flags & kPre) --pre_depth_;
    if (o.flags & kHeading) heading_ = 0;
    if (o.node >= 0) {
      Node& nd = nodes_[static_cast<size_t>(o.node)];
      nd.end = static_cast<int32_t>(nodes_.size()) - 1;
      nd.block_end = static_cast<uint32_t>(blocks_.size());
      if (nd.parent >= 0) {
        nodes_[static_cast<size_t>(nd.parent)].text_cp += nd.text_cp;
        nodes_[static_cast<size_t>(nd.parent)].link_cp += nd.link_cp;
      }
      cur_node_ = nd.parent >= 0 ? nd.parent : 0;
      cur_row_ = o.saved_row;
      cur_cell_ = o.saved_cell;
    }
  }
}

// ---- selection --------------------------------------------------------------------------------

void Extractor::credit(int32_t node, double s) {
  Node& n = nodes_[static_cast<size_t>(node)];
  if (!n.scored) {
    n.scored = true;
    n.score = static_cast<float>(n.base + n.weight);
  }
  n.score += static_cast<float>(s);
}

// Text of its own, beyond a header of links: a post of a thread (and not a link list).
bool has_real_text(const Node& n) { return n.text_cp >= n.link_cp + 15 && n.link_cp * 2 < n.text_cp; }

// A thread: 3+ siblings of one shape, each with real text, the winner inside one of them, which holds
// at most 2/3 of their text. Returns that one (`from` or its first such ancestor, at most kThreadUp
// levels up), or -1.
int32_t Extractor::find_thread(int32_t from) const {
  constexpr int kThreadUp = 8;
  int32_t a = from;
  for (int up = 0; up <= kThreadUp && a > 0; ++up, a = nodes_[static_cast<size_t>(a)].parent) {
    const Node& an = nodes_[static_cast<size_t>(a)];
    const int32_t p = an.parent;
    if (p < 0 || !an.shape || (an.flags & (kPara | kHeading | kLi | kDtDd | kCell)) || !has_real_text(an)) continue;
    const Node& pn = nodes_[static_cast<size_t>(p)];
    uint32_t n = 0;
    uint64_t group_text = 0;
    for (int32_t c = p + 1; c <= pn.end; c = nodes_[static_cast<size_t>(c)].end + 1) {
      const Node& cn = nodes_[static_cast<size_t>(c)];
      if (cn.shape != an.shape) continue;
      group_text += cn.text_cp;
      n += has_real_text(cn);
    }
    if (n >= 3 && an.text_cp * 3 <= group_text * 2) return a;
  }
  return -1;
}

// The block is the page's <title>, or the part of it before or after a separator ("Topic - Forum").
bool Extractor::repeats_title(const Block& b) const {
  const std::string_view t(text_.data() + b.begin, b.end - b.begin), all(title_);
  if (t.size() < 8 || t.size() > all.size() || !(is_alnum(t[0]) || static_cast<unsigned char>(t[0]) >= 0x80))
    return false;
  if (t.size() == all.size()) return t == all;
  const size_t rest = all.size() - t.size();
  // ASCII punctuation, or the lead byte of Latin-1 punctuation (·, ») or of U+2000..U+2FFF (–, —)
  auto sep = [](char ch) {
    const auto c = static_cast<unsigned char>(ch);
    return c == 0xC2 || c == 0xE2 || (c < 0x80 && !is_alnum(ch) && !is_ws(ch));
  };
  if (all.substr(0, t.size()) == t) return all[t.size()] == ' ' && sep(all[t.size() + 1]);
  return rest >= 2 && all.substr(rest) == t && all[rest - 1] == ' ' && sep(all[rest - 2]);
}

// The page's title before block `before`: the nearest h1 that is not a link, or block that repeats
// the <title>. Near: none past 200 characters of text. Returns UINT32_MAX if none.
uint32_t Extractor::find_title(uint32_t before, bool near) const {
  for (uint32_t b = before; b-- > 0;) {
    const Block& blk = blocks_[b];
    if ((blk.heading == 1 && blk.link_density() < 0.5) || repeats_title(blk)) return b;
    if (near && blk.weighted() >= 200) break;
  }
  return UINT32_MAX;
}

enum PostText : uint8_t { kNotPost = 0, kPostBody = 1, kPostChrome = 2 };  // [block] in a thread

// The posts of a thread are made from one template: the element that holds the winning text in one
// post (body, inside post) is found in every post of that shape by the same path of shapes, and
// all its blocks are the post's text, short lines and bare links included. A line that recurs in
// half the posts or more ("reply", "Quote") is the template's, not a post's.
void Extractor::mark_post_text(int32_t post, int32_t body, std::vector<uint8_t>& post_text) const {
  auto node = [&](int32_t k) -> const Node& { return nodes_[static_cast<size_t>(k)]; };
  auto line_hash = [&](uint32_t b) {
    return hash_name(std::string_view(text_.data() + blocks_[b].begin, blocks_[b].end - blocks_[b].begin));
  };
  // The winner is the parent of the post's paragraphs (or the post itself); when its text is all in
  // child elements and one of them, not a paragraph, holds 2/3 of it, that one is the body (the
  // rest: "#2", a date). A post with no body inside it is left to classify().
  constexpr uint32_t kLeaf = kPara | kHeading | kLi | kDtDd | kPre | kTable | kListRoot | kRow | kCell;
  for (bool deeper = true; deeper;) {
    deeper = false;
    const Node& w = node(body);
    bool own_text = false;
    for (uint32_t b = w.block_begin; b < w.block_end && !own_text; ++b) own_text = blocks_[b].owner == body;
    if (own_text) break;
    for (int32_t k = body + 1; k <= w.end; k = node(k).end + 1)
      if (!(node(k).flags & kLeaf) && node(k).text_cp * 3 >= w.text_cp * 2 && node(k).text_cp > 0) {
        body = k;
        deeper = true;
        break;
      }
  }
  if (body == post) return;
  std::vector<uint32_t> path;  // shapes from below the post down to the body
  for (int32_t a = body; a != post; a = node(a).parent) path.push_back(node(a).shape);
  std::reverse(path.begin(), path.end());
  const int32_t parent = node(post).parent;
  const uint32_t shape = node(post).shape;
  post_text.assign(blocks_.size(), kNotPost);
  std::vector<std::pair<uint32_t, uint32_t>> lines;  // (text hash, post number) of every body block
  std::vector<int32_t> level, next;
  uint32_t posts = 0;
  for (int32_t c = parent + 1; c <= node(parent).end; c = node(c).end + 1) {
    if (node(c).shape != shape) continue;
    ++posts;
    // every element at the body's place: children of the same shapes, level by level
    level.assign(1, c);
    for (size_t d = 0; d < path.size() && !level.empty(); ++d) {
      next.clear();
      for (int32_t a : level)
        for (int32_t k = a + 1; k <= node(a).end; k = node(k).end + 1)
          if (node(k).shape == path[d]) next.push_back(k);
      level.swap(next);
    }
    if (level.empty()) continue;  // no body found: its blocks are judged as any others
    for (uint32_t b = node(c).block_begin; b < node(c).block_end; ++b) post_text[b] = kPostChrome;
    for (int32_t a : level)
      for (uint32_t b = node(a).block_begin; b < node(a).block_end; ++b) {
        post_text[b] = kPostBody;
        lines.emplace_back(line_hash(b), posts);
      }
  }
  std::sort(lines.begin(), lines.end());
  std::vector<uint32_t> common;  // lines found in half the posts or more
  for (size_t i = 0, j; i < lines.size(); i = j) {
    uint32_t in = 1;
    for (j = i + 1; j < lines.size() && lines[j].first == lines[i].first; ++j) in += lines[j].second != lines[j - 1].second;
    if (in >= 3 && in * 2 >= posts) common.push_back(lines[i].first);
  }
  if (common.empty()) return;
  for (uint32_t b = 0; b < blocks_.size(); ++b)
    if (post_text[b] == kPostBody && std::binary_search(common.begin(), common.end(), line_hash(b)))
      post_text[b] = kPostChrome;
}

void Extractor::select(std::vector<uint32_t>& keep) {
  // 1. score containers from the paragraphs under them
  for (const Block& b : blocks_) {
    if (b.heading) continue;
    const uint32_t w = b.weighted();
    if (w < 25) continue;
    const double s = 1.0 + b.commas + std::min(3.0, w / 100.0);
    int32_t a = nodes_[static_cast<size_t>(b.owner)].parent;
    if (a < 0) a = b.owner;
    static constexpr double kDiv[3] = {1.0, 2.0, 6.0};
    for (int level = 0; level < 3 && a >= 0; ++level) {
      credit(a, s / kDiv[level]);
      a = nodes_[static_cast<size_t>(a)].parent;
    }
  }
  // 2. the best container; up to five runners-up
  int32_t best = -1;
  double best_score = 0;
  std::vector<std::pair<double, int32_t>> top;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (!nodes_[i].scored) continue;
    double f = node_final(nodes_[i]);
    if (f > best_score) {
      best_score = f;
      best = static_cast<int32_t>(i);
    }
    top.emplace_back(f, static_cast<int32_t>(i));
  }
  std::vector<uint8_t> sel(nodes_.size(), 0);
  std::vector<uint32_t> cand;
  int32_t parent = -1;
  bool thread = false;
  std::vector<uint8_t> post_text;  // [block] text of a post's body, in a thread
  auto p_rule = [](uint32_t len, double ld) { return len > 80 && ld < 0.25; };
  if (best >= 0) {
    const size_t ntop = std::min<size_t>(5, top.size());
    std::partial_sort(top.begin(), top.begin() + static_cast<long>(ntop), top.end(),
                      [](const auto& x, const auto& y) { return x.first > y.first; });
    top.resize(ntop);
    const int32_t post = find_thread(best), winner = best;
    std::vector<int32_t> close;
    for (auto& [f, i] : top)
      if (f >= 0.75 * best_score) close.push_back(i);
    if (close.size() >= 3) {
      for (int32_t a = nodes_[static_cast<size_t>(best)].parent; a >= 0;
           a = nodes_[static_cast<size_t>(a)].parent) {
        int inside = 0;
        for (int32_t c : close) inside += c >= a && c <= nodes_[static_cast<size_t>(a)].end;
        if (inside >= 3) {
          best = a;
          break;
        }
      }
    }
    // a thread: its posts are the selection, unless the ancestor found above already holds them all
    if (post >= 0) {
      thread = true;
      const int32_t tp = nodes_[static_cast<size_t>(post)].parent;
      if (!(best <= tp && tp <= nodes_[static_cast<size_t>(best)].end)) best = post;
    }
#ifdef SMELT_HTML_DEBUG
    std::fprintf(stderr, "best=%d score=%.1f post=%d thread=%d\n", best, best_score, post, thread);
#endif
    // 3. the winner and its siblings that score near it
    const double threshold = std::max(10.0, 0.2 * best_score);
    const Node& bn = nodes_[static_cast<size_t>(best)];
    parent = bn.parent;
    auto mark = [&](int32_t c) {
      for (int32_t k = c; k <= nodes_[static_cast<size_t>(c)].end; ++k) sel[static_cast<size_t>(k)] = 1;
    };
    // blocks of the parent's own text between the first and the last chosen child
    uint32_t gap_begin = UINT32_MAX, gap_end = 0;
    if (parent < 0) {
      mark(best);
    } else {
      const Node& pn = nodes_[static_cast<size_t>(parent)];
      std::vector<int32_t> children;
      std::vector<uint8_t> taken;
      for (int32_t c = parent + 1; c <= pn.end; c = nodes_[static_cast<size_t>(c)].end + 1) {
        const Node& cn = nodes_[static_cast<size_t>(c)];
        bool take = c == best || (best == post && cn.shape == bn.shape);
        if (!take && cn.scored) {
          double bonus = (cn.class_hash && cn.class_hash == bn.class_hash) ? 0.2 * best_score : 0.0;
          take = node_final(cn) + bonus >= threshold;
        }
        if (!take && cn.text_cp) take = p_rule(cn.text_cp, static_cast<double>(cn.link_cp) / cn.text_cp);
        children.push_back(c);
        taken.push_back(take);
      }
      // Tables, code and short lines between chosen siblings belong to the same text (a reference
      // page's signature table between two paragraphs); classify() still judges each block.
      size_t first = children.size(), last = 0;
      for (size_t k = 0; k < children.size(); ++k)
        if (taken[k]) {
          first = std::min(first, k);
          last = k;
        }
      for (size_t k = 0; k < children.size(); ++k) {
        const Node& cn = nodes_[static_cast<size_t>(children[k])];
        if (!taken[k] && k > first && k < last && cn.text_cp && cn.link_cp * 2 < cn.text_cp) taken[k] = 1;
        if (taken[k]) mark(children[k]);
      }
      if (first < last) {
        gap_begin = nodes_[static_cast<size_t>(children[first])].block_begin;
        gap_end = nodes_[static_cast<size_t>(children[last])].block_end;
      }
    }
    for (uint32_t b = 0; b < blocks_.size(); ++b) {
      const Block& blk = blocks_[b];
      if (sel[static_cast<size_t>(blk.owner)] ||
          (blk.owner == parent && (p_rule(blk.weighted(), blk.link_density()) ||
                                   (b >= gap_begin && b < gap_end && blk.link_density() < 0.5))))
        cand.push_back(b);
    }
    // a thread: its title, what lies between the title and the posts (an opening post kept apart
    // from the replies), and each post's body
    if (thread && !cand.empty()) {
      const uint32_t t = find_title(cand.front(), /*near=*/false);
      if (t != UINT32_MAX) {
        std::vector<uint32_t> head;
        for (uint32_t b = t; b < cand.front(); ++b) head.push_back(b);
        cand.insert(cand.begin(), head.begin(), head.end());
      }
      mark_post_text(post, winner, post_text);
    }
  }
  uint64_t cand_w = 0;
  for (uint32_t b : cand) cand_w += blocks_[b].weighted();
  if (best < 0 || cand_w < 100) {
    // no clear container: classify the whole page
    used_fallback_ = true;
    cand.clear();
    for (uint32_t b = 0; b < blocks_.size(); ++b) cand.push_back(b);
  }
  classify(cand, post_text, keep);
  // 5. the page's title: the last h1 before the text, or a block that repeats the <title>, if no long
  //    text lies between
  if (!keep.empty() && opt_.keep_headings) {
    bool has_h1 = false;
    for (uint32_t b : keep) has_h1 |= blocks_[b].heading == 1;
    if (!has_h1 && !repeats_title(blocks_[keep.front()])) {
      const uint32_t t = find_title(keep.front(), /*near=*/true);
      if (t != UINT32_MAX) keep.insert(keep.begin(), t);
    }
  }
}

void Extractor::classify(const std::vector<uint32_t>& cand, const std::vector<uint8_t>& post_text,
                         std::vector<uint32_t>& keep) {
  enum Cls : uint8_t { kNone, kBad, kShort, kNear, kGood, kHead };
  const size_t n = cand.size();
  std::vector<uint8_t> cls(n);
  for (size_t i = 0; i < n; ++i) {
    const Block& b = blocks_[cand[i]];
    const uint32_t w = b.weighted();
    const double ld = b.link_density();
    const uint8_t post = post_text.empty() ? uint8_t{kNotPost} : post_text[cand[i]];
    if (post == kPostChrome) cls[i] = kBad;  // a post's header, author box, controls
    else if (b.heading) cls[i] = ld > 0.5 ? kBad : kHead;
    else if (post == kPostBody) cls[i] = kGood;
    else if (ld > (w >= 200 ? 0.35 : 0.2)) cls[i] = kBad;
    else if (w < 70) cls[i] = kShort;
    else if (w >= 200 || b.stops > 0 || b.pre) cls[i] = kGood;
    else cls[i] = kNear;
  }
  // neighbours: the nearest blocks that are neither short nor headings; a short link line (one
  // cross-reference in a table cell) is no evidence of boilerplate around it
  auto context = [&](size_t i) {
    const bool short_bad = cls[i] == kBad && blocks_[cand[i]].weighted() < 70;
    return cls[i] != kShort && cls[i] != kHead && !short_bad;
  };
  std::vector<uint8_t> prev(n, kNone), next(n, kNone);
  uint8_t last = kNone;
  for (size_t i = 0; i < n; ++i) {
    prev[i] = last;
    if (context(i)) last = cls[i];
  }
  last = kNone;
  for (size_t i = n; i-- > 0;) {
    next[i] = last;
    if (context(i)) last = cls[i];
  }
  auto ok = [](uint8_t c) { return c == kGood || c == kNear; };
  std::vector<uint8_t> kept(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const Block& b = blocks_[cand[i]];
    switch (cls[i]) {
      case kGood: kept[i] = 1; break;
      case kNear: kept[i] = ok(prev[i]) || ok(next[i]) || (prev[i] == kNone && next[i] == kNone); break;
      case kShort:  // kept between good text; a sentence beside good text too
        kept[i] = (ok(prev[i]) && ok(next[i])) || (b.stops > 0 && (prev[i] == kGood || next[i] == kGood));
        break;
      default: break;
    }
  }
  // a heading stays when kept text follows it soon (past subheadings and short lines, not past
  // link lists)
  for (size_t i = 0; i < n; ++i) {
    if (cls[i] != kHead) continue;
    for (size_t j = i + 1; j < n && j <= i + 8; ++j) {
      if (cls[j] == kBad && blocks_[cand[j]].weighted() >= 70) break;
      if (kept[j] && cls[j] != kHead) {
        kept[i] = 1;
        break;
      }
    }
  }
  for (size_t i = 0; i < n; ++i)
    if (kept[i]) keep.push_back(cand[i]);
#ifdef SMELT_HTML_DEBUG
  for (size_t i = 0; i < n; ++i) {
    const Block& b = blocks_[cand[i]];
    std::fprintf(stderr, "%c cls=%d w=%u ld=%.2f owner=%d h=%d | %.60s\n", kept[i] ? '+' : '-', cls[i],
                 b.weighted(), b.link_density(), b.owner, b.heading, text_.c_str() + b.begin);
  }
#endif
}

void Extractor::emit(const std::vector<uint32_t>& keep, std::string& out) {
  int32_t last_row = -1, last_cell = -1;
  paragraphs_ = 0;
  for (uint32_t b : keep) {
    const Block& blk = blocks_[b];
    if (!opt_.keep_headings && blk.heading) continue;
    if (blk.row >= 0 && blk.row == last_row && blk.cell != last_cell) {  // the next cell of a row
      out += " | ";
    } else if (!out.empty()) {
      out += out.back() == '\n' ? "\n" : "\n\n";
      ++paragraphs_;
    } else {
      ++paragraphs_;
    }
    out.append(text_, blk.begin, blk.end - blk.begin);
    last_row = blk.row;
    last_cell = blk.cell;
  }
}

}  // namespace

void html_extract(std::string_view html, const HtmlExtractOptions& opt, HtmlExtractResult& out) {
  out = HtmlExtractResult{};
  {
    Extractor ex(html, opt, /*use_class_hints=*/true);
    ex.run(out);
    // A class hint can be wrong for a whole page ("comments-enabled" on the body's wrapper): when
    // little survived and much was dropped for a class, read the page again without class hints.
    if (opt.remove_boilerplate && ex.dropped_by_class() > 2000 &&
        (out.text.size() < 400 || ex.dropped_by_class() > 8 * out.text.size())) {
      HtmlExtractResult again;
      Extractor ex2(html, opt, /*use_class_hints=*/false);
      ex2.run(again);
      if (again.text.size() > out.text.size() * 2) {
        again.visible_text_bytes = out.visible_text_bytes;
        again.link_text_bytes = out.link_text_bytes;
        out = std::move(again);
        out.used_fallback = true;
      }
    }
  }
  out.html_bytes = html.size();
  out.tag_density = html.empty() ? 0.0 : out.tag_count * 1000.0 / static_cast<double>(html.size());
  out.link_text_ratio = out.visible_text_bytes
                            ? static_cast<double>(out.link_text_bytes) / out.visible_text_bytes
                            : 0.0;
}

}  // namespace smelt
