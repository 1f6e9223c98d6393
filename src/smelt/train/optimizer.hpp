// AdamW over the model's flat parameter and gradient buffers: the moments, the step count, the
// global-norm clipping and, for ZeRO-1, one rank's [begin, end) range of the moments. Not the
// model (model/model.hpp holds parameters and gradients) nor the reduction of the gradients (dist/).
#pragma once
#include <cstdint>
#include <vector>

#include "smelt/model/params.hpp"

namespace smelt {

struct AdamWConfig {
  float lr = 3e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;  // only on tensors with ParamTensor::decay (not norms, embeddings)
  bool decay_all = false;     // also decay norms and embeddings (off by default, as in GPT-3/Llama)
  float grad_clip = 1.0f;     // max global L2 norm; <= 0 disables clipping
};

class AdamW {
 public:
  // Zeroed moments for the flat range [begin, end) of `layout` (end < 0 or past the end: the whole
  // buffer, begin 0) and step count 0. ZeRO-1 gives each rank its zero_shard_bounds range; the
  // caller gathers the other ranks' ranges of the parameters after step().
  void init(const ParamLayout& layout, int threads, int64_t begin = 0, int64_t end = -1);
  // Runs the step and the norm on the naive `_ref` kernels (the oracle for tests).
  void set_reference(bool on) { reference_ = on; }
  void set_threads(int threads) { threads_ = threads; }

  // Global L2 norm of grads (layout().total floats, fixed reduction order).
  double grad_norm(const float* grads) const;
  // Clips by the global gradient norm, then one AdamW step at step t+1 over the shard's range of
  // params from the same range of grads; returns the norm before clipping.
  float step(float* params, const float* grads, const AdamWConfig& h);
  // The same step with the norm already computed (grad_norm, or ZeRO-1's sharded partials).
  float step(float* params, const float* grads, const AdamWConfig& h, double grad_norm);

  // State for checkpoints: the moments (the layout of params from shard_begin() to shard_end())
  // and the step count.
  float* m() { return m_.data(); }
  float* v() { return v_.data(); }
  int64_t shard_begin() const { return begin_; }
  int64_t shard_end() const { return end_; }
  int64_t step_count() const { return t_; }
  void set_step_count(int64_t t) { t_ = t; }

 private:
  ParamLayout layout_;
  std::vector<float> m_, v_;  // [i - begin_]
  int64_t begin_ = 0, end_ = 0, t_ = 0;
  int threads_ = 1;
  bool reference_ = false;
};

}  // namespace smelt
