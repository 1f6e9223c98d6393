// The terminal chart (text_chart.hpp): linear axes over the data's range, y growing upward.
#include "smelt/common/text_chart.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace smelt {

std::string text_chart(const std::vector<ChartSeries>& series, const std::vector<ChartLine>& lines, int width,
                       int height, const std::string& x_label, const std::string& y_label) {
  width = std::max(width, 8);
  height = std::max(height, 3);
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const auto& s : series)
    for (const auto& [x, y] : s.points)
      if (std::isfinite(x) && std::isfinite(y)) x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
  if (!(x0 <= x1)) return "";
  for (const auto& l : lines)
    if (std::isfinite(l.y)) y0 = std::min(y0, l.y), y1 = std::max(y1, l.y);
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y1 = y0 + 1;
  std::vector<std::string> grid(height, std::string(width, ' '));
  auto col = [&](double x) { return std::clamp((int)std::lround((x - x0) / (x1 - x0) * (width - 1)), 0, width - 1); };
  auto row = [&](double y) {  // row 0 is the top
    return std::clamp((int)std::lround((y1 - y) / (y1 - y0) * (height - 1)), 0, height - 1);
  };
  for (const auto& l : lines)
    if (std::isfinite(l.y)) std::fill(grid[row(l.y)].begin(), grid[row(l.y)].end(), l.glyph);
  for (const auto& s : series)
    for (const auto& [x, y] : s.points)
      if (std::isfinite(x) && std::isfinite(y)) grid[row(y)][col(x)] = s.glyph;
  const std::string top = fmt::format("{:.3g}", y1), bottom = fmt::format("{:.3g}", y0);
  const size_t lw = std::max({top.size(), bottom.size(), (size_t)1});
  std::string out = y_label.empty() ? "" : fmt::format("{:>{}} {}\n", "", lw, y_label);
  for (int r = 0; r < height; r++) {
    const std::string label = r == 0 ? top : r == height - 1 ? bottom : "";
    out += fmt::format("{:>{}} |{}\n", label, lw, grid[r]);
  }
  out += fmt::format("{:>{}} +{}\n", "", lw, std::string(width, '-'));
  const std::string left = fmt::format("{:g}", x0), right = fmt::format("{:g}", x1);
  const int gap = std::max(1, width - (int)left.size() - (int)right.size());
  out += fmt::format("{:>{}}  {}{}{}   {}\n", "", lw, left, std::string(gap, ' '), right, x_label);
  std::string legend;
  for (const auto& s : series) legend += fmt::format("{}{} {}", legend.empty() ? "" : "   ", s.glyph, s.name);
  for (const auto& l : lines) legend += fmt::format("{}{}{} {} ({:.3g})", legend.empty() ? "" : "   ", l.glyph, l.glyph, l.name, l.y);
  out += fmt::format("{:>{}}  {}\n", "", lw, legend);
  return out;
}

}  // namespace smelt
