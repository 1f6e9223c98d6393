// Modes as enums with their config spelling: one table per enum ({value, "name"}) found by ADL
// through `enum_names(E{})`, used to parse the TOML string once and to write it back unchanged.
// Not the config reader (config_schema.hpp).
#pragma once
#include <span>
#include <string>
#include <string_view>

namespace smelt {

template <class E>
struct EnumName {
  E value;
  const char* name;
};

// The config spelling of v ("" for a value missing from its table).
template <class E>
const char* enum_name(E v) {
  for (const auto& n : enum_names(E{}))
    if (n.value == v) return n.name;
  return "";
}

// s's value in E's table; false (v unchanged) when s is none of its names.
template <class E>
bool enum_parse(std::string_view s, E& v) {
  for (const auto& n : enum_names(E{}))
    if (s == n.name) return v = n.value, true;
  return false;
}

// The allowed spellings as an error message lists them: "\"a\", \"b\" or \"c\"".
template <class E>
std::string enum_allowed(E = E{}) {
  std::string out;
  const auto names = enum_names(E{});
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " or " : ", ";
    out += '"' + std::string(names[i].name) + '"';
  }
  return out;
}

}  // namespace smelt
