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

CkptBox box_of(const ParamTensor& t) { return {t.row0, t.col0, t.rows, t.cols}; }

// The stored shape of a box of t: {rows} for a vector, {rows, cols} for a matrix.
std::vector<int64_t> shape_of(const ParamTensor& t, const CkptBox& b) {
  return t.full_cols == 1 ? std::vector<int64_t>{b.rows} : std::vector<int64_t>{b.rows, b.cols};
}

// Reads the saved values of the flat range [b, e) of local tensor t (b, e: buffer offsets) into
// out, from the boxes stored under prefix + name, whatever layout wrote them.
Status read_range(const std::string& dir, const CkptManifest& m, const std::string& prefix, const ParamTensor& t,
                  int64_t b, int64_t e, float* out) {
  for (const CkptFlatBox& fb : ckpt_flat_boxes(box_of(t), b - t.offset, e - t.offset))
    if (Status s = ckpt_read_box(dir, m, prefix + t.name, t.full_rows, t.full_cols, fb.box,
                                 out + (t.offset + fb.offset - b));
        !s)
      return s;
  return Status::ok();
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
  if (m.state.contains("zero_bounds") && !m.state.contains("layout")) {  // a checkpoint before boxed moments
    const std::vector<int64_t> zb = m.state["zero_bounds"].get<std::vector<int64_t>>();
    if (zb.size() < 2 || zb.back() != lay.total)
      return Status::error(fmt::format("{}/manifest.json: zero_bounds do not cover this rank's {} parameters (a ZeRO-1 "
                                       "checkpoint from before boxed moments resumes with tp = pp = 1 only)",
                                       dir, lay.total));
    for (size_t q = 0; q + 1 < zb.size(); q++)
      if (zb[q + 1] > zb[q])
        if (Status s = copy_part(fmt::format("zero.{}.{}", which, q), zb[q], zb[q + 1]); !s) return s;
    return Status::ok();
  }
  // Boxes of the full tensors (any layout's, plain names when whole): this rank's range of each.
  for (const auto& p : lay.tensors) {
    const int64_t b = std::max(lo, p.offset), e = std::min(hi, p.offset + p.size());
    if (b < e)
      if (Status s = read_range(dir, m, "optim." + which + ".", p, b, e, out + (b - lo)); !s) return s;
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
  // Every tensor under its full name, as the box of it this rank holds (the plain name when
  // whole): the weights from one data-parallel replica, the moments from the rank that owns them
  // (ZeRO-1: the boxes of this rank's range; otherwise replica 0). Copies (replicas) are not saved.
  auto name = [&](const std::string& prefix, const ParamTensor& p, const CkptBox& box) {
    return prefix + ckpt_box_name(p.name, box, p.full_rows, p.full_cols);
  };
  r.state["layout"] = {{"tp", t.model.shard().tp}, {"pp", t.model.shard().pp}, {"ranks", t.ranks}};
  if (t.lead)
    for (const auto& p : lay.tensors)
      if (!p.replica) r.tensors.push_back({name("", p, box_of(p)), shape_of(p, box_of(p)), t.model.params() + p.offset});
  const std::vector<int64_t>& bounds = t.reducer ? t.reducer->bounds() : std::vector<int64_t>{};
  const bool sharded = !bounds.empty();
  if (sharded || t.lead) {
    const int64_t lo = t.opt.shard_begin(), hi = t.opt.shard_end();
    for (const char* which : {"m", "v"}) {
      float* base = std::string(which) == "m" ? t.opt.m() : t.opt.v();
      for (const auto& p : lay.tensors) {
        const int64_t b = std::max(lo, p.offset), e = std::min(hi, p.offset + p.size());
        if (p.replica || b >= e) continue;
        for (const CkptFlatBox& fb : ckpt_flat_boxes(box_of(p), b - p.offset, e - p.offset))
          r.tensors.push_back({name(fmt::format("optim.{}.", which), p, fb.box), shape_of(p, fb.box),
                               base + (p.offset + fb.offset - lo)});
      }
    }
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
  for (const auto& p : lay.tensors)  // this rank's box of every tensor, from the boxes any layout saved
    if (Status s = ckpt_read_box(dir, m, p.name, p.full_rows, p.full_cols, box_of(p), t.model.params() + p.offset); !s)
      return s;
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
