// HTML to main text: a single-pass lexer over the page that drops scripts, styles and boilerplate
// (navigation, menus, footers, link lists, sidebars), keeps headings and paragraph breaks, and
// decodes entities. Input must already be UTF-8 (charset.hpp converts). Not a DOM or a browser.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace smelt {

struct HtmlExtractOptions {
  bool remove_boilerplate = true;  // false: all visible text (the "dump" baseline)
  bool keep_headings = true;       // headings become their own paragraphs
  bool keep_title = false;         // prepend <title> as the first paragraph
};

struct HtmlExtractResult {
  std::string text;        // main text: paragraphs separated by "\n\n", lines within by "\n"
  std::string title;       // <title>, entity-decoded
  uint64_t html_bytes = 0;
  uint64_t tag_count = 0;          // tags in the whole page
  uint64_t visible_text_bytes = 0; // text bytes outside script/style, whole page
  uint64_t link_text_bytes = 0;    // of those, inside <a>
  // signals over the whole page, for quality scoring:
  double tag_density = 0;          // tag_count * 1000 / html_bytes: start and end tags (not comments,
                                   // doctypes or the insides of script/style) per 1000 bytes of HTML
  double link_text_ratio = 0;      // link_text_bytes / visible_text_bytes (0 when there is no text)
  // about the extraction itself:
  uint32_t paragraphs = 0;         // paragraphs in text
  bool used_fallback = false;      // no clear main container: the filtered whole page was kept
};

// Extracts the main text of one UTF-8 page into out (out is reset first). Never fails: malformed
// HTML gives whatever text the lexer could recover, possibly none.
void html_extract(std::string_view html, const HtmlExtractOptions& opt, HtmlExtractResult& out);

// Character references (html_entities.cpp). The named table holds the 253 names of HTML 4.01 plus
// ~110 common HTML5 additions; numeric references are complete (C1 controls map as windows-1252).
bool html_entity_lookup(std::string_view name, char32_t& cp);
// Decodes the reference starting at s[i] ('&'); returns its length, or 0 if it is not one.
size_t html_decode_entity(std::string_view s, size_t i, char32_t& cp);
// Appends s to out with every character reference decoded.
void html_decode_entities(std::string_view s, std::string& out);

}  // namespace smelt
