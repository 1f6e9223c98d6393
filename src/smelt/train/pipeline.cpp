// 1F1B order (pipeline.hpp).
#include "smelt/train/pipeline.hpp"

#include <algorithm>

namespace smelt {

std::vector<PipeOp> pipeline_1f1b(int stages, int stage, int micro_batches) {
  const int M = micro_batches, warm = std::min(stages - stage - 1, M);
  std::vector<PipeOp> ops;
  for (int i = 0; i < warm; i++) ops.push_back({true, i});
  for (int i = 0; i < M - warm; i++) {
    ops.push_back({true, warm + i});
    ops.push_back({false, i});
  }
  for (int i = M - warm; i < M; i++) ops.push_back({false, i});
  return ops;
}

int pipeline_slots(int stages, int stage, int micro_batches) {
  return std::max(1, std::min(stages - stage, micro_batches));
}

double pipeline_bubble(int stages, int micro_batches) {
  return stages <= 1 ? 0.0 : (double)(stages - 1) / (double)(micro_batches + stages - 1);
}

}  // namespace smelt
