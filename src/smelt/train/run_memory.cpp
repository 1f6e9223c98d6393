// The trainer's buffers beyond the model's plan (run_memory.hpp).
#include "smelt/train/run_memory.hpp"

#include <algorithm>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "smelt/ckpt/async_writer.hpp"
#include "smelt/ckpt/safetensors.hpp"
#include "smelt/dist/communicator.hpp"
#include "smelt/machine/gemm_select.hpp"
#include "smelt/model/params.hpp"
#include "smelt/train/pipeline.hpp"

namespace smelt {

namespace {

// The largest bucket an overlapped backward sends: the ranges the model reports as final (the
// untied head, the final norm, each layer from the last, the embedding) gathered until a bucket
// holds at least `bucket` floats (DenseReducer::ready).
int64_t largest_bucket(const ParamLayout& p, int64_t bucket) {
  std::vector<int64_t> ranges;  // in the order backward makes them final
  const bool untied = p.lm_head >= 0 && p.lm_head != p.wte;
  if (untied) ranges.push_back(p.total - p.lm_head);
  const int64_t lnf_end = untied ? p.lm_head : p.total;
  if (p.lnf >= 0) ranges.push_back(lnf_end - p.lnf);
  for (size_t l = p.layers.size(); l-- > 0;) {
    const int64_t end = l + 1 < p.layers.size() ? p.layers[l + 1].ln1 : (p.lnf >= 0 ? p.lnf : p.total);
    ranges.push_back(end - p.layers[l].ln1);
  }
  ranges.push_back((p.layers.empty() ? (p.lnf >= 0 ? p.lnf : p.total) : p.layers[0].ln1) - p.wte);
  int64_t best = 0, pend = 0;
  for (int64_t r : ranges) {
    pend += r;
    if (pend >= bucket) best = std::max(best, pend), pend = 0;
  }
  return std::max(best, pend);
}

}  // namespace

RunMemory run_memory_plan(const ModelConfig& c, const ModelShard& shard, const RunMemoryInput& in) {
  RunMemory m;
  const int slots = shard.pp > 1 ? pipeline_slots(shard.pp, shard.stage, in.grad_accum) : 1;
  m.model = memory_plan(c, shard, in.B, in.T, in.zero ? in.dp : 1, in.precision, in.threads, slots,
                        in.lora.enabled() ? &in.lora : nullptr);
  const ParamLayout layout = in.lora.enabled() ? lora_layout(c, in.lora).params : param_layout(c, shard);
  const int64_t n = layout.total, NC = (int64_t)in.B * in.T * c.d_model;
  if (in.grad_accum > 1) m.accum_bytes = n * 4;
  // The sums' receive scratch: each rank's slice from every member, the size of the message.
  // ZeRO-1 sends each bucket's slices to their owners: a rank owning a whole bucket's range
  // receives it from every member (dp x the part it owns, at most n / dp).
  int64_t dp_message = 0;
  if (in.dp > 1) {
    const bool overlapped = in.dist.overlap && shard.whole() && !in.lora.enabled();  // (LoRA: one range)
    const int64_t bucket = overlapped ? largest_bucket(layout, dist_bucket_elements(in.dist.bucket_mb)) : n;
    dp_message = in.zero ? in.dp * std::min(bucket, (n + in.dp - 1) / in.dp) : bucket;
  }
  const int64_t tp_message = shard.tp > 1 ? NC : 0;  // the layers' all-reduces of (rows, d_model)
  m.reduce_bytes = 4 * (dp_message + tp_message);
  // 1F1B: a stage sends each micro-batch's output forward (all but the last) and its input's
  // gradient back (all but the first); every copy lives until the step's sends complete.
  if (shard.pp > 1) m.pipeline_bytes = (int64_t)in.grad_accum * ((shard.last() ? 0 : 1) + (shard.first() ? 0 : 1)) * NC * 4;
  if (in.checkpoints || in.save_at_end) {
    m.writer_bytes = safetensors_writer_bytes();
    // Replica 0's part: its weights (not the replicated copies) and the moments it owns.
    int64_t weights = 0;
    for (const ParamTensor& t : layout.tensors)
      if (!t.replica) weights += t.size();
    const int64_t moments = m.model.optimizer_bytes / 4;
    // Periodic saves use both buffers (one written while the next fills); a run that saves only
    // at its end fills one.
    if (in.staged) m.staging_bytes = (in.checkpoints ? 2 : 1) * ckpt_staging_bytes(weights + moments);
  }
  m.eval_bytes = in.eval_bytes;
  m.process_bytes = in.process_bytes;
  m.gemm_probe_bytes = gemm_select_bytes(c, in.B, in.T, in.precision);
  return m;
}

std::string RunMemory::report() const {
  auto line = [](const char* what, int64_t b) {
    return fmt::format("  {:<16} {:>10.1f} MiB  ({} bytes)\n", what, b / 1048576.0, b);
  };
  std::string s = model.report();
  s += line("gradient sum", accum_bytes) + line("reduce scratch", reduce_bytes);
  if (pipeline_bytes) s += line("pipeline sends", pipeline_bytes);
  if (staging_bytes) s += line("ckpt staging", staging_bytes);
  if (writer_bytes) s += line("ckpt writer", writer_bytes);
  if (eval_bytes) s += line("eval tasks", eval_bytes);
  if (process_bytes) s += line("process", process_bytes);
  s += line("GEMM probe", gemm_probe_bytes);
  s += fmt::format("  (the GEMM probe is freed before the step's buffers are made: the peak holds the larger)\n");
  return s + line("run total", total());
}

std::string RunMemory::summary(int rows) const {
  std::vector<std::pair<const char*, int64_t>> r = {
      {"parameters", model.param_bytes},   {"gradients", model.grad_bytes},   {"optimizer", model.optimizer_bytes},
      {"activations", model.activation_bytes}, {"bf16 operands", model.bf16_bytes}, {"gradient sum", accum_bytes},
      {"reduce scratch", reduce_bytes},    {"pipeline sends", pipeline_bytes}, {"ckpt staging", staging_bytes},
      {"ckpt writer", writer_bytes},       {"eval tasks", eval_bytes},      {"process", process_bytes}};
  // the larger of the probe and the step's buffers is the one counted
  if (gemm_probe_bytes > step_bytes()) r.push_back({"GEMM probe", gemm_probe_bytes});
  std::stable_sort(r.begin(), r.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string s = fmt::format("run total {:.1f} MiB", total() / 1048576.0);
  for (int i = 0; i < rows && i < (int)r.size() && r[i].second > 0; i++)
    s += fmt::format("{} {} {:.1f} MiB", i == 0 ? ":" : ",", r[i].first, r[i].second / 1048576.0);
  return s;
}

}  // namespace smelt
