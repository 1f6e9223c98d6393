// html_extract on real pages (the hand-checked set of bench/prep/pages) and on hand-made malformed
// HTML. Not a quality benchmark: bench/prep/extract_bench.py measures F1 and speed.
#include "smelt/text/html_extract.hpp"

#include <gtest/gtest.h>

#include "test_files.hpp"

#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "smelt/common/utf8.hpp"
#include "smelt/text/charset.hpp"

using namespace smelt;

namespace {

std::string read_page(const std::string& name) { return test::read_file(std::string(SMELT_SOURCE_DIR) + "/bench/prep/pages/" + name); }

// Reads, converts and extracts a page of the benchmark set.
HtmlExtractResult extract_page(const std::string& name, bool remove_boilerplate = true) {
  std::string html = read_page(name);
  EXPECT_FALSE(html.empty()) << name;
  std::string utf8;
  charset_to_utf8(html, "", utf8);
  HtmlExtractOptions opt;
  opt.remove_boilerplate = remove_boilerplate;
  HtmlExtractResult r;
  html_extract(utf8, opt, r);
  return r;
}

std::string extract(std::string_view html, bool remove_boilerplate = false) {
  HtmlExtractOptions opt;
  opt.remove_boilerplate = remove_boilerplate;
  HtmlExtractResult r;
  html_extract(html, opt, r);
  return r.text;
}

bool has(const std::string& text, std::string_view s) { return text.find(s) != std::string::npos; }

}  // namespace

TEST(HtmlExtractPages, NewsKeepsArticleDropsChrome) {
  HtmlExtractResult r = extract_page("news_cnn.html");
  // title first, as its own paragraph
  EXPECT_EQ(r.text.rfind("Democrats to use Social Security against GOP this fall\n\n", 0), 0u) << r.text.substr(0, 200);
  EXPECT_TRUE(has(r.text, "Democrats pledged Friday to not only keep Social Security in place"));
  EXPECT_TRUE(has(r.text, "CNN's Alex Mooney contributed to this report."));
  EXPECT_FALSE(has(r.text, "Mixx Facebook Twitter Digg"));  // share bar
  EXPECT_FALSE(has(r.text, "From around the web"));
  EXPECT_FALSE(has(r.text, "Terms of service"));             // footer
  EXPECT_EQ(r.title, "Democrats to use Social Security against GOP this fall - CNN.com");
  EXPECT_TRUE(utf8_valid(r.text));
}

TEST(HtmlExtractPages, CommentsAreNotTheArticle) {
  // politico: the comment thread holds more text than the story; the story must win
  HtmlExtractResult r = extract_page("news_politico.html");
  EXPECT_TRUE(has(r.text, "2012 map takes unfamiliar shape"));
  EXPECT_TRUE(has(r.text, "It’s not overly dramatic,"));
  EXPECT_TRUE(has(r.text, "an even bigger deal"));
  EXPECT_FALSE(has(r.text, "Text Size"));
  EXPECT_LT(r.text.size(), 6000u) << "comments leaked in";
}

TEST(HtmlExtractPages, ScriptsAndStylesNeverAppear) {
  for (const char* page : {"news_usatoday.html", "blog_theverge.html", "news_time.html"}) {
    for (bool remove : {true, false}) {
      HtmlExtractResult r = extract_page(page, remove);
      EXPECT_FALSE(has(r.text, "function(")) << page;
      EXPECT_FALSE(has(r.text, "document.write")) << page;
      EXPECT_FALSE(has(r.text, "{display:")) << page;
      EXPECT_GT(r.text.size(), 1000u) << page;
    }
  }
}

TEST(HtmlExtractPages, DocsKeepHeadingsAsParagraphsAndCode) {
  HtmlExtractResult r = extract_page("docs_python_sorting.html");
  EXPECT_TRUE(has(r.text, "\n\nSorting Basics\n\n"));
  EXPECT_TRUE(has(r.text, "\n\nKey Functions\n\n"));
  EXPECT_TRUE(has(r.text, ">>> sorted([5, 2, 3, 1, 4])\n[1, 2, 3, 4, 5]"));  // <pre> keeps its lines
  EXPECT_FALSE(has(r.text, "Table of Contents"));
  EXPECT_FALSE(has(r.text, "Report a Bug"));
  r = extract_page("docs_postgres_sql_vacuum.html");
  EXPECT_TRUE(has(r.text, "VACUUM reclaims storage occupied by dead tuples."));
  EXPECT_FALSE(has(r.text, "Prev"));
}

