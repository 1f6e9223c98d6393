// AdamW (Loshchilov & Hutter, "Decoupled Weight Decay Regularization") with global-norm
// clipping over flat buffers, tensor by tensor for the decay mask. Not the kernels themselves
// (kernels/cpu/adamw.cpp): this file picks the range, the decay and the clip scale.
#include "smelt/train/optimizer.hpp"

#include <algorithm>
#include <cmath>

#include "smelt/kernels/kernels.hpp"
#include "smelt/obs/trace.hpp"

namespace smelt {

void AdamW::init(const ParamLayout& layout, int threads, int64_t begin, int64_t end) {
  layout_ = layout;
  threads_ = threads;
  if (end < 0 || end > layout.total) begin = 0, end = layout.total;
  begin_ = begin, end_ = end;
  m_.assign(end_ - begin_, 0.0f);
  v_.assign(end_ - begin_, 0.0f);
  t_ = 0;
}

double AdamW::grad_norm(const float* grads) const {
  kernels_set_threads(threads_);
  return std::sqrt((reference_ ? grad_norm_squared_ref : grad_norm_squared)(grads, layout_.total));
}

float AdamW::step(float* params, const float* grads, const AdamWConfig& h) {
  return step(params, grads, h, grad_norm(grads));
}

float AdamW::step(float* params, const float* grads, const AdamWConfig& h, double norm) {
  TraceSpan span("optimizer");
  kernels_set_threads(threads_);
  t_++;
  const float scale = grad_clip_scale(norm, h.grad_clip);
  const int64_t lo = begin_, hi = end_;
  for (const auto& t : layout_.tensors) {
    const int64_t b = std::max(lo, t.offset), e = std::min(hi, t.offset + t.size());  // the shard's part
    if (b >= e) continue;
    (reference_ ? adamw_step_ref : adamw_step)(params + b, m_.data() + (b - lo), v_.data() + (b - lo), grads + b,
                                               e - b, h.lr, h.beta1, h.beta2, h.eps,
                                               t.decay || h.decay_all ? h.weight_decay : 0.0f, scale, t_);
  }
  return (float)norm;
}

}  // namespace smelt
