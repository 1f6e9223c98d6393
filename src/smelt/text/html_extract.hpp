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
  bool keep_title = false;         // prepend <title> as the first line
};

struct HtmlExtractResult {
  std::string text;        // main text: paragraphs separated by "\n\n", lines within by "\n"
  std::string title;       // <title>, entity-decoded
  uint64_t html_bytes = 0;
  uint64_t tag_count = 0;          // tags in the whole page
  uint64_t visible_text_bytes = 0; // text bytes outside script/style, whole page
  uint64_t link_text_bytes = 0;    // of those, inside <a>
  // signals over the whole page, for quality scoring:
  double tag_density = 0;          // tags per 1000 bytes of HTML... see html_extract.cpp for the exact definition
  double link_text_ratio = 0;      // link_text_bytes / visible_text_bytes
};

void html_extract(std::string_view html, const HtmlExtractOptions& opt, HtmlExtractResult& out);

}  // namespace smelt
