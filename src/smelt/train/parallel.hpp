// The rank grid of hybrid parallel training (docs/parallel.md): world = DP x PP x TP ranks, TP
// innermost (a TP group is consecutive ranks, so on a cluster it stays inside a node), then DP,
// then PP; the data-, tensor- and pipeline-parallel groups; and what the trainer does across
// them besides the data-parallel reduction (dist/grad_reducer.hpp): the gradient syncs of shared
// tensors and the global gradient norm. Not the model's split (model/shard.hpp) nor the schedule
// (trainer_pipeline.cpp).
#pragma once
#include <cstdint>
#include <memory>

#include "smelt/common/status.hpp"
#include "smelt/dist/communicator.hpp"
#include "smelt/model/config.hpp"
#include "smelt/model/params.hpp"

namespace smelt {

struct RankGrid {
  int dp = 1, tp = 1, pp = 1;
  int dp_rank = 0, tp_rank = 0, stage = 0;
  // world rank = (stage * dp + dp_rank) * tp + tp_rank
  int world_rank(int stage_, int dp_rank_, int tp_rank_) const { return (stage_ * dp + dp_rank_) * tp + tp_rank_; }
};

// The grid of `world` ranks for tp x pp; fails when tp x pp does not divide the world, naming both.
Status rank_grid(int world, int rank, int tp, int pp, RankGrid& out);

struct ParallelGroups {
  std::unique_ptr<Communicator> dp;  // same stage and TP rank: the gradient reduction, ZeRO-1
  std::unique_ptr<Communicator> tp;  // same stage and DP rank: the layers' all-reduces
  std::unique_ptr<Communicator> pp;  // same DP and TP rank: activations and gradients between stages
  std::unique_ptr<Communicator> kv;  // inside a TP group, the ranks sharing a replicated KV head
  // Destroyed before the world communicator (MPI groups before MPI_Finalize).
  void reset() { kv.reset(), pp.reset(), tp.reset(), dp.reset(); }
};

// Every rank calls it (collective splits of `world`). kv_share: ranks per KV head when the KV
// heads are replicated (n_kv_heads < tp), else 1.
Status parallel_groups(Communicator& world, const RankGrid& g, int kv_share, ParallelGroups& out);

// Sums the gradients that several ranks hold a part of before the data-parallel reduction: the
// KV projections shared by TP ranks (over kv), and the two ends of a tied embedding (the first
// and the last stage over pp: each adds the other's, so both hold the same bits).
Status parallel_sync_grads(const ParamLayout& layout, float* grads, Communicator* kv, Communicator* pp,
                           int stage, int stages);

// The global L2 norm of the reduced gradient: each rank's owned tensors (not replicas), their part
// in [lo, hi) (its ZeRO-1 range, or everything), block sums in tensor order, summed over the
// world in rank order; counts = false adds nothing (a data-parallel replica of a rank that does).
Status parallel_grad_norm(Communicator& world, const ParamLayout& layout, const float* grads, int64_t lo, int64_t hi,
                          bool counts, int threads, double& out);

}  // namespace smelt
