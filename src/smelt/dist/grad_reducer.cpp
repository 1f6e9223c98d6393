// The reduction strategies of grad_reducer.hpp. Every sum is rank-ordered (the communicator's
// contract), so N ranks give one process's bits; top-k ties are broken by index, so it is
// deterministic too. Not the collectives themselves (communicator.cpp).
#include "smelt/dist/grad_reducer.hpp"

#include <algorithm>
#include <cmath>

#include "smelt/kernels/kernels.hpp"

namespace smelt {

const std::vector<int64_t>& GradReducer::bounds() const {
  static const std::vector<int64_t> none;
  return none;
}

Status GradReducer::grad_norm(const float* grads, double& out) {
  kernels_set_threads(threads_);
  out = std::sqrt(grad_norm_squared(grads, n_));
  return Status::ok();
}

void DenseReducer::begin_step(float* grads, const float* acc, int64_t) {
  grads_ = grads, acc_ = acc;
  pend_lo_ = pend_hi_ = -1;
  buckets_ = 0;
}

void DenseReducer::ready(int64_t lo, int64_t hi) {  // contiguous ranges, from the top down
  if (pend_lo_ < 0) pend_hi_ = hi;
  pend_lo_ = lo;
  if (pend_hi_ - pend_lo_ >= bucket_) flush();
}

void DenseReducer::flush() {
  if (pend_lo_ < 0) return;
  float* g = grads_;
  if (acc_)  // the earlier micro-batches' sum, added as in the serial path (acc + g)
    for (int64_t i = pend_lo_; i < pend_hi_; i++) g[i] = acc_[i] + g[i];
  comm_.sum_async(g + pend_lo_, pend_lo_, pend_hi_ - pend_lo_, owners());
  pend_lo_ = pend_hi_ = -1;
  buckets_++;
}

Status DenseReducer::finish(float* grads, double* busy_ms) {
  if (busy_ms) *busy_ms = 0;
  if (overlap_) return comm_.wait_async(busy_ms);
  return comm_.allreduce_sum(grads, n_);
}

Status ZeroReducer::finish(float* grads, double* busy_ms) {
  if (busy_ms) *busy_ms = 0;
  if (overlap_) return comm_.wait_async(busy_ms);
  return comm_.reduce_scatter_sum(grads, 0, n_, bounds_);
}

// Each rank sums the squares of its own blocks (the reduced gradient is valid only there), the
// block partials are summed over ranks (each block has one non-zero contributor, so exactly) and
// then in block order: the bits of grad_norm_squared over the whole reduced gradient.
Status ZeroReducer::grad_norm(const float* grads, double& out) {
  const int64_t n = n_, nb = (n + kGradNormBlock - 1) / kGradNormBlock;
  const int64_t lo = bounds_[comm_.rank()], hi = bounds_[comm_.rank() + 1];
  norm_parts_.assign(nb, 0.0);
  kernels_set_threads(threads_);
  if (hi > lo)
    grad_norm_block_partials(grads, n, lo / kGradNormBlock, (hi + kGradNormBlock - 1) / kGradNormBlock,
                             norm_parts_.data() + lo / kGradNormBlock);
  if (Status s = comm_.allreduce_sum(norm_parts_.data(), nb); !s) return s;
  double total = 0.0;
  for (double p : norm_parts_) total += p;
  out = std::sqrt(total);
  return Status::ok();
}

Status ZeroReducer::after_update(float* params) { return comm_.allgather_ranges(params, bounds_); }

// This rank adds what it did not send before (residual), sends its k largest-magnitude entries
// (ties broken by index), keeps the rest as the next residual. With momentum the candidate is
// residual + a local velocity (u = mu u + g), and the sent entries of both are cleared.
Status TopkReducer::finish(float* g, double* busy_ms) {
  if (busy_ms) *busy_ms = 0;
  const int64_t n = n_;
  if (residual_.empty()) residual_.assign(n, 0.0f);
  mag_.resize(n);
  const float mu = (float)momentum_;
  if (mu > 0) {  // momentum correction: u = mu u + g; the candidate is residual + u
    if (velocity_.empty()) velocity_.assign(n, 0.0f);
    for (int64_t i = 0; i < n; i++) velocity_[i] = mu * velocity_[i] + g[i], g[i] = residual_[i] + velocity_[i];
  } else {
    for (int64_t i = 0; i < n; i++) g[i] += residual_[i];
  }
  for (int64_t i = 0; i < n; i++) mag_[i] = std::fabs(g[i]);
  const int64_t W = warmup_;
  const double ratio = W > 0 && step_ < W ? std::pow(ratio_, (double)step_ / (double)W) : ratio_;
  const int64_t k = std::max<int64_t>(1, std::min<int64_t>(n, (int64_t)std::ceil(ratio * n)));
  std::nth_element(mag_.begin(), mag_.begin() + (n - k), mag_.end());
  const float thr = mag_[n - k];
  sel_idx_.clear(), sel_val_.clear();
  for (int64_t i = 0; i < n && (int64_t)sel_idx_.size() < k; i++)
    if (std::fabs(g[i]) > thr) sel_idx_.push_back(i), sel_val_.push_back(g[i]);
  for (int64_t i = 0; i < n && (int64_t)sel_idx_.size() < k; i++)
    if (std::fabs(g[i]) == thr) sel_idx_.push_back(i), sel_val_.push_back(g[i]);
  std::copy(g, g + n, residual_.begin());
  for (int64_t i : sel_idx_) residual_[i] = 0.0f;
  if (mu > 0)
    for (int64_t i : sel_idx_) velocity_[i] = 0.0f;  // momentum factor masking: sent entries start over
  if (Status s = comm_.allgather_sparse(sel_idx_.data(), sel_val_.data(), (int)sel_idx_.size(), all_idx_, all_val_,
                                        counts_);
      !s)
    return s;
  std::fill(g, g + n, 0.0f);
  for (size_t j = 0; j < all_idx_.size(); j++) g[all_idx_[j]] += all_val_[j];  // rank order
  return Status::ok();
}

std::unique_ptr<GradReducer> grad_reducer_create(const DistConfig& c, Communicator& comm, int64_t n,
                                                 std::vector<int64_t> zero_bounds, int threads) {
  if (comm.size() == 1) return nullptr;
  if (c.compression == GradCompression::kTopk)
    return std::make_unique<TopkReducer>(comm, n, threads, c.topk_ratio, c.topk_warmup_steps, c.topk_momentum);
  const int64_t bucket = dist_bucket_elements(c.bucket_mb);
  if (!zero_bounds.empty())
    return std::make_unique<ZeroReducer>(comm, n, threads, c.overlap, bucket, std::move(zero_bounds));
  return std::make_unique<DenseReducer>(comm, n, threads, c.overlap, bucket);
}

}  // namespace smelt
