// The terminal chart: points land in the cells their values map to, the axes carry the ranges,
// reference lines and the legend appear, and nothing is drawn without finite points.
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "smelt/common/text_chart.hpp"

using namespace smelt;

namespace {

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST(TextChart, PointsAxesReferenceLinesAndLegend) {
  ChartSeries falling{"train", '.', {{0, 10}, {50, 5}, {100, 0}}};
  ChartSeries valid{"valid", 'o', {{100, 2.5}}};
  ChartLine ref{"xz -9e", 7.5, '-'};
  const std::string c = text_chart({falling, valid}, {ref}, 11, 5, "step", "nats per token");
  auto l = lines_of(c);
  ASSERT_EQ(l.size(), 1u + 5 + 1 + 1 + 1) << c;  // y label, 5 rows, axis, x range, legend
  EXPECT_EQ(l[0].find("nats per token") != std::string::npos, true);
  // rows: y = 10 (top), 7.5, 5, 2.5, 0 (bottom); columns: x = 0 .. 100 over 11 cells
  EXPECT_EQ(l[1], "10 |.          ");
  EXPECT_EQ(l[2], "   |-----------");  // the reference line at 7.5
  EXPECT_EQ(l[3], "   |     .     ");
  EXPECT_EQ(l[4], "   |          o");
  EXPECT_EQ(l[5], " 0 |          .");
  EXPECT_EQ(l[6], "   +-----------");
  EXPECT_NE(l[7].find("0"), std::string::npos);
  EXPECT_NE(l[7].find("100"), std::string::npos);
  EXPECT_NE(l[7].find("step"), std::string::npos);
  EXPECT_NE(l[8].find(". train"), std::string::npos);
  EXPECT_NE(l[8].find("o valid"), std::string::npos);
  EXPECT_NE(l[8].find("-- xz -9e (7.5)"), std::string::npos);
}

TEST(TextChart, NothingToDrawIsEmptyAndNonFinitePointsAreLeftOut) {
  EXPECT_EQ(text_chart({}, {}, 20, 5, "x", "y"), "");
  EXPECT_EQ(text_chart({{"nan", '*', {{1, NAN}}}}, {}, 20, 5, "x", "y"), "");
  const std::string c = text_chart({{"s", '*', {{0, 1}, {1, NAN}, {2, 3}}}}, {}, 8, 3, "", "");
  auto l = lines_of(c);
  ASSERT_GE(l.size(), 3u);
  EXPECT_EQ(l[0], "3 |       *");
  EXPECT_EQ(l[2], "1 |*       ");
}

}  // namespace
