// The pipeline-parallel schedule (docs/parallel.md): the order in which one stage runs the
// forward and backward passes of a step's micro-batches under 1F1B (PipeDream-Flush): stage s of
// P first runs min(P - s - 1, M) forwards, then alternates one forward and one backward, then
// drains the remaining backwards. At most min(P - s, M) micro-batches are in flight on stage s,
// so it keeps that many activation sets (against M for running every forward first). Not the
// sends and receives (the trainer does them around each op).
#pragma once
#include <vector>

namespace smelt {

struct PipeOp {
  bool forward = true;
  int micro = 0;
};

std::vector<PipeOp> pipeline_1f1b(int stages, int stage, int micro_batches);
// Activation sets stage `stage` needs: the most micro-batches it has in flight.
int pipeline_slots(int stages, int stage, int micro_batches);
// The idle fraction of a step with equal stage times and free messages: (P - 1) / (M + P - 1).
double pipeline_bubble(int stages, int micro_batches);

}  // namespace smelt
