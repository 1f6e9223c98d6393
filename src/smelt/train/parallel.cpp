// The rank grid, its groups, the shared tensors' gradient syncs and the global norm (parallel.hpp).
#include "smelt/train/parallel.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "smelt/kernels/kernels.hpp"
#include "smelt/obs/trace.hpp"

namespace smelt {

Status rank_grid(int world, int rank, int tp, int pp, RankGrid& out) {
  if (world % (tp * pp) != 0)
    return Status::error(fmt::format("[parallel] tp = {} x pp = {} = {} ranks per model replica does not divide the "
                                     "{} ranks of the job: start a multiple of {} ranks", tp, pp, tp * pp, world,
                                     tp * pp));
  out = RankGrid{};
  out.tp = tp, out.pp = pp, out.dp = world / (tp * pp);
  out.tp_rank = rank % tp;
  out.dp_rank = rank / tp % out.dp;
  out.stage = rank / (tp * out.dp);
  return Status::ok();
}

Status parallel_groups(Communicator& world, const RankGrid& g, int kv_share, ParallelGroups& out) {
  out.reset();
  // Colours: the coordinates the group's ranks share.
  if (Status s = world.split(g.stage * g.tp + g.tp_rank, g.dp_rank, out.dp); !s) return s;
  if (Status s = world.split(g.stage * g.dp + g.dp_rank, g.tp_rank, out.tp); !s) return s;
  if (Status s = world.split(g.dp_rank * g.tp + g.tp_rank, g.stage, out.pp); !s) return s;
  if (Status s = out.tp->split(g.tp_rank / std::max(1, kv_share), g.tp_rank, out.kv); !s) return s;
  return Status::ok();
}

Status parallel_sync_grads(const ParamLayout& layout, float* grads, Communicator* kv, Communicator* pp, int stage,
                           int stages) {
  TraceSpan span("sync_shared_grads");
  for (const auto& t : layout.tensors) {
    if (t.kv_shared && kv && kv->size() > 1)
      if (Status s = kv->allreduce_sum(grads + t.offset, t.size()); !s) return s;
    if (t.tied_copy && pp && stages > 1) {
      const int peer = stage == 0 ? stages - 1 : 0;
      std::vector<float> other(t.size());
      float* mine = grads + t.offset;
      if (Status s = pp->send_async(mine, t.size(), peer, 31); !s) return s;
      if (Status s = pp->recv(other.data(), t.size(), peer, 31); !s) return s;
      if (Status s = pp->wait_sends(); !s) return s;
      for (int64_t i = 0; i < t.size(); i++) mine[i] += other[i];  // (addition commutes: both ends get the same bits)
    }
  }
  return Status::ok();
}

Status parallel_grad_norm(Communicator& world, const ParamLayout& layout, const float* grads, int64_t lo, int64_t hi,
                          bool counts, int threads, double& out) {
  double local = 0.0;
  kernels_set_threads(threads);
  if (counts)
    for (const auto& t : layout.tensors) {
      if (t.replica) continue;
      const int64_t b = std::max(lo, t.offset), e = std::min(hi, t.offset + t.size());
      if (b < e) local += grad_norm_squared(grads + b, e - b);
    }
  if (Status s = world.allreduce_sum(&local, 1); !s) return s;
  out = std::sqrt(local);
  return Status::ok();
}

}  // namespace smelt
