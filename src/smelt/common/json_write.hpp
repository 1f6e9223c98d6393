// Minimal JSON string escaping for hot output paths (one document per line); nlohmann_json
// is used everywhere speed does not matter. Input must be valid UTF-8.
#pragma once
#include <string>
#include <string_view>

namespace smelt {

// Appends s as a quoted JSON string (control characters escaped, UTF-8 kept as is).
void json_append_string(std::string& out, std::string_view s);

}  // namespace smelt
