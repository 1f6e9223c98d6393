// The training state's tensors in a checkpoint (docs/checkpoint.md, docs/parallel.md): what one
// rank's save carries (the weights and the AdamW moments optim.{m,v}.<name>, each as the boxes of
// the full tensors this rank holds, whatever its tensor/pipeline/ZeRO-1 layout; top-k's
// topk.{residual,velocity}.<rank>) and their load under any other layout and rank count. Not the
// checkpoint files (ckpt/) nor the trainer's scalar state (step, loader position, health).
#pragma once
#include <string>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/common/status.hpp"
#include "smelt/dist/grad_reducer.hpp"
#include "smelt/model/model.hpp"
#include "smelt/train/optimizer.hpp"

namespace smelt {

// This rank's part of the training state. reducer: nullptr on one process.
struct TrainTensors {
  Model& model;
  AdamW& opt;
  GradReducer* reducer = nullptr;
  int rank = 0, ranks = 1;
  bool lead = true;  // writes the weights (and, without ZeRO-1, the moments): data-parallel replica 0
};

// Adds this rank's tensors to r, and to r.state the layout they need to be read back
// (zero_bounds, topk_ranks). parts: every rank writes its own part (ZeRO-1, top-k).
void train_state_add_tensors(const TrainTensors& t, bool parts, CkptSaveRequest& r);
// Loads the weights, this rank's moments (from whole tensors or any rank count's ZeRO-1 shards),
// the optimizer's step count and top-k's state (same rank count: each rank its own; another count:
// rank 0 takes the sum of the saved residuals, the others start from zero).
Status train_state_load_tensors(const TrainTensors& t, const std::string& dir, const CkptManifest& m);

}  // namespace smelt
