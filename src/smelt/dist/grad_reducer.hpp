// How a training step's gradient is reduced over the data-parallel ranks (docs/dist.md), one class
// per strategy behind GradReducer: the dense sum (flat or hierarchical, as the communicator does
// it; overlapped buckets or one sum after backward), top-k with error feedback, ZeRO-1. Not the
// communicator (communicator.hpp), not the optimizer nor the checkpoint files (train/).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "smelt/common/status.hpp"
#include "smelt/dist/communicator.hpp"

namespace smelt {

// One step, as the trainer calls it: begin_step; with overlaps(), ready(lo, hi) from the last
// micro-batch's grad-ready hook and backward_done() after it; finish() before the optimizer;
// grad_norm() for clipping; after_update() once the optimizer has stepped.
class GradReducer {
 public:
  virtual ~GradReducer() = default;
  // Whether ready() is to be called during backward (buckets start while backward runs).
  virtual bool overlaps() const { return false; }
  // ZeRO-1: each rank owns a range of the gradient, the moments and the update (bounds()).
  virtual bool shards_optimizer() const { return false; }
  virtual const std::vector<int64_t>& bounds() const;  // [rank] + 1 entries; empty when not sharded
  // A new step over grads (n floats); acc: the earlier micro-batches' gradient sum, which each
  // overlapped bucket adds first (acc + g, the serial path's order), or nullptr. step: the
  // optimizer steps done so far (top-k's warmup).
  virtual void begin_step(float* grads, const float* acc, int64_t step) {}
  // [lo, hi) of the gradient is final (ranges come from the top down and are contiguous).
  virtual void ready(int64_t lo, int64_t hi) {}
  // The last bucket of an overlapped backward.
  virtual void backward_done() {}
  int buckets() const { return buckets_; }  // buckets started this step
  // The reduced gradient in grads (ZeRO-1: valid in this rank's range). busy_ms: the
  // communication thread's time in overlapped buckets (0 otherwise).
  virtual Status finish(float* grads, double* busy_ms) = 0;
  // The global L2 norm of the reduced gradient, with the bits of grad_norm_squared.
  virtual Status grad_norm(const float* grads, double& out);
  // After the optimizer step (ZeRO-1: every rank's updated range to every rank).
  virtual Status after_update(float* params) { return Status::ok(); }

 protected:
  GradReducer(Communicator& comm, int64_t n, int threads) : comm_(comm), n_(n), threads_(threads) {}
  Communicator& comm_;
  int64_t n_;
  int threads_;
  int buckets_ = 0;
};

// The dense sum over all ranks through the communicator (its flat or hierarchical algorithm).
// With overlap the grad-ready ranges gather into buckets of at least bucket floats, each summed on
// the communication thread while backward goes on; without, one sum after backward.
class DenseReducer : public GradReducer {
 public:
  DenseReducer(Communicator& comm, int64_t n, int threads, bool overlap, int64_t bucket)
      : GradReducer(comm, n, threads), overlap_(overlap), bucket_(bucket) {}
  bool overlaps() const override { return overlap_; }
  void begin_step(float* grads, const float* acc, int64_t step) override;
  void ready(int64_t lo, int64_t hi) override;
  void backward_done() override { flush(); }
  Status finish(float* grads, double* busy_ms) override;

 protected:
  void flush();
  virtual const std::vector<int64_t>* owners() const { return nullptr; }
  bool overlap_;
  int64_t bucket_;
  float* grads_ = nullptr;
  const float* acc_ = nullptr;
  int64_t pend_lo_ = -1, pend_hi_ = -1;  // the bucket being gathered (-1: none)
};

// ZeRO-1 (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
// Models"): the gradient reduce-scattered to the owner of each range (bucketed as DenseReducer),
// the norm from each rank's block partials, the updated ranges all-gathered after the step.
class ZeroReducer : public DenseReducer {
 public:
  ZeroReducer(Communicator& comm, int64_t n, int threads, bool overlap, int64_t bucket, std::vector<int64_t> bounds)
      : DenseReducer(comm, n, threads, overlap, bucket), bounds_(std::move(bounds)) {}
  bool shards_optimizer() const override { return true; }
  const std::vector<int64_t>& bounds() const override { return bounds_; }
  Status finish(float* grads, double* busy_ms) override;
  Status grad_norm(const float* grads, double& out) override;
  Status after_update(float* params) override;

 private:
  const std::vector<int64_t>* owners() const override { return &bounds_; }
  std::vector<int64_t> bounds_;
  std::vector<double> norm_parts_;  // [block] the gradient-norm blocks' partials
};

// Top-k sparsification with error feedback (Stich et al., "Sparsified SGD with Memory"), the
// ratio's warmup and momentum correction of Deep Gradient Compression (Lin et al. 2018): each rank
// sends its k largest candidates as (index, value) pairs; every rank sums all pairs in rank order.
// Needs the whole gradient, so never overlaps. Its residual and velocity are rank-local state that
// checkpoints carry (residual(), velocity()).
class TopkReducer : public GradReducer {
 public:
  TopkReducer(Communicator& comm, int64_t n, int threads, double ratio, int64_t warmup_steps, double momentum)
      : GradReducer(comm, n, threads), ratio_(ratio), warmup_(warmup_steps), momentum_(momentum) {}
  void begin_step(float* grads, const float* acc, int64_t step) override { step_ = step; }
  Status finish(float* grads, double* busy_ms) override;
  bool momentum() const { return momentum_ > 0; }
  // The unsent remainder and the local velocity ([i] over the gradient; empty until the first
  // step or a load; a caller may size them with n zeros to save or load them).
  std::vector<float>& residual() { return residual_; }
  std::vector<float>& velocity() { return velocity_; }

 private:
  double ratio_;
  int64_t warmup_;
  double momentum_;
  int64_t step_ = 0;
  std::vector<float> residual_, mag_, velocity_;
  std::vector<int64_t> sel_idx_, all_idx_;
  std::vector<float> sel_val_, all_val_;
  std::vector<int> counts_;
};

// The strategy [dist] asks for over a gradient of n floats: top-k, ZeRO-1 (zero = 1, with the
// zero_shard_bounds of the ranks) or the dense sum. One process: nullptr (nothing to reduce).
std::unique_ptr<GradReducer> grad_reducer_create(const DistConfig& c, Communicator& comm, int64_t n,
                                                 std::vector<int64_t> zero_bounds, int threads);

}  // namespace smelt
