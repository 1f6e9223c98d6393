// A document's page (page_key.hpp).
#include "smelt/common/page_key.hpp"

#include <cctype>

namespace smelt {

std::string page_key(std::string_view url, std::string_view id) {
  if (url.empty()) return std::string(id);
  size_t p = url.find("://");
  p = p == std::string_view::npos ? 0 : p + 3;
  size_t end = url.find_first_of("/?#", p);
  if (end == std::string_view::npos) end = url.size();
  std::string_view host = url.substr(p, end - p);
  if (size_t at = host.rfind('@'); at != std::string_view::npos) host.remove_prefix(at + 1);
  // ":port" (not inside an IPv6 literal's brackets)
  if (size_t colon = host.rfind(':'); colon != std::string_view::npos && host.find(']', colon) == std::string_view::npos)
    host = host.substr(0, colon);
  std::string key;
  for (char ch : host) key += (char)std::tolower((unsigned char)ch);
  std::string_view rest = url.substr(end);
  rest = rest.substr(0, rest.find('#'));
  key += rest.empty() ? std::string_view("/") : rest;
  return key;
}

}  // namespace smelt