TEST(HtmlExtractPages, EntitiesAreDecoded) {
  HtmlExtractResult r = extract_page("news_time.html");
  EXPECT_TRUE(has(r.text, "good news for BP — which")) << "&#151; is windows-1252's em dash";
  EXPECT_FALSE(has(r.text, "&#"));
  r = extract_page("blog_mcsweeney.html");
  EXPECT_TRUE(has(r.text, "The Middle Manager’s Oath."));  // &#8217; inside the h1
  EXPECT_FALSE(has(r.text, "&rsquo;"));
}

TEST(HtmlExtractPages, ChineseGbkAndBig5) {
  HtmlExtractResult r = extract_page("zh_docs_kernel_highmem_gbk.html");
  EXPECT_TRUE(has(r.text, "\n\n高内存是什么？\n\n")) << r.text.substr(0, 300);
  EXPECT_TRUE(has(r.text, "当物理内存的大小接近或超过虚拟内存的最大大小时，就会使用高内存（highmem）"));
  EXPECT_FALSE(has(r.text, "\xEF\xBF\xBD"));
  r = extract_page("zh_docs_kernel_bug_bisect_big5.html");
  EXPECT_TRUE(has(r.text, "二分（bisect）缺陷"));
  EXPECT_FALSE(has(r.text, "\xEF\xBF\xBD"));
  r = extract_page("zh_news_bbc.html");
  EXPECT_EQ(r.text.rfind("港特首梁振英就住宅违建事件道歉\n\n", 0), 0u);
  EXPECT_TRUE(has(r.text, "民主党此前计划在星期三（11日）对梁振英提出不信任动议。"));
}

TEST(HtmlExtractPages, DumpModeKeepsEverythingVisible) {
  HtmlExtractResult all = extract_page("news_cnn.html", false);
  HtmlExtractResult main = extract_page("news_cnn.html", true);
  EXPECT_TRUE(has(all.text, "Mixx Facebook Twitter Digg"));
  EXPECT_GT(all.text.size(), main.text.size());
  EXPECT_EQ(all.tag_count, main.tag_count);
  EXPECT_GT(all.tag_density, 0.0);
  EXPECT_DOUBLE_EQ(all.tag_density, all.tag_count * 1000.0 / all.html_bytes);
  EXPECT_GT(all.link_text_ratio, 0.0);
  EXPECT_LT(all.link_text_ratio, 1.0);
}

