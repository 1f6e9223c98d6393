// Global dedup's filter stage (each input task drops its documents on its drop list and writes one
// part per input file) and `run` (every stage in order here, units in parallel; under mpirun or
// srun each rank takes its share of every stage's units and waits for the others at the stage's
// end through the markers in the work folder).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <thread>

#include <fmt/format.h>

#include "smelt/common/log.hpp"
#include "smelt/refine/global_dedup.hpp"
#include "smelt/refine/global_dedup_files.hpp"
#include "smelt/refine/shard_writer.hpp"
#include "smelt/text/doc_reader.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace smelt {

namespace {

using gd::Plan;
using gd::Rec;

// The kept record as one JSON line: id, url, text, then the input's other fields in their order.
std::string doc_line(const RawDoc& d) {
  ojson o = ojson::object();
  o["id"] = d.id;
  if (!d.url.empty()) o["url"] = d.url;
  o["text"] = d.text;
  if (!d.meta_json.empty()) {
    ojson m = ojson::parse(d.meta_json, nullptr, false);
    if (m.is_object())
      for (auto it = m.begin(); it != m.end(); ++it) o[it.key()] = it.value();
  }
  return o.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

std::string part_path(const GlobalDedupConfig& c, uint64_t file) {
  return fmt::format("{}/part-{:05d}.jsonl.zst", c.output, file);
}

// One input file through the drop list (its entries in id order, from `at` on) into its part.
Status filter_file(const GlobalDedupConfig& c, const Plan& p, uint64_t f, const std::vector<Rec>& drops,
                   size_t& at, json& counts) {
  std::error_code ec;
  fs::remove(part_path(c, f), ec);  // a part of an earlier run of this file; none when all of it goes
  gd::sweep_tmp(part_path(c, f));
  ShardWriter out(c.output, "part-", UINT64_MAX, c.zstd_level, f);
  std::vector<std::string> files{p.files[f]};
  Status failed;
  gd::ReadDocs r;
  r.files = &files;
  r.text_field = c.text_field;
  r.counted_in = "the filter marker";
  r.doc = [&](uint32_t, uint64_t rec, RawDoc& d, std::vector<std::string>& issues) {
    counts["records_skipped"] = counts["records_skipped"].get<uint64_t>() + issues.size();
    counts["documents"] = counts["documents"].get<uint64_t>() + 1;
    const uint64_t id = gd_doc_id(f, rec);
    while (at < drops.size() && gd::low56(drops[at].a) < id) ++at;
    if (at < drops.size() && gd::low56(drops[at].a) == id) return true;
    counts["kept"] = counts["kept"].get<uint64_t>() + 1;
    failed = out.append(doc_line(d));
    return failed.is_ok();
  };
  r.file_end = [&](uint32_t, uint64_t, std::vector<std::string>& issues) {
    counts["records_skipped"] = counts["records_skipped"].get<uint64_t>() + issues.size();
    return true;
  };
  gd::read_docs(r);
  if (!failed) return failed;
  if (stage_stop_flag().load()) return Status::error(fmt::format("{}: stopped; rerun to redo its task", p.files[f]));
  ShardInfo info;
  if (Status st = out.close(&info); !st) return st;
  counts["bytes_written"] = counts["bytes_written"].get<uint64_t>() + info.compressed;
  return Status::ok();
}

Status filter_task(const GlobalDedupConfig& c, const Plan& p, int task, GlobalDedupSummary& s) {
  json marker;
  if (Status st = gd::read_marker(p.filter_done(task), p.fingerprint, marker); !st && !c.overwrite) return st;
  if (marker.is_null()) {
    json done;
    if (Status st = gd::read_marker(p.drops_done(), p.fingerprint, done); !st) return st;
    if (done.is_null())
      return Status::error(fmt::format("{}: missing: the cluster stage is not complete (run smelt dedup cluster "
                                       "--merge)",
                                       p.drops_done()));
    std::vector<Rec> drops;
    if (Status st = gd::read_all(p.drops_file(task), gd::FileType::kDrops, p.fingerprint, drops); !st) return st;
    std::error_code ec;
    fs::create_directories(c.output, ec);
    json counts = {{"documents", 0}, {"kept", 0}, {"records_skipped", 0}, {"bytes_written", 0}};
    uint64_t kinds[3] = {0, 0, 0}, cross = 0, earlier = 0;
    for (const Rec& d : drops) {
      ++kinds[std::min<uint8_t>(gd::top8(d.a), 2)];
      if (gd_doc_generation(d.b) != kGdThisRun) ++earlier;
      else cross += gd_doc_file(d.b) % static_cast<uint64_t>(p.tasks) != static_cast<uint64_t>(task);
    }
    size_t at = 0;
    for (uint64_t f = static_cast<uint64_t>(task); f < p.files.size(); f += static_cast<uint64_t>(p.tasks)) {
      if (Status st = filter_file(c, p, f, drops, at, counts); !st) return st;
      gd::inject_kill("filter");
    }
    counts.update(json{{"stage", "filter"}, {"task", task}, {"dropped", drops.size()}, {"dropped_exact", kinds[0]},
                       {"dropped_url", kinds[1]}, {"dropped_near", kinds[2]}, {"dropped_cross_task", cross},
                       {"dropped_earlier", earlier}});
    if (Status st = gd::write_marker(p.filter_done(task), p.fingerprint, counts); !st) return st;
    marker = counts;
    ++s.units_done;
  } else {
    ++s.units_skipped;
  }
  s.documents += marker.value("documents", 0ull);
  s.kept += marker.value("kept", 0ull);
  s.records_skipped += marker.value("records_skipped", 0ull);
  s.dropped += marker.value("dropped", 0ull);
  s.dropped_exact += marker.value("dropped_exact", 0ull);
  s.dropped_url += marker.value("dropped_url", 0ull);
  s.dropped_near += marker.value("dropped_near", 0ull);
  s.dropped_cross_task += marker.value("dropped_cross_task", 0ull);
  s.dropped_earlier += marker.value("dropped_earlier", 0ull);
  s.bytes_written += marker.value("bytes_written", 0ull);
  return Status::ok();
}

}  // namespace

Status gd_filter(const GlobalDedupConfig& c, int task, GlobalDedupSummary& s) {
  gd::Plan p;
  if (Status st = gd::make_plan(c, p); !st) return st;
  s.stage = "filter";
  if (c.output.empty()) return Status::error("no output folder given (-o)");
  if (task >= p.tasks)
    return Status::error(fmt::format("--task {} with --tasks {}: expected a task below the task count", task, p.tasks));
  for (int t = task < 0 ? 0 : task; t < (task < 0 ? p.tasks : task + 1); ++t)
    if (Status st = filter_task(c, p, t, s); !st) return st;
  return Status::ok();
}

Status gd_read_drops(const GlobalDedupConfig& c, std::vector<uint64_t>& dropped_ids) {
  gd::Plan p;
  if (Status st = gd::make_plan(c, p); !st) return st;
  dropped_ids.clear();
  std::vector<Rec> drops;
  for (int t = 0; t < p.tasks; ++t) {
    if (Status st = gd::read_all(p.drops_file(t), gd::FileType::kDrops, p.fingerprint, drops); !st) return st;
    for (const Rec& d : drops) dropped_ids.push_back(gd::low56(d.a));
  }
  std::sort(dropped_ids.begin(), dropped_ids.end());
  return Status::ok();
}

// ---------------------------------------------------------------- run

namespace {

// This rank's units of one stage (u % ranks == rank), on `threads` threads; the first failure (in
// unit order) is returned.
Status run_units(const GlobalDedupConfig& c, int units, int threads,
                 const std::function<Status(int, GlobalDedupSummary&)>& unit, GlobalDedupSummary& total) {
  std::vector<int> mine;
  for (int u = c.rank; u < units; u += c.ranks) mine.push_back(u);
  std::vector<GlobalDedupSummary> parts(mine.size());
  std::vector<Status> status(mine.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < mine.size(); i = next++) status[i] = unit(mine[i], parts[i]);
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::min<int>(threads, static_cast<int>(mine.size())); ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  for (size_t i = 0; i < mine.size(); ++i) {
    const GlobalDedupSummary& x = parts[i];
    if (!status[i]) return status[i];
    total.units_done += x.units_done;
    total.units_skipped += x.units_skipped;
    total.documents += x.documents;
    total.kept += x.kept;
    total.records_skipped += x.records_skipped;
    total.dropped += x.dropped;
    total.dropped_exact += x.dropped_exact;
    total.dropped_url += x.dropped_url;
    total.dropped_near += x.dropped_near;
    total.dropped_cross_task += x.dropped_cross_task;
    total.dropped_earlier += x.dropped_earlier;
    total.components += x.components;
    total.tuples += x.tuples;
    total.pairs += x.pairs;
    total.spilled_runs += x.spilled_runs;
    total.peak_memory_bytes = std::max(total.peak_memory_bytes, x.peak_memory_bytes);
    total.bytes_written += x.bytes_written;
  }
  return Status::ok();
}

// One rank's failure, for the others to stop on: WORK/failed-rank-RRRRR.txt. A rank removes its
// own at its start; a waiting rank ignores one older than its own start (an earlier attempt's).
std::string failed_path(const GlobalDedupConfig& c, int rank) {
  return fmt::format("{}/failed-rank-{:05d}.txt", c.work, rank);
}

Status note_failure(const GlobalDedupConfig& c, Status st) {
  if (!st && c.ranks > 1)
    (void)files_write_atomic(failed_path(c, c.rank), fmt::format("rank {}: {}\n", c.rank, st.message()));
  return st;
}

// With several ranks: waits until done(u) holds for every unit of the stage, or another rank failed.
Status wait_units(const GlobalDedupConfig& c, const char* stage, int units, const std::function<bool(int)>& done) {
  if (c.ranks <= 1) return Status::ok();
  static const auto started = fs::file_time_type::clock::now();
  for (int u = 0; u < units;) {
    if (done(u)) {
      ++u;
      continue;
    }
    for (int r = 0; r < c.ranks; ++r) {
      std::error_code ec;
      const std::string path = failed_path(c, r);
      std::string why;
      if (r != c.rank && fs::exists(path, ec) && fs::last_write_time(path, ec) >= started - std::chrono::seconds(1) &&
          files_read_small(path, why))
        return Status::error(fmt::format("{} stage: another rank failed ({}): {}", stage, path, why));
    }
    if (stage_stop_flag().load()) return Status::error(fmt::format("{} stage: stopped while waiting for unit {}", stage, u));
    std::this_thread::sleep_for(std::chrono::duration<double>(c.poll_s));
  }
  return Status::ok();
}

bool valid_file(const std::string& path, gd::FileType type, uint64_t fingerprint) {
  gd::Reader r;
  return fs::exists(path) && r.open(path, type, fingerprint).is_ok();
}

bool valid_marker(const std::string& path, uint64_t fingerprint) {
  json m;
  return gd::read_marker(path, fingerprint, m).is_ok() && !m.is_null();
}

struct StageTotals {
  GlobalDedupSummary sig, buck, clus, merge;
};

// Every stage but the filter, this rank's units of each; the others' awaited at each stage's end.
Status run_stages(const GlobalDedupConfig& c, const Plan& p, int threads, StageTotals& t) {
  GlobalDedupConfig one = c;
  one.threads = std::max(1, threads / std::max(1, p.tasks / c.ranks));  // signature threads per task
  auto& [sig, buck, clus, merge] = t;
  const uint64_t fp = p.fingerprint;
  if (Status st = run_units(c, p.tasks, threads, [&](int u, GlobalDedupSummary& x) { return gd_signatures(one, u, x); }, sig); !st)
    return st;
  if (Status st = wait_units(c, "signatures", p.tasks, [&](int u) { return valid_marker(p.sig_done(u), fp); }); !st) return st;
  spdlog::info("dedup: signatures of {} tasks done ({} tuples here)", p.tasks, sig.tuples);
  if (Status st = run_units(c, p.buckets, threads, [&](int u, GlobalDedupSummary& x) { return gd_buckets(c, u, x); }, buck); !st)
    return st;
  auto pairs_done = [&](int u) { return valid_file(p.pairs_file(u), gd::FileType::kPairs, fp); };
  if (Status st = wait_units(c, "buckets", p.buckets, pairs_done); !st) return st;
  spdlog::info("dedup: {} buckets done ({} pairs here, {} runs spilled)", p.buckets, buck.pairs, buck.spilled_runs);
  if (Status st = run_units(c, p.tasks, threads, [&](int u, GlobalDedupSummary& x) { return gd_cluster(c, u, x); }, clus); !st)
    return st;
  auto labels_done = [&](int u) { return valid_file(p.labels_file(u), gd::FileType::kLabels, fp); };
  if (Status st = wait_units(c, "cluster", p.tasks, labels_done); !st) return st;
  if (c.rank == 0)
    if (Status st = gd_cluster_merge(c, merge); !st) return st;
  if (Status st = wait_units(c, "cluster merge", 1, [&](int) { return valid_marker(p.drops_done(), fp); }); !st) return st;
  return Status::ok();
}

std::string summary_text(const GlobalDedupConfig& c, const GlobalDedupSummary& s) {
  auto pct = [&](uint64_t n) { return s.documents ? 100.0 * static_cast<double>(n) / static_cast<double>(s.documents) : 0.0; };
  return fmt::format(
      "dedup: {} documents in {} tasks, {} buckets: kept {} ({:.1f}%), dropped {} ({:.1f}%: {} exact, {} url, {} "
      "near; {} of them across tasks, {} against earlier runs), {} clusters\n"
      "  {} signature tuples, {} pairs, {} runs spilled; largest unit table {:.1f} MB; {:.1f} s; output {}\n",
      s.documents, c.tasks, c.buckets, s.kept, pct(s.kept), s.dropped, pct(s.dropped), s.dropped_exact, s.dropped_url,
      s.dropped_near, s.dropped_cross_task, s.dropped_earlier, s.components, s.tuples, s.pairs, s.spilled_runs,
      static_cast<double>(s.peak_memory_bytes) / 1e6, s.seconds, c.output);
}

}  // namespace

json gd_summary_json(const GlobalDedupSummary& s) {
  return {{"stage", s.stage},           {"units_done", s.units_done},
          {"units_skipped", s.units_skipped}, {"documents", s.documents},
          {"records_skipped", s.records_skipped}, {"tuples", s.tuples},
          {"pairs", s.pairs},           {"spilled_runs", s.spilled_runs},
          {"components", s.components}, {"kept", s.kept},
          {"dropped", s.dropped},       {"dropped_exact", s.dropped_exact},
          {"dropped_url", s.dropped_url}, {"dropped_near", s.dropped_near},
          {"dropped_cross_task", s.dropped_cross_task}, {"dropped_earlier", s.dropped_earlier},
          {"peak_memory_bytes", s.peak_memory_bytes},
          {"bytes_written", s.bytes_written}, {"seconds", s.seconds}};
}

Status gd_run(const GlobalDedupConfig& c, GlobalDedupSummary& s) {
  const auto t0 = std::chrono::steady_clock::now();
  if (c.output.empty()) return Status::error("no output folder given (-o)");
  if (c.ranks < 1 || c.rank < 0 || c.rank >= c.ranks)
    return Status::error(fmt::format("rank {} of {}: expected 0 <= rank < ranks", c.rank, c.ranks));
  gd::Plan p;
  if (Status st = gd::make_plan(c, p); !st) return st;
  if (c.ranks > 1) {
    std::error_code ec;
    fs::remove(failed_path(c, c.rank), ec);
  }
  const int threads = c.threads > 0 ? c.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  s.stage = "run";
  StageTotals stages;
  GlobalDedupSummary filt;
  if (Status st = note_failure(c, run_stages(c, p, threads, stages)); !st) return st;
  if (Status st = note_failure(c, run_units(c, p.tasks, threads, [&](int u, GlobalDedupSummary& x) {
        return gd_filter(c, u, x);
      }, filt)); !st)
    return st;
  auto filters_done = [&](int u) { return valid_marker(p.filter_done(u), p.fingerprint); };
  if (Status st = wait_units(c, "filter", p.tasks, filters_done); !st) return st;
  if (c.ranks > 1) {  // the totals of every rank's filters, from their markers
    filt = GlobalDedupSummary{};
    if (Status st = gd_filter(c, -1, filt); !st) return st;
  }
  const auto& [sig, buck, clus, merge] = stages;
  s.tuples = sig.tuples;
  s.pairs = buck.pairs;
  s.spilled_runs = buck.spilled_runs;
  s.units_done = sig.units_done + buck.units_done + clus.units_done + merge.units_done + filt.units_done;
  s.units_skipped = sig.units_skipped + buck.units_skipped + clus.units_skipped + merge.units_skipped + filt.units_skipped;
  s.peak_memory_bytes = std::max({buck.peak_memory_bytes, clus.peak_memory_bytes, merge.peak_memory_bytes});
  json done;
  if (Status st = gd::read_marker(p.drops_done(), p.fingerprint, done); !st) return st;
  s.components = done.value("components", 0ull);
  s.documents = filt.documents;
  s.kept = filt.kept;
  s.records_skipped = filt.records_skipped;
  s.dropped = filt.dropped;
  s.dropped_exact = filt.dropped_exact;
  s.dropped_url = filt.dropped_url;
  s.dropped_near = filt.dropped_near;
  s.dropped_cross_task = filt.dropped_cross_task;
  s.dropped_earlier = filt.dropped_earlier;
  s.bytes_written = filt.bytes_written;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s.text = summary_text(c, s);
  s.stats_path = c.ranks > 1 ? fmt::format("{}/stats-rank-{:05d}.json", c.work, c.rank) : c.work + "/stats.json";
  return files_write_atomic(s.stats_path, gd_summary_json(s).dump(2) + "\n");
}

}  // namespace smelt
