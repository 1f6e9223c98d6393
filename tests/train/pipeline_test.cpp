// The 1F1B schedule (train/pipeline.hpp), checked by running every stage's op list against the
// pipeline's dependencies (a forward needs the previous stage's forward of that micro-batch, a
// backward the next stage's backward of it and its own forward) in unit time steps: every
// layout finishes (no stage waits for a message that never comes), in 2 (M + P - 1) steps, the
// idle fraction is the bubble the formula gives, and no stage holds more micro-batches than
// pipeline_slots says.
#include <algorithm>
#include <vector>

#include <gtest/gtest.h>

#include "smelt/train/pipeline.hpp"

using namespace smelt;

TEST(Pipeline, OneFOneBFinishesWithTheBubbleAndTheSlotsItPromises) {
  for (int P = 1; P <= 6; P++)
    for (int M = 1; M <= 9; M++) {
      std::vector<std::vector<PipeOp>> ops(P);
      for (int s = 0; s < P; s++) {
        ops[s] = pipeline_1f1b(P, s, M);
        ASSERT_EQ((int)ops[s].size(), 2 * M) << "P " << P << " M " << M << " stage " << s;
      }
      // done_f[s][i] / done_b[s][i]: the step at which it finished (-1: not yet)
      std::vector<std::vector<int>> done_f(P, std::vector<int>(M, -1)), done_b = done_f;
      std::vector<size_t> next(P, 0);
      std::vector<int> in_flight(P, 0), most(P, 0), busy(P, 0);
      int t = 0;
      for (; t < 10 * (M + P); t++) {
        bool all = true;
        std::vector<std::pair<int, PipeOp>> now;
        for (int s = 0; s < P; s++) {
          if (next[s] == ops[s].size()) continue;
          all = false;
          const PipeOp op = ops[s][next[s]];
          const bool ready = op.forward ? (s == 0 || (done_f[s - 1][op.micro] >= 0 && done_f[s - 1][op.micro] < t))
                                        : (done_f[s][op.micro] >= 0 &&
                                           (s == P - 1 || (done_b[s + 1][op.micro] >= 0 && done_b[s + 1][op.micro] < t)));
          if (ready) now.push_back({s, op});
        }
        if (all) break;
        for (auto [s, op] : now) {
          (op.forward ? done_f : done_b)[s][op.micro] = t;
          in_flight[s] += op.forward ? 1 : -1;
          most[s] = std::max(most[s], in_flight[s]);
          busy[s]++;
          next[s]++;
        }
      }
      for (int s = 0; s < P; s++) {
        ASSERT_EQ(next[s], ops[s].size()) << "P " << P << " M " << M << ": stage " << s << " is stuck";
        EXPECT_EQ(most[s], pipeline_slots(P, s, M)) << "P " << P << " M " << M << " stage " << s;
      }
      EXPECT_EQ(t, 2 * (M + P - 1)) << "P " << P << " M " << M;
      const double idle = 1.0 - (double)busy[0] / t;  // every stage is busy 2M of the steps
      EXPECT_NEAR(idle, pipeline_bubble(P, M), 1e-12) << "P " << P << " M " << M;
    }
}

TEST(Pipeline, EachMicroBatchRunsForwardThenBackwardOnceOnEveryStage) {
  const auto ops = pipeline_1f1b(4, 1, 6);
  std::vector<int> f(6, 0), b(6, 0);
  for (const PipeOp& op : ops) {
    if (op.forward) f[op.micro]++;
    else {
      EXPECT_EQ(f[op.micro], 1) << "backward of " << op.micro << " before its forward";
      b[op.micro]++;
    }
  }
  for (int i = 0; i < 6; i++) EXPECT_EQ(f[i] + b[i], 2) << i;
  EXPECT_EQ(pipeline_bubble(1, 8), 0.0);
  EXPECT_DOUBLE_EQ(pipeline_bubble(4, 8), 3.0 / 11.0);
}