// Forum threads: every post is kept, from every author, not the longest one alone; the thread's
// title comes first; signatures, user statistics, post numbers, forms, hidden dialogs, side boxes
// and footers stay out.
TEST(HtmlExtractPages, ForumThreadKeepsEveryPost) {
  HtmlExtractResult r = extract_page("forum_hn_best_papers.html");  // 100 nested comments
  EXPECT_EQ(r.text.rfind("Ask HN: What are the best papers you read in your life?\n\n", 0), 0u) << r.text.substr(0, 200);
  EXPECT_TRUE(has(r.text, "Any recommendation is highly appreciated ^^."));   // the question, toptext
  EXPECT_TRUE(has(r.text, "Claude Shannon's \"A Mathematical Theory of Communication\"[1] is often"));  // 1st
  EXPECT_TRUE(has(r.text, "In Praise of Idleness, Bertrand Russel"));           // a one-line comment
  EXPECT_TRUE(has(r.text, "Lisanne Bainbridge, Ironies of Automation."));       // the last one
  EXPECT_TRUE(has(r.text, "\n\n2. The maths is not pages of first principle"));  // its paragraphs stay apart
  EXPECT_FALSE(has(r.text, "\nreply\n"));
  EXPECT_FALSE(has(r.text, "225 points"));
  EXPECT_FALSE(has(r.text, "Guidelines"));
  EXPECT_GT(r.text.size(), 25000u);

  r = extract_page("forum_mybb_sv_update.html");  // 4 posts, 2 authors
  EXPECT_EQ(r.text.rfind("SV1, SV2, SV-TT update\n\nHi Guys\n\nBack when I designed", 0), 0u) << r.text.substr(0, 200);
  EXPECT_TRUE(has(r.text, "SV1 and SV2 are now much smaller than they used to be"));  // #2, K O'Connor
  EXPECT_TRUE(has(r.text, "Great news about the SV updates!"));                      // #3, DCarrer
  EXPECT_TRUE(has(r.text, "It is kind of funny about Human interfaces"));            // #4
  for (const char* bad : {"Posts: 486", "Joined:", "#2", "Find", "Forum Jump", "Come in where it's warm",
                          "Lost Password", "Powered By MyBB", "Next Oldest"})
    EXPECT_FALSE(has(r.text, bad)) << bad;

  r = extract_page("forum_flaskbb_install_windows.html");  // 5 short posts, 3 authors
  EXPECT_EQ(r.text.rfind("Need some help to Install FlaskBB on Windows\n\nHello i want to install", 0), 0u)
      << r.text.substr(0, 200);
  EXPECT_TRUE(has(r.text, "Could you elaborate a bit more on which steps you tried"));  // sh4nks
  EXPECT_TRUE(has(r.text, "https://flaskbb.readthedocs.io/en/latest/installation.html"));  // a bare link
  EXPECT_TRUE(has(r.text, "my comment goes here for the test"));  // mr_yemets, one short line
  for (const char* bad : {"Cheers!", "Markdown Cheatsheet", "Are you sure", "Joined:", "Administrator", "#2",
                          "powered by FlaskBB", "Reset Password"})
    EXPECT_FALSE(has(r.text, bad)) << bad;

  r = extract_page("forum_rubychina_scripting.html");  // the topic and 10 replies in one container
  EXPECT_TRUE(has(r.text, "Ruby 的许多特性强烈地偏向对脚本语言的良好支持"));
  EXPECT_TRUE(has(r.text, "Hope you are still using Ruby"));
  EXPECT_TRUE(has(r.text, "除了速度，综合来讲可以完败其它语言"));
  EXPECT_FALSE(has(r.text, "unemployed, pre SAP Lab"));  // the author's side card
}

TEST(HtmlExtract, ThreadTakesEveryPostBodyAndNothingElse) {
  // four posts from one template ("post bg1"/"post bg2" are one shape); the longest holds under
  // 2/3 of the thread's text. Expected: the title, then each post's body, short lines and links too.
  auto post = [](int n, const char* who, const char* body, const char* extra) {
    return std::string("<div class='post bg") + std::to_string(1 + n % 2) + "'><div class='author'>" + who +
           "<br>Posts: " + std::to_string(n * 7) + "</div><div class='info'><a href='#p" + std::to_string(n) +
           "'>#" + std::to_string(n) + "</a> 2024-01-0" + std::to_string(n) + "</div><div class='message'>" +
           body + "</div>" + extra + "<div class='controls'><a href='/reply'>Reply</a></div></div>";
  };
  const std::string html =
      "<html><head><title>Best tomato sauce? - Cooking Forum</title></head><body>"
      "<nav><a href='/'>Home</a> <a href='/forums'>Forums</a></nav>"
      "<div class='sidebar'><p>Welcome to the cooking forum, where people talk about food every day.</p></div>"
      "<h2><a href='/t/1'>Best tomato sauce?</a></h2><div class='thread'>" +
      post(1, "alice", "What is your favourite tomato sauce, and why does it work so well with fresh pasta?",
           "<div class='signature'>Alice's kitchen, since 1999</div>") +
      post(2, "bob", "Slow-cooked San Marzano tomatoes, a little garlic, olive oil and basil. Cook it for two "
                     "hours, stirring now and then, and salt it at the end.<br>Nothing else.", "") +
      post(3, "carol", "Agreed with bob.<br><a href='https://example.com/r'>https://example.com/r</a>", "") +
      post(4, "dave", "Butter and onion, Marcella Hazan's recipe, every single time.", "") +
      "</div><div class='quick-reply'><form><textarea>Write your reply</textarea><button>Post</button></form></div>"
      "<div style='display: none'>Markdown help: to make text bold, wrap it in two asterisks, and so on.</div>"
      "<div hidden>A hidden dialog that explains the forum rules at great length, with many words.</div>"
      "<div aria-hidden='true'>Screen-reader-hidden text, long enough to count as a paragraph here.</div>"
      "<template><p>Template text that is long enough to count as a paragraph, too.</p></template>"
      "<footer>Powered by ForumSoft</footer></body></html>";
  EXPECT_EQ(extract(html, true),
            "Best tomato sauce?\n\n"
            "What is your favourite tomato sauce, and why does it work so well with fresh pasta?\n\n"
            "Slow-cooked San Marzano tomatoes, a little garlic, olive oil and basil. Cook it for two hours, "
            "stirring now and then, and salt it at the end.\nNothing else.\n\n"
            "Agreed with bob.\nhttps://example.com/r\n\n"
            "Butter and onion, Marcella Hazan's recipe, every single time.");
}

