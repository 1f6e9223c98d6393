// The model's LoRA wiring: the adapters' buffers and their products beside the base GEMMs of each
// layer (model.cpp calls these right after the base layer's forward and backward GEMM).
#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "smelt/model/model.hpp"

namespace smelt {

Status Model::lora_alloc(int B, int T) {
  if (!lora_on()) {
    lora_ = LoraLayout{};
    lp_ = {}, lg_ = {}, lu_ = {}, lxd_ = {}, ldu_ = {}, ldxd_ = {};
    return Status::ok();
  }
  if (Status s = lora_config_validate(lcfg_); !s) return s;
  if (!shard_.whole())
    return Status::error(fmt::format("[lora] needs the whole model on each rank; this rank holds {} "
                                     "(tensor or pipeline parallel: train LoRA data-parallel)",
                                     shard_describe(shard_)));
  lora_ = smelt::lora_layout(cfg_, lcfg_);
  const int64_t rows = (int64_t)B * T, r = lcfg_.rank;
  lp_.assign(lora_.params.total, 0.0f);
  lg_.assign(lora_.params.total, 0.0f);
  lu_.assign((size_t)(cfg_.n_layers * kLoraTargets) * rows * r, 0.0f);
  ldu_.assign(rows * r, 0.0f);
  const bool drop = lcfg_.dropout > 0;
  lxd_.assign(drop ? rows * lora_.max_in : 0, 0.0f);
  ldxd_.assign(drop ? rows * lora_.max_in : 0, 0.0f);
  lora_init(lora_, lp_.data(), lcfg_.seed);
  lora_counter_ = 0;
  spdlog::info("[lora] rank {}, alpha {}, dropout {}, targets {}: {} adapter parameters ({:.2f}% of the base's {}), "
               "the base frozen", lcfg_.rank, lcfg_.alpha, lcfg_.dropout, fmt::join(lcfg_.targets, ","),
               lora_.params.total, 100.0 * (double)lora_.params.total / (double)layout_.total, layout_.total);
  return Status::ok();
}

LoraOp Model::lora_op(int l, int t) {
  const LoraSlot& s = lora_.layers[l][t];
  LoraOp op;
  op.A = lp_.data() + s.a, op.B = lp_.data() + s.b;
  op.dA = lg_.data() + s.a, op.dB = lg_.data() + s.b;
  op.rank = lcfg_.rank, op.in = s.in, op.out = s.out, op.col0 = s.col0;
  op.scale = lcfg_.scale();
  op.p = lora_drop_ ? lcfg_.dropout : 0.0;
  op.seed = lcfg_.seed, op.counter = lora_counter_;
  op.layer = l, op.target = t;
  return op;
}

void Model::lora_forward(int l, int first, int last, float* out, int ldo, const float* x, int N) {
  if (!lora_on()) return;
  const int64_t rows = (int64_t)Bmax_ * Tmax_;
  for (int t = first; t <= last; t++) {
    if (lora_.layers[l][t].a < 0) continue;
    float* u = lu_.data() + (int64_t)(l * kLoraTargets + t) * rows * lcfg_.rank;
    smelt::lora_forward(lora_op(l, t), out, ldo, x, lxd_.empty() ? nullptr : lxd_.data(), u, N, threads_);
  }
}

void Model::lora_backward(int l, int first, int last, float* dinp, const float* dout, int ldo, const float* x,
                          int N) {
  if (!lora_on()) return;
  const int64_t rows = (int64_t)Bmax_ * Tmax_;
  for (int t = first; t <= last; t++) {
    if (lora_.layers[l][t].a < 0) continue;
    const float* u = lu_.data() + (int64_t)(l * kLoraTargets + t) * rows * lcfg_.rank;
    smelt::lora_backward(lora_op(l, t), dinp, dout, ldo, x, u, lxd_.empty() ? nullptr : lxd_.data(), ldu_.data(),
                         ldxd_.empty() ? nullptr : ldxd_.data(), N, threads_);
  }
}

}  // namespace smelt
