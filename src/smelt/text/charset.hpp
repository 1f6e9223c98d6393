// Charsets: find the one an HTML page declares and convert it to UTF-8 with glibc iconv.
// Not here: HTML parsing beyond the <meta> sniff.
#pragma once
#include <string>
#include <string_view>

namespace smelt {

// The charset named by a Content-Type header value ("text/html; charset=GBK" -> "gbk"), lowercased; or "".
std::string charset_from_content_type(std::string_view content_type);

// The charset an HTML document declares in its first 4 KiB (<meta charset>, http-equiv, BOM); or "".
std::string charset_sniff_html(std::string_view html);

// Converts in (declared charset, "" meaning sniff then UTF-8) to valid UTF-8 in out. Unknown
// charsets fall back to UTF-8; bytes that do not convert become U+FFFD. Returns the number of
// replaced sequences. gb2312/gbk are decoded as gb18030 (its superset), big5 as big5-hkscs.
size_t charset_to_utf8(std::string_view in, std::string_view charset, std::string& out);

}  // namespace smelt
