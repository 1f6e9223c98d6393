// A document's page, for decisions that must follow the page rather than the record: the
// holdout split (`smelt tokenize --holdout`) and score sampling (`smelt prep`). Another crawl of
// the same pages gives the same keys, whatever record ids, port or scheme it has.
#pragma once
#include <string>
#include <string_view>

namespace smelt {

// Its page when the document has a URL: the host in lower case, without scheme, user or port,
// then the path and query, without the fragment ("HTTP://Docs.Example:8080/a/b?x#top" ->
// "docs.example/a/b?x"; no path: "/"); its id otherwise.
std::string page_key(std::string_view url, std::string_view id);

}  // namespace smelt