TEST(HtmlExtract, BlocksLinesAndWhitespace) {
  EXPECT_EQ(extract("<p>one   two\n three</p><p>four</p>"), "one two three\n\nfour");
  EXPECT_EQ(extract("<div>a<br>b<br/>c</div>"), "a\nb\nc");
  EXPECT_EQ(extract("<div>a<br><br>b</div>"), "a\n\nb");
  EXPECT_EQ(extract("<pre>x = 1\n    y = 2</pre>"), "x = 1\n    y = 2");
  EXPECT_EQ(extract("<h2>Title</h2>text <b>bold</b> <i>it</i>alic"), "Title\n\ntext bold italic");
  EXPECT_EQ(extract("<ul><li>a<li>b</ul>"), "a\n\nb");
  EXPECT_EQ(extract("<table><tr><td>a</td><td>b</td></tr><tr><td>c</td></tr></table>"), "a | b\n\nc");
  EXPECT_EQ(extract("<table><tr><td><p>a</p><p>b</p></td><td>c</td></tr></table>"), "a\n\nb | c");
  EXPECT_EQ(extract("<p>x<script>var a = '<p>no</p>';</script>y</p>"), "xy");
  EXPECT_EQ(extract("<p>x<style>p{color:red}</style><!-- c <p>no</p> -->y</p>"), "xy");
  EXPECT_EQ(extract("<p>a<svg><text>no</text></svg><noscript>no</noscript><template><p>no</template>b</p>"), "ab");
  EXPECT_EQ(extract("<p>seen</p><div hidden>no</div><div style='display: none'>no</div>"), "seen");
}

