// The score pass's histograms (refinery.hpp): the keep_top_fraction threshold is the lowest bin
// edge with at most the fraction at or above it, and a top bin that alone holds more is kept
// whole rather than nothing; histograms from several tasks add up to the same thresholds.
#include "smelt/refine/refinery.hpp"

#include <gtest/gtest.h>

namespace smelt {
namespace {

TEST(ScoreHistograms, TopFractionThresholdIsABinEdgeKeepingAtMostTheFraction) {
  ScoreHistograms h;
  for (int i = 0; i < 100; ++i) h.add_classifier("c", i / 100.0 + 5e-5);  // one per 0.01
  EXPECT_DOUBLE_EQ(h.top_fraction_threshold("c", 0.1), 0.90);  // the ten at 0.90 .. 0.99
  EXPECT_DOUBLE_EQ(h.top_fraction_threshold("c", 0.105), 0.90) << "at most the fraction";
  EXPECT_DOUBLE_EQ(h.top_fraction_threshold("c", 1.0), 0.0);
  EXPECT_EQ(h.top_fraction_threshold("other", 0.1), -1);
  // split over two "tasks": the merged histogram gives the same threshold
  ScoreHistograms a, b;
  for (int i = 0; i < 100; ++i) (i % 2 ? a : b).add_classifier("c", i / 100.0 + 5e-5);
  a.merge(b);
  EXPECT_DOUBLE_EQ(a.top_fraction_threshold("c", 0.1), 0.90);
}

TEST(ScoreHistograms, ASaturatedTopBinIsKeptWholeNotDropped) {
  ScoreHistograms h;
  for (int i = 0; i < 7; ++i) h.add_classifier("c", 0.99999);  // 7 of 30 in the top bin
  for (int i = 0; i < 23; ++i) h.add_classifier("c", 0.2 + i * 0.01);
  const double t = h.top_fraction_threshold("c", 0.2);             // 6 of 30 allowed
  EXPECT_DOUBLE_EQ(t, 0.9999);
  EXPECT_LE(t, 0.99999) << "the seven saturated documents pass";
  EXPECT_GT(t, 0.2 + 22 * 0.01) << "and nothing below them";
}

}  // namespace
}  // namespace smelt
