// Global dedup's cluster stage: connected components of the duplicate pairs, in two steps.
// 1. Partition p of P (P = the input task count) takes the pairs of buckets b with b % P == p and
//    labels each document it sees with the smallest document of its component among those pairs
//    (union-find over the sorted ids: the root of a component is always its smallest id).
// 2. The merge joins the partitions' labels (a document and its partition root are one edge), so a
//    component split across partitions becomes one; its smallest id survives, every other member is
//    written to the drop list of its input task with the strongest kind of link it has.
// Components are a property of the pairs, not of how they were split, so the drop lists are the
// same for any task, bucket or thread count. The merge reads at most P labels per duplicate
// document (never a non-duplicate): docs/dedup.md "Global dedup" gives its cost.
#include <algorithm>
#include <filesystem>
#include <numeric>

#include <fmt/format.h>

#include "smelt/refine/global_dedup.hpp"
#include "smelt/refine/global_dedup_files.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace smelt {

namespace {

using gd::Plan;
using gd::Rec;

// Union-find over the sorted distinct ids of a set of edges; index order is id order.
struct Components {
  std::vector<uint64_t> ids;
  std::vector<uint32_t> parent;
  std::vector<uint8_t> kind;  // strongest link kind seen per id (GdKind: smaller is stronger)

  size_t index(uint64_t id) const {
    return static_cast<size_t>(std::lower_bound(ids.begin(), ids.end(), id) - ids.begin());
  }
  uint32_t find(uint32_t x) {
    while (parent[x] != x) {
      parent[x] = parent[parent[x]];
      x = parent[x];
    }
    return x;
  }
  void unite(uint32_t x, uint32_t y) {
    x = find(x);
    y = find(y);
    if (x < y) parent[y] = x;
    else if (y < x) parent[x] = y;
  }
  // edges: a = id | kind << 56 of one end (the kind is that end's link kind), b = the other end's
  // id (its own kind not implied); both ends become members.
  Status build(const std::vector<Rec>& edges, const char* what) {
    ids.clear();
    ids.reserve(edges.size() * 2);
    for (const Rec& e : edges) {
      ids.push_back(gd::low56(e.a));
      ids.push_back(gd::low56(e.b));
    }
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    if (ids.size() >= UINT32_MAX)
      return Status::error(fmt::format("{}: {} documents in one partition; use more tasks", what, ids.size()));
    parent.resize(ids.size());
    std::iota(parent.begin(), parent.end(), 0u);
    kind.assign(ids.size(), 0xff);
    return Status::ok();
  }
  uint64_t memory_bytes() const { return ids.capacity() * 8 + parent.capacity() * 4 + kind.capacity(); }
};

Status cluster_partition(const GlobalDedupConfig& c, const Plan& p, int part, GlobalDedupSummary& s) {
  const std::string out_path = p.labels_file(part);
  bool done = false;
  if (Status st = gd::output_done(out_path, gd::FileType::kLabels, p.fingerprint, c.overwrite, done); !st) return st;
  if (done) {
    ++s.units_skipped;
    return Status::ok();
  }
  std::vector<Rec> edges, one;
  for (int b = part; b < p.buckets; b += p.tasks) {
    if (!fs::exists(p.pairs_file(b)))
      return Status::error(fmt::format("{}: missing: bucket {} is not complete (run smelt dedup buckets --task {})",
                                       p.pairs_file(b), b, b));
    if (Status st = gd::read_all(p.pairs_file(b), gd::FileType::kPairs, p.fingerprint, one); !st) return st;
    edges.insert(edges.end(), one.begin(), one.end());
  }
  Components g;
  if (Status st = g.build(edges, out_path.c_str()); !st) return st;
  for (const Rec& e : edges) {
    const uint32_t x = static_cast<uint32_t>(g.index(e.a)), y = static_cast<uint32_t>(g.index(gd::low56(e.b)));
    const uint8_t k = gd::top8(e.b);
    g.kind[x] = std::min(g.kind[x], k);  // the pair's kind is a link of both its documents
    g.kind[y] = std::min(g.kind[y], k);
    g.unite(x, y);
  }
  s.pairs += edges.size();
  s.peak_memory_bytes = std::max<uint64_t>(s.peak_memory_bytes, edges.capacity() * sizeof(Rec) + g.memory_bytes());
  std::vector<Rec>().swap(edges);
  gd::sweep_tmp(out_path);
  gd::Writer w;
  if (Status st = w.open(out_path, gd::FileType::kLabels, p.fingerprint, static_cast<uint64_t>(part)); !st) return st;
  for (uint32_t i = 0; i < g.ids.size(); ++i)
    if (Status st = w.add(Rec{g.ids[i] | (static_cast<uint64_t>(g.kind[i]) << 56), g.ids[g.find(i)]}); !st) return st;
  gd::inject_kill("cluster");
  if (Status st = w.finish(); !st) return st;
  s.bytes_written += w.bytes();
  ++s.units_done;
  return Status::ok();
}

}  // namespace