TEST(HtmlExtract, Entities) {
  EXPECT_EQ(extract("<p>&amp; &lt;b&gt; &quot;q&quot; &eacute;t&eacute; &#x4E2D;&#25991; &copy; &hellip;</p>"),
            "& <b> \"q\" été 中文 © …");
  EXPECT_EQ(extract("<p>a&nbsp;b &amp c &notanentity; &#; &#xZZ; & x</p>"), "a b & c &notanentity; &#; &#xZZ; & x");
  EXPECT_EQ(extract("<p>&#0;&#xD800;&#x110000;</p>"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(extract("<p>&#150;&#x93;</p>"), "–“");  // C1 references read as windows-1252
  char32_t cp = 0;
  EXPECT_TRUE(html_entity_lookup("mdash", cp));
  EXPECT_EQ(cp, U'—');
  EXPECT_FALSE(html_entity_lookup("mdashx", cp));
}

TEST(HtmlExtract, TitleAndOptions) {
  const std::string html = "<title> A &amp; B </title><h1>Head</h1><p>Body text.</p>";
  HtmlExtractOptions opt;
  opt.remove_boilerplate = false;
  opt.keep_title = true;
  HtmlExtractResult r;
  html_extract(html, opt, r);
  EXPECT_EQ(r.title, "A & B");
  EXPECT_EQ(r.text, "A & B\n\nHead\n\nBody text.");
  opt.keep_title = false;
  opt.keep_headings = false;
  html_extract(html, opt, r);
  EXPECT_EQ(r.text, "Body text.");
}

TEST(HtmlExtract, BoilerplateByNameClassAndRole) {
  std::string body;
  for (int i = 0; i < 6; ++i)
    body += "<p>This is a long sentence of the article body, with commas, clauses, and a full stop at the end.</p>";
  const std::string html =
      "<html><body><nav><a href=/>Home</a> <a href=/news>News</a></nav>"
      "<div class='sidebar'><p>Sidebar text that is fairly long and should still not be taken as main content.</p></div>"
      "<div role='navigation'>Role nav</div><div id='cookie-banner'>We use cookies.</div>"
      "<article><h1>The headline</h1>" + body +
      "<div class='share-buttons'>Share on Facebook</div></article>"
      "<div id='comments'><p>A comment that is long enough to look like a paragraph of text, really.</p></div>"
      "<footer>Copyright 2024</footer></body></html>";
  std::string t = extract(html, true);
  EXPECT_EQ(t.rfind("The headline\n\nThis is a long sentence", 0), 0u) << t;
  for (const char* bad : {"Home", "Sidebar", "Role nav", "cookies", "Share on", "A comment", "Copyright"})
    EXPECT_FALSE(has(t, bad)) << bad << " in: " << t;
  EXPECT_TRUE(has(extract(html, false), "Sidebar text"));
}

TEST(HtmlExtract, MalformedInputNeverCrashes) {
  // unclosed tags, stray '<', bad nesting
  EXPECT_EQ(extract("<div><p>a < b and c<d</p>"), "a < b and c");
  EXPECT_EQ(extract("<p>1 <3 you</p><<<>>>"), "1 <3 you\n\n<<<>>>");
  EXPECT_EQ(extract("<b><i>x</b></i><p>y"), "x\n\ny");
  EXPECT_EQ(extract("</div></p></span>text"), "text");
  // unterminated comment, script, attribute quote: the rest of the page is swallowed
  EXPECT_EQ(extract("<p>kept</p><!-- never closed <p>lost</p>"), "kept");
  EXPECT_EQ(extract("<p>kept</p><script>lost"), "kept");
  EXPECT_EQ(extract("<p>kept</p><a href=\"never closed>lost"), "kept");
  EXPECT_EQ(extract("<p>kept</p><"), "kept\n\n<");
  EXPECT_EQ(extract("<p>kept</p></"), "kept");
  EXPECT_EQ(extract(""), "");
  // a huge attribute
  std::string huge = "<div class=\"" + std::string(4 << 20, 'x') + "\">after</div>";
  EXPECT_EQ(extract(huge), "after");
  EXPECT_EQ(extract(huge + "<p>" + std::string(300, 'y') + ".</p>", true), std::string(300, 'y') + ".");
  // very deep nesting
  std::string deep;
  for (int i = 0; i < 200000; ++i) deep += "<div>";
  deep += "<p>deep text here.</p>";
  EXPECT_EQ(extract(deep), "deep text here.");
  extract(deep, true);  // a lone short line is not main text; it must just not crash
  // many unmatched end tags and list items under a deep stack stay linear
  std::string stray;
  for (int i = 0; i < 1000; ++i) stray += "<div>";
  for (int i = 0; i < 200000; ++i) stray += "</x><li>";
  EXPECT_EQ(extract(stray), "");
  // a long tag name, NULs and invalid UTF-8 pass through without harm
  EXPECT_EQ(extract("<" + std::string(100, 'a') + ">x</" + std::string(100, 'a') + ">"), "x");
  std::string nul("<p>a\0b</p>", 10);
  EXPECT_EQ(extract(nul).size(), 3u);
  // random bytes
  std::mt19937 rng(7);
  const char alphabet[] = "<>/!-=\"' &#;abpdivscriptyle\n\xE4\xB8\xAD";
  for (int round = 0; round < 300; ++round) {
    std::string s;
    size_t n = rng() % 2000;
    for (size_t i = 0; i < n; ++i) s.push_back(alphabet[rng() % (sizeof(alphabet) - 1)]);
    HtmlExtractResult r;
    for (bool remove : {true, false}) {
      HtmlExtractOptions opt;
      opt.remove_boilerplate = remove;
      html_extract(s, opt, r);
      EXPECT_LE(r.text.size(), s.size() * 3 + 16);
    }
  }
}
