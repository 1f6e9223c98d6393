// A small chart for a terminal: series of (x, y) points drawn with one glyph each on a grid of
// characters, with the y range labelled on the left, the x range below, horizontal reference lines
// and a legend. Used by the pipeline summary for the loss curves. Not a plotting library.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace smelt {

struct ChartSeries {
  std::string name;
  char glyph = '*';
  std::vector<std::pair<double, double>> points;  // (x, y); non-finite points are left out
};

struct ChartLine {  // a horizontal reference line at y, drawn with glyph where no point is
  std::string name;
  double y = 0;
  char glyph = '-';
};

// Lines of `width` x `height` plot cells (plus labels). Several points in one cell show the later
// series' glyph. Empty when no series has a finite point.
std::string text_chart(const std::vector<ChartSeries>& series, const std::vector<ChartLine>& lines, int width,
                       int height, const std::string& x_label, const std::string& y_label);

}  // namespace smelt
