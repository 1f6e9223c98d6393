// The dashboard page's files, built into the binary (cmake/embed_assets.cmake writes their bytes
// into a generated .cpp from web/ and third_party/uplot/ at build time): the page, its script and
// style, and uPlot with its licence. Not how they are served (dashboard_server.hpp) or inlined
// into a report (dashboard.hpp).
#pragma once
#include <cstddef>
#include <span>
#include <string_view>

namespace smelt {

struct DashboardAsset {
  const char* name;           // "dashboard.js", "uPlot.iife.min.js", ...: the path under /assets/
  const unsigned char* data;  // size bytes, then a NUL
  size_t size;
  std::string_view text() const { return {reinterpret_cast<const char*>(data), size}; }
};

// Every embedded file, in the order CMakeLists.txt names them.
std::span<const DashboardAsset> dashboard_assets();

}  // namespace smelt
