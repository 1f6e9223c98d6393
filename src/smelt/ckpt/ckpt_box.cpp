// Tensors stored as boxes of full tensors (docs/checkpoint.md, "Tensors stored as boxes"): the box
// suffix of stored names, reading any box of a full tensor from whatever boxes a checkpoint holds,
// and the boxes of a flat range (ZeRO-1 shards). Not saving (a box is saved as a plain tensor under
// its box name by ckpt_save) and not the choice of layout (the trainer's).
#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "smelt/ckpt/checkpoint.hpp"

namespace smelt {

namespace {

int64_t end_row(const CkptBox& b) { return b.r0 + b.rows; }
int64_t end_col(const CkptBox& b) { return b.c0 + b.cols; }

bool inside(const CkptBox& b, int64_t full_rows, int64_t full_cols) {
  return b.r0 >= 0 && b.c0 >= 0 && b.rows >= 0 && b.cols >= 0 && end_row(b) <= full_rows && end_col(b) <= full_cols;
}

CkptBox intersect(const CkptBox& a, const CkptBox& b) {
  CkptBox x;
  x.r0 = std::max(a.r0, b.r0);
  x.c0 = std::max(a.c0, b.c0);
  x.rows = std::max<int64_t>(0, std::min(end_row(a), end_row(b)) - x.r0);
  x.cols = std::max<int64_t>(0, std::min(end_col(a), end_col(b)) - x.c0);
  return x;
}

// "rows [4, 8) x cols [0, 16)", or "elements [4, 8)" of a 1-D tensor.
std::string span_text(const CkptBox& b, int64_t full_cols) {
  if (full_cols == 1) return fmt::format("elements [{}, {})", b.r0, end_row(b));
  return fmt::format("rows [{}, {}) x cols [{}, {})", b.r0, end_row(b), b.c0, end_col(b));
}

// A non-negative decimal integer filling [s, e) of t.
bool parse_index(const std::string& t, size_t s, size_t e, int64_t& v) {
  if (s >= e || e - s > 18) return false;
  v = 0;
  for (size_t i = s; i < e; ++i) {
    if (t[i] < '0' || t[i] > '9') return false;
    v = v * 10 + (t[i] - '0');
  }
  return true;
}

// "a:b" in [s, e) of t, a <= b.
bool parse_range(const std::string& t, size_t s, size_t e, int64_t& a, int64_t& b) {
  size_t colon = t.find(':', s);
  return colon < e && parse_index(t, s, colon, a) && parse_index(t, colon + 1, e, b) && a <= b;
}

struct StoredBox {
  const CkptTensorInfo* info;
  CkptBox box;  // in full-tensor coordinates
};

// Every stored entry of tensor `name`, each checked against the full shape.
Status stored_boxes(const std::string& dir, const CkptManifest& m, const std::string& name, int64_t full_rows,
                    int64_t full_cols, std::vector<StoredBox>& out) {
  for (const auto& t : m.tensors) {
    std::string base;
    CkptBox b{0, 0, full_rows, full_cols};
    if (t.name != name && (!ckpt_parse_box_name(t.name, base, b) || base != name)) continue;
    if (!inside(b, full_rows, full_cols))
      return Status::error(fmt::format("{}: {} in {} lies outside the full tensor {} of shape [{}, {}]", dir, t.name,
                                       t.file, name, full_rows, full_cols));
    std::vector<int64_t> want = full_cols > 1 ? std::vector<int64_t>{b.rows, b.cols} : std::vector<int64_t>{b.rows};
    if (t.shape != want && !(full_cols == 1 && t.shape == std::vector<int64_t>{b.rows, 1}))
      return Status::error(fmt::format("{}: {} in {} has shape [{}]; as {} of the full [{}, {}] tensor {} it must be [{}]",
                                       dir, t.name, t.file, fmt::join(t.shape, ", "), span_text(b, full_cols),
                                       full_rows, full_cols, name, fmt::join(want, ", ")));
    out.push_back({&t, b});
  }
  return Status::ok();
}

// Reads stored box s (it intersects `want` in x) and copies the intersection into out.
Status copy_stored(const std::string& dir, const CkptManifest& m, const StoredBox& s, const CkptBox& want,
                   const CkptBox& x, float* out, std::vector<float>& scratch) {
  const CkptBox& b = s.box;
  int64_t count = b.rows * b.cols;
  if (b.c0 == want.c0 && b.cols == want.cols && b.rows == x.rows)  // whole rows of want: read in place
    return ckpt_load_tensor(dir, m, s.info->name, out + (b.r0 - want.r0) * want.cols, count);
  scratch.resize(static_cast<size_t>(count));
  if (Status st = ckpt_load_tensor(dir, m, s.info->name, scratch.data(), count); !st) return st;
  for (int64_t r = x.r0; r < end_row(x); ++r)
    std::memcpy(out + (r - want.r0) * want.cols + (x.c0 - want.c0), scratch.data() + (r - b.r0) * b.cols + (x.c0 - b.c0),
                static_cast<size_t>(x.cols) * sizeof(float));
  return Status::ok();
}

}  // namespace

std::string ckpt_box_name(const std::string& name, const CkptBox& box, int64_t full_rows, int64_t full_cols) {
  if (box.r0 == 0 && box.c0 == 0 && box.rows == full_rows && box.cols == full_cols) return name;
  if (full_cols > 1) return fmt::format("{}[{}:{},{}:{}]", name, box.r0, end_row(box), box.c0, end_col(box));
  return fmt::format("{}[{}:{}]", name, box.r0, end_row(box));
}

bool ckpt_parse_box_name(const std::string& stored, std::string& base, CkptBox& box) {
  if (stored.empty() || stored.back() != ']') return false;
  size_t open = stored.rfind('[');
  if (open == std::string::npos || open == 0) return false;
  size_t close = stored.size() - 1, comma = stored.find(',', open);
  CkptBox b;
  int64_t r1 = 0, c1 = 1;
  if (comma == std::string::npos) {
    if (!parse_range(stored, open + 1, close, b.r0, r1)) return false;
  } else if (!parse_range(stored, open + 1, comma, b.r0, r1) || !parse_range(stored, comma + 1, close, b.c0, c1)) {
    return false;
  }
  b.rows = r1 - b.r0;
  b.cols = c1 - b.c0;
  base = stored.substr(0, open);
  box = b;
  return true;
}

Status ckpt_read_box(const std::string& dir, const CkptManifest& m, const std::string& name, int64_t full_rows,
                     int64_t full_cols, const CkptBox& want, float* out) {
  if (full_rows < 0 || full_cols < 1 || !inside(want, full_rows, full_cols))
    return Status::error(fmt::format("{}: tensor {}: cannot read {} of a [{}, {}] tensor", dir, name,
                                     span_text(want, full_cols), full_rows, full_cols));
  std::vector<StoredBox> stored;
  if (Status s = stored_boxes(dir, m, name, full_rows, full_cols, stored); !s) return s;
  if (stored.empty())
    return Status::error(fmt::format("{}: no tensor {} in manifest.json, neither whole nor as boxes", dir, name));
  if (want.rows * want.cols == 0) return Status::ok();

  // Coverage on the grid cut by the edges of want and of every stored box meeting it: a stored
  // box is read only when it covers a cell no earlier box covered. Decided before any read, so a
  // checkpoint missing a slice fails without reading the rest.
  std::vector<size_t> hits;
  std::vector<CkptBox> cuts;  // [hit] its intersection with want
  std::vector<int64_t> re = {want.r0, end_row(want)}, ce = {want.c0, end_col(want)};
  for (size_t i = 0; i < stored.size(); ++i) {
    CkptBox x = intersect(stored[i].box, want);
    if (x.rows == 0 || x.cols == 0) continue;
    hits.push_back(i);
    cuts.push_back(x);
    re.insert(re.end(), {x.r0, end_row(x)});
    ce.insert(ce.end(), {x.c0, end_col(x)});
  }
  for (auto* e : {&re, &ce}) {
    std::sort(e->begin(), e->end());
    e->erase(std::unique(e->begin(), e->end()), e->end());
  }
  auto at = [](const std::vector<int64_t>& e, int64_t v) { return std::lower_bound(e.begin(), e.end(), v) - e.begin(); };
  const int64_t nr = static_cast<int64_t>(re.size()) - 1, nc = static_cast<int64_t>(ce.size()) - 1;
  std::vector<char> covered(static_cast<size_t>(nr * nc), 0);
  std::vector<size_t> reads;  // [hit] to read
  for (size_t h = 0; h < hits.size(); ++h) {
    const CkptBox& x = cuts[h];
    bool fresh = false;
    for (int64_t i = at(re, x.r0); i < at(re, end_row(x)); ++i)
      for (int64_t j = at(ce, x.c0); j < at(ce, end_col(x)); ++j) {
        fresh |= !covered[i * nc + j];
        covered[i * nc + j] = 1;
      }
    if (fresh) reads.push_back(h);
  }
  int64_t have = 0;
  CkptBox gap{full_rows, full_cols, 0, 0};  // bounding box of the uncovered cells
  int64_t gr1 = 0, gc1 = 0;
  for (int64_t i = 0; i < nr; ++i)
    for (int64_t j = 0; j < nc; ++j) {
      int64_t area = (re[i + 1] - re[i]) * (ce[j + 1] - ce[j]);
      if (covered[i * nc + j]) {
        have += area;
        continue;
      }
      gap.r0 = std::min(gap.r0, re[i]);
      gap.c0 = std::min(gap.c0, ce[j]);
      gr1 = std::max(gr1, re[i + 1]);
      gc1 = std::max(gc1, ce[j + 1]);
    }
  if (have < want.rows * want.cols) {
    gap.rows = gr1 - gap.r0;
    gap.cols = gc1 - gap.c0;
    std::vector<std::string> names;
    for (const auto& s : stored) names.push_back(s.info->name);
    return Status::error(fmt::format(
        "{}: tensor {} [{}, {}]: the stored boxes cover {} of the {} values of {}; nothing stores {} ({} values "
        "missing within it). Stored: {}. Was every rank's file saved?",
        dir, name, full_rows, full_cols, have, want.rows * want.cols, span_text(want, full_cols),
        span_text(gap, full_cols), want.rows * want.cols - have, fmt::join(names, ", ")));
  }
  std::vector<float> scratch;
  for (size_t h : reads)
    if (Status s = copy_stored(dir, m, stored[hits[h]], want, cuts[h], out, scratch); !s) return s;
  return Status::ok();
}

std::vector<CkptFlatBox> ckpt_flat_boxes(const CkptBox& local, int64_t a, int64_t b) {
  std::vector<CkptFlatBox> out;
  if (a >= b || local.cols <= 0) return out;
  const int64_t C = local.cols;
  int64_t ra = a / C, ca = a % C, rb = b / C, cb = b % C;
  if (ra == rb) {  // inside one row
    out.push_back({a, {local.r0 + ra, local.c0 + ca, 1, cb - ca}});
    return out;
  }
  if (ca > 0) {  // the partial first row
    out.push_back({a, {local.r0 + ra, local.c0 + ca, 1, C - ca}});
    ++ra;
  }
  if (rb > ra) out.push_back({ra * C, {local.r0 + ra, local.c0, rb - ra, C}});
  if (cb > 0) out.push_back({rb * C, {local.r0 + rb, local.c0, 1, cb}});  // the partial last row
  return out;
}

}  // namespace smelt
