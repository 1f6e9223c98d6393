// The checkpoint layout of the training state (train_state.hpp). The moments load from any saved
// layout into this rank's range, so a checkpoint resumes with or without ZeRO-1 and on any rank
// count; top-k's rank-local state resumes bit for bit on the same rank count.
#include "smelt/train/train_state.hpp"

#include <algorithm>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace smelt {

namespace {

std::vector<int64_t> shape_of(const ParamTensor& t) {
  return t.cols == 1 ? std::vector<int64_t>{t.rows} : std::vector<int64_t>{t.rows, t.cols};
}

// The AdamW moment `which` ("m" | "v") for this rank's range [shard_begin, shard_end) (all of it
// without ZeRO), from whole tensors ("optim.m.<name>", one writer) or from ZeRO-1 shards
// ("zero.m.<rank>" over state.zero_bounds, any rank count).
Status load_moments(const TrainTensors& t, const std::string& dir, const CkptManifest& m, const std::string& which,
                    float* out) {
  const ParamLayout& lay = t.model.layout();
  const int64_t lo = t.opt.shard_begin(), hi = t.opt.shard_end();
  std::vector<float> tmp;
  auto copy_part = [&](const std::string& name, int64_t b, int64_t e) -> Status {  // a saved range [b, e)
    const int64_t x = std::max(lo, b), y = std::min(hi, e);
    if (x >= y) return Status::ok();
    tmp.resize(e - b);
    if (Status s = ckpt_load_tensor(dir, m, name, tmp.data(), e - b); !s) return s;
    std::copy(tmp.begin() + (x - b), tmp.begin() + (y - b), out + (x - lo));
    return Status::ok();
  };
  if (m.state.contains("zero_bounds")) {
    const std::vector<int64_t> zb = m.state["zero_bounds"].get<std::vector<int64_t>>();
    if (zb.size() < 2 || zb.back() != lay.total)
      return Status::error(fmt::format("{}/manifest.json: zero_bounds do not cover the {} parameters", dir, lay.total));
    for (size_t q = 0; q + 1 < zb.size(); q++)
      if (zb[q + 1] > zb[q])
        if (Status s = copy_part(fmt::format("zero.{}.{}", which, q), zb[q], zb[q + 1]); !s) return s;
    return Status::ok();
  }
  for (const auto& p : lay.tensors) {
    if (lo <= p.offset && p.offset + p.size() <= hi) {  // whole tensor: straight into place
      if (Status s = ckpt_load_tensor(dir, m, "optim." + which + "." + p.name, out + (p.offset - lo), p.size()); !s)
        return s;
    } else if (Status s = copy_part("optim." + which + "." + p.name, p.offset, p.offset + p.size()); !s) {
      return s;
    }
  }
  return Status::ok();
}

// Top-k's residual (and velocity). Same rank count: each rank its own; another count: rank 0
// takes the sum of all saved residuals (nothing owed is lost), the others start from zero; none
// saved: zero.
Status load_topk_state(const TrainTensors& t, const std::string& dir, const CkptManifest& m) {
  auto* topk = dynamic_cast<TopkReducer*>(t.reducer);
  if (!topk) return Status::ok();
  topk->residual().clear(), topk->velocity().clear();
  if (!m.state.contains("topk_ranks")) return Status::ok();
  const int saved = m.state["topk_ranks"].get<int>();
  const int64_t n = t.model.layout().total;
  for (const char* what : {"residual", "velocity"}) {
    if (!m.find(fmt::format("topk.{}.0", what))) continue;
    std::vector<float>& dst = std::string(what) == "residual" ? topk->residual() : topk->velocity();
    dst.assign(n, 0.0f);
    if (saved == t.ranks) {
      if (Status s = ckpt_load_tensor(dir, m, fmt::format("topk.{}.{}", what, t.rank), dst.data(), n); !s) return s;
    } else if (t.rank == 0) {
      std::vector<float> tmp(n);
      for (int q = 0; q < saved; q++) {
        if (Status s = ckpt_load_tensor(dir, m, fmt::format("topk.{}.{}", what, q), tmp.data(), n); !s) return s;
        for (int64_t i = 0; i < n; i++) dst[i] += tmp[i];
      }
    }
  }
  if (saved != t.ranks)
    spdlog::info("top-k: the checkpoint's {} ranks' residuals go to rank 0 of {} (a different rank count)", saved,
                 t.ranks);
  return Status::ok();
}

}  // namespace

void train_state_add_tensors(const TrainTensors& t, bool parts, CkptSaveRequest& r) {
  const ParamLayout& lay = t.model.layout();
  if (t.lead)
    for (const auto& p : lay.tensors) r.tensors.push_back({p.name, shape_of(p), t.model.params() + p.offset});
  const std::vector<int64_t>& bounds = t.reducer ? t.reducer->bounds() : std::vector<int64_t>{};
  if (!bounds.empty()) {
    r.state["zero_bounds"] = bounds;
    const int64_t n = t.opt.shard_end() - t.opt.shard_begin();
    if (n > 0) {
      r.tensors.push_back({fmt::format("zero.m.{}", t.rank), {n}, t.opt.m()});
      r.tensors.push_back({fmt::format("zero.v.{}", t.rank), {n}, t.opt.v()});
    }
  } else if (t.lead) {
    for (const auto& p : lay.tensors) r.tensors.push_back({"optim.m." + p.name, shape_of(p), t.opt.m() + p.offset});
    for (const auto& p : lay.tensors) r.tensors.push_back({"optim.v." + p.name, shape_of(p), t.opt.v() + p.offset});
  }
  if (auto* topk = dynamic_cast<TopkReducer*>(t.reducer); parts && topk) {
    r.state["topk_ranks"] = t.ranks;
    const int64_t n = lay.total;
    std::vector<float>& residual = topk->residual();
    if (residual.empty()) residual.assign(n, 0.0f);
    r.tensors.push_back({fmt::format("topk.residual.{}", t.rank), {n}, residual.data()});
    if (topk->momentum()) {
      std::vector<float>& velocity = topk->velocity();
      if (velocity.empty()) velocity.assign(n, 0.0f);
      r.tensors.push_back({fmt::format("topk.velocity.{}", t.rank), {n}, velocity.data()});
    }
  }
}

Status train_state_load_tensors(const TrainTensors& t, const std::string& dir, const CkptManifest& m) {
  const ParamLayout& lay = t.model.layout();
  for (const auto& p : lay.tensors)
    if (Status s = ckpt_load_tensor(dir, m, p.name, t.model.params() + p.offset, p.size()); !s) return s;
  if (Status s = load_moments(t, dir, m, "m", t.opt.m()); !s) return s;
  if (Status s = load_moments(t, dir, m, "v", t.opt.v()); !s) return s;
  try {
    t.opt.set_step_count(m.state.at("optimizer_step").get<int64_t>());
  } catch (const std::exception& e) {
    return Status::error(fmt::format("{}/manifest.json: trainer state: {}", dir, e.what()));
  }
  return load_topk_state(t, dir, m);
}

}  // namespace smelt