Status gd_cluster(const GlobalDedupConfig& c, int partition, GlobalDedupSummary& s) {
  gd::Plan p;
  if (Status st = gd::make_plan(c, p); !st) return st;
  s.stage = "cluster";
  if (partition >= p.tasks)
    return Status::error(
        fmt::format("--task {} with --tasks {}: expected a partition below the task count", partition, p.tasks));
  for (int q = partition < 0 ? 0 : partition; q < (partition < 0 ? p.tasks : partition + 1); ++q)
    if (Status st = cluster_partition(c, p, q, s); !st) return st;
  if (partition < 0) return gd_cluster_merge(c, s);
  return Status::ok();
}

namespace {

// The merged components' drop records, per input task, in id order.
Status write_drops(const Plan& p, Components& g, GlobalDedupSummary& s, json& totals) {
  std::vector<gd::Writer> out(static_cast<size_t>(p.tasks));
  for (int t = 0; t < p.tasks; ++t) {
    gd::sweep_tmp(p.drops_file(t));
    if (Status st = out[static_cast<size_t>(t)].open(p.drops_file(t), gd::FileType::kDrops, p.fingerprint,
                                                      static_cast<uint64_t>(t));
        !st)
      return st;
  }
  uint64_t kinds[3] = {0, 0, 0}, cross = 0, earlier = 0, components = 0;
  for (uint32_t i = 0; i < g.ids.size(); ++i) {
    const uint32_t r = g.find(i);
    if (r == i) {
      ++components;
      continue;
    }
    const uint64_t id = g.ids[i], survivor = g.ids[r];
    if (gd_doc_generation(id) != kGdThisRun) continue;  // an earlier run's document is never dropped here
    const size_t task = gd_doc_file(id) % static_cast<uint64_t>(p.tasks);
    if (Status st = out[task].add(Rec{id | (static_cast<uint64_t>(g.kind[i]) << 56), survivor}); !st) return st;
    ++kinds[std::min<uint8_t>(g.kind[i], 2)];
    if (gd_doc_generation(survivor) != kGdThisRun) ++earlier;
    else cross += gd_doc_file(survivor) % static_cast<uint64_t>(p.tasks) != task;
  }
  for (gd::Writer& w : out) {
    if (Status st = w.finish(); !st) return st;
    s.bytes_written += w.bytes();
    gd::inject_kill("merge");
  }
  s.components += components;
  s.dropped_exact += kinds[0];
  s.dropped_url += kinds[1];
  s.dropped_near += kinds[2];
  s.dropped += kinds[0] + kinds[1] + kinds[2];
  s.dropped_cross_task += cross;
  s.dropped_earlier += earlier;
  totals = {{"dropped_earlier", earlier},{"components", components},
            {"dropped", kinds[0] + kinds[1] + kinds[2]},
            {"dropped_exact", kinds[0]},
            {"dropped_url", kinds[1]},
            {"dropped_near", kinds[2]},
            {"dropped_cross_task", cross}};
  return Status::ok();
}

}  // namespace

Status gd_cluster_merge(const GlobalDedupConfig& c, GlobalDedupSummary& s) {
  gd::Plan p;
  if (Status st = gd::make_plan(c, p); !st) return st;
  s.stage = "cluster";
  json done;
  if (Status st = gd::read_marker(p.drops_done(), p.fingerprint, done); !st && !c.overwrite) return st;
  bool all_there = !done.is_null();
  for (int t = 0; all_there && t < p.tasks; ++t) {
    gd::Reader r;
    all_there = r.open(p.drops_file(t), gd::FileType::kDrops, p.fingerprint).is_ok();
  }
  if (all_there) {
    ++s.units_skipped;
    return Status::ok();
  }
  std::vector<Rec> labels, one;
  for (int q = 0; q < p.tasks; ++q) {
    if (!fs::exists(p.labels_file(q)))
      return Status::error(fmt::format("{}: missing: cluster partition {} is not complete (run smelt dedup cluster "
                                       "--task {})",
                                       p.labels_file(q), q, q));
    if (Status st = gd::read_all(p.labels_file(q), gd::FileType::kLabels, p.fingerprint, one); !st) return st;
    labels.insert(labels.end(), one.begin(), one.end());
  }
  Components g;
  if (Status st = g.build(labels, p.drops_done().c_str()); !st) return st;
  for (const Rec& l : labels) {
    const uint32_t x = static_cast<uint32_t>(g.index(gd::low56(l.a)));
    g.kind[x] = std::min(g.kind[x], gd::top8(l.a));
    g.unite(x, static_cast<uint32_t>(g.index(l.b)));
  }
  s.peak_memory_bytes = std::max<uint64_t>(s.peak_memory_bytes, labels.capacity() * sizeof(Rec) + g.memory_bytes());
  std::vector<Rec>().swap(labels);
  json totals;
  if (Status st = write_drops(p, g, s, totals); !st) return st;
  ++s.units_done;
  totals["stage"] = "cluster";
  totals["duplicate_documents"] = g.ids.size();
  return gd::write_marker(p.drops_done(), p.fingerprint, totals);
}

}  // namespace smelt
