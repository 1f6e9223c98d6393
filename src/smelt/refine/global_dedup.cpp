// Global dedup: the run's plan and markers, the signatures stage and the buckets stage.
// cluster and merge: global_dedup_cluster.cpp; filter and run: global_dedup_run.cpp.
#include "smelt/refine/global_dedup.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <atomic>
#include <filesystem>
#include <functional>
#include <queue>
#include <thread>

#include <fmt/format.h>

#include "smelt/common/hash.hpp"
#include "smelt/common/log.hpp"
#include "smelt/common/page_key.hpp"
#include "smelt/common/cjk.hpp"
#include "smelt/common/utf8.hpp"
#include "smelt/refine/global_dedup_files.hpp"
#include "smelt/text/doc_reader.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace smelt {

const char* gd_kind_name(GdKind k) {
  switch (k) {
    case GdKind::kExact: return "exact";
    case GdKind::kUrl: return "url";
    case GdKind::kNear: return "near";
  }
  return "?";
}

namespace gd {

std::string Plan::sig_file(int task, int bucket) const {
  return fmt::format("{}/task-{:05d}/bucket-{:05d}.sig", sig_dir, task, bucket);
}
std::string Plan::sig_done(int task) const { return fmt::format("{}/task-{:05d}.json", sig_dir, task); }
std::string Plan::pairs_file(int bucket) const { return fmt::format("{}/bucket-{:05d}.pairs", pairs_dir, bucket); }
std::string Plan::labels_file(int partition) const {
  return fmt::format("{}/part-{:05d}.labels", cluster_dir, partition);
}
std::string Plan::drops_file(int task) const { return fmt::format("{}/task-{:05d}.drops", drops_dir, task); }
std::string Plan::drops_done() const { return drops_dir + "/done.json"; }
std::string Plan::filter_done(int task) const { return fmt::format("{}/task-{:05d}.json", filter_dir, task); }

namespace {

json run_description(const GlobalDedupConfig& c, const Plan& p) {
  const DedupConfig& d = c.dedup;
  json files = json::array();
  for (const std::string& f : p.files) {
    std::error_code ec;
    auto size = fs::file_size(f, ec);
    auto mtime = fs::last_write_time(f, ec).time_since_epoch().count();
    files.push_back({{"path", f}, {"size", ec ? 0 : size}, {"mtime", mtime}});
  }
  return {{"format", "smelt global dedup 1"},
          {"tasks", c.tasks},
          {"buckets", c.buckets},
          {"exact", d.exact},
          {"near", d.near},
          {"url", c.url},
          {"shingle", d.shingle},
          {"cjk_shingle", d.cjk_shingle},
          {"bands", d.bands},
          {"rows", d.rows},
          {"seed", d.seed},
          {"signature_hash", dedup_config_hash(d)},
          {"text_field", c.text_field},
          {"inputs", files}};
}

// The earlier runs of c.against: complete through the cluster stage, with the settings that shape
// the keys and their buckets equal to this run's.
Status read_earlier(const GlobalDedupConfig& c, const json& self, Plan& p) {
  if (c.against.size() > kGdMaxEarlierRuns)
    return Status::error(fmt::format("{} earlier runs: at most {} (--against)", c.against.size(), kGdMaxEarlierRuns));
  for (const std::string& work : c.against) {
    const std::string run_json = work + "/run.json";
    std::string text;
    if (Status s = files_read_small(run_json, text); !s)
      return Status::error(fmt::format("{}: not a dedup work folder ({})", work, s.message()));
    json o = json::parse(text, nullptr, false);
    if (o.is_discarded() || !o.contains("fingerprint"))
      return Status::error(fmt::format("{}: damaged: expected a dedup run's JSON", run_json));
    for (const char* key : {"buckets", "exact", "near", "url", "signature_hash"})
      if (o.value(key, json()) != self.value(key, json()))
        return Status::error(fmt::format("{}: {} = {}, this run {}: an earlier run must have the same dedup settings "
                                         "and bucket count",
                                         run_json, key, o.value(key, json()).dump(), self.value(key, json()).dump()));
    EarlierRun e;
    e.work = work;
    e.sig_dir = work + "/signatures";
    e.fingerprint = std::stoull(o["fingerprint"].get<std::string>(), nullptr, 16);
    e.tasks = o.value("tasks", 1);
    for (int t = 0; t < e.tasks; ++t) {
      const std::string marker = fmt::format("{}/task-{:05d}.json", e.sig_dir, t);
      json done;
      if (Status s = read_marker(marker, e.fingerprint, done); !s) return s;
      if (done.is_null())
        return Status::error(fmt::format("{}: missing: the earlier run's signatures are not complete", marker));
    }
    p.earlier.push_back(std::move(e));
  }
  return Status::ok();
}

}  // namespace

Status make_plan(const GlobalDedupConfig& c, Plan& p) {
  if (c.tasks < 1 || c.buckets < 1)
    return Status::error(fmt::format("tasks = {}, buckets = {}: expected at least 1 of each", c.tasks, c.buckets));
  if (c.work.empty()) return Status::error("no work folder given (--work)");
  if (std::vector<std::string> bad = dedup_config_validate(c.dedup); !bad.empty()) return Status::error(bad.front());
  if (Status s = files_expand_inputs(c.inputs, p.files); !s) return s;
  if (p.files.size() >= (1ull << kGdFileBits))
    return Status::error(fmt::format("{} input files: at most {} can be deduplicated in one run", p.files.size(),
                                     (1ull << kGdFileBits) - 1));
  p.tasks = c.tasks;
  p.buckets = c.buckets;
  p.sig_dir = c.work + "/signatures";
  p.pairs_dir = c.work + "/pairs";
  p.cluster_dir = c.work + "/cluster";
  p.drops_dir = c.work + "/drops";
  p.filter_dir = c.work + "/filter";
  p.run_json = c.work + "/run.json";
  json desc = run_description(c, p);
  if (Status s = read_earlier(c, desc, p); !s) return s;
  json against = json::array();
  for (const EarlierRun& e : p.earlier) against.push_back({{"work", e.work}, {"fingerprint", fmt::format("{:016x}", e.fingerprint)}});
  desc["against"] = against;
  const std::string text = desc.dump();
  p.fingerprint = hash64(text);
  desc["fingerprint"] = fmt::format("{:016x}", p.fingerprint);
  std::error_code ec;
  for (const std::string& d : {p.sig_dir, p.pairs_dir, p.cluster_dir, p.drops_dir, p.filter_dir}) {
    fs::create_directories(d, ec);
    if (ec) return Status::error(fmt::format("{}: cannot create the folder: {}", d, ec.message()));
  }
  std::string old;
  if (fs::exists(p.run_json) && files_read_small(p.run_json, old)) {
    json o = json::parse(old, nullptr, false);
    if (!o.is_discarded() && o.value("fingerprint", "") == desc["fingerprint"]) return Status::ok();
    if (!c.overwrite)
      return Status::error(fmt::format(
          "{}: the work folder holds a run of other inputs or settings; give --overwrite to start again there, or "
          "another --work",
          p.run_json));
  }
  return files_write_atomic(p.run_json, desc.dump(2) + "\n");
}

Status read_marker(const std::string& path, uint64_t fingerprint, json& out) {
  out = nullptr;
  std::string text;
  if (!fs::exists(path)) return Status::ok();
  if (Status s = files_read_small(path, text); !s) return s;
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return Status::error(fmt::format("{}: damaged: expected a JSON object", path));
  if (j.value("fingerprint", "") != fmt::format("{:016x}", fingerprint))
    return Status::error(fmt::format("{}: written by a run of other inputs or settings", path));
  out = std::move(j);
  return Status::ok();
}

Status write_marker(const std::string& path, uint64_t fingerprint, json body) {
  body["fingerprint"] = fmt::format("{:016x}", fingerprint);
  return files_write_atomic(path, body.dump(2) + "\n");
}

void sweep_tmp(const std::string& path, bool prefix_only) {
  fs::path p(path);
  std::error_code ec;
  const std::string prefix = p.filename().string() + (prefix_only ? "" : ".tmp-");
  for (const auto& e : fs::directory_iterator(p.parent_path(), ec))
    if (e.path().filename().string().rfind(prefix, 0) == 0) fs::remove(e.path(), ec);
}

void read_docs(const ReadDocs& rd) {
  std::vector<uint64_t> sizes;
  for (const std::string& f : *rd.files) {
    std::error_code ec;
    sizes.push_back(fs::file_size(f, ec));
  }
  std::atomic<uint64_t> bytes{0};
  std::atomic<size_t> logged{0};
  ReadFromPosition r;
  r.files = rd.files;
  r.sizes = &sizes;
  r.options.text_field = rd.text_field;
  r.bytes_progress = &bytes;
  r.logged = &logged;
  r.counted_in = rd.counted_in;
  r.stopped = [] { return stage_stop_flag().load(); };
  r.doc = rd.doc;
  r.file_end = rd.file_end;
  read_from_position(r);
}

Status output_done(const std::string& path, FileType type, uint64_t fingerprint, bool overwrite, bool& done) {
  done = false;
  if (!fs::exists(path)) return Status::ok();
  Reader check;
  Status st = check.open(path, type, fingerprint);
  done = st.is_ok();
  return st.is_ok() || overwrite || st.message().find("other inputs or settings") == std::string::npos ? Status::ok()
                                                                                                       : st;
}

void inject_kill(const char* point) {
  static const char* want = std::getenv("SMELT_DEDUP_INJECT_KILL");
  if (want && std::strcmp(want, point) == 0) std::raise(SIGKILL);
}

}  // namespace gd

// ---------------------------------------------------------------- signatures

namespace {

using gd::Plan;
using gd::Rec;

struct SigDoc {
  uint64_t id = 0;
  std::string text, url;
  bool cjk = false;
};

// The record's language says zh (prep's quality.lang, or a top-level lang), else Han is at least
// 30% of the text's non-space code points.
bool is_cjk(std::string_view t, std::string_view m) {
  for (size_t at = m.find("\"lang\""); at != std::string_view::npos; at = m.find("\"lang\"", at + 6)) {
    size_t i = at + 6;
    while (i < m.size() && (m[i] == ' ' || m[i] == ':')) ++i;
    if (m.substr(i, 4) == "\"zh\"") return true;
    if (m.substr(i, 1) == "\"") return false;
  }
  size_t han = 0, all = 0;
  for (size_t i = 0; i < t.size();) {
    char32_t cp = utf8_next(t, i);
    if (cp == U' ' || cp == U'\n' || cp == U'\t' || cp == U'\r') continue;
    ++all;
    han += is_han(cp) || is_kana(cp);
  }
  return all > 0 && han * 10 >= all * 3;
}

inline int bucket_of(uint64_t key, uint64_t kind, int buckets) {
  const uint64_t h = hash_mix(key ^ (kind * 0x9E3779B97F4A7C15ULL));
  return static_cast<int>((static_cast<unsigned __int128>(h) * static_cast<unsigned>(buckets)) >> 64);
}

// The tuples of a chunk of documents, computed on `threads` threads, appended in document order.
Status write_chunk(const GlobalDedupConfig& c, std::vector<SigDoc>& docs, int threads,
                   std::vector<gd::Writer>& out, uint64_t& tuples) {
  std::vector<std::vector<std::pair<int, Rec>>> recs(docs.size());
  auto work = [&](size_t from) {
    DedupSignature sig;
    for (size_t i = from; i < docs.size(); i += static_cast<size_t>(threads)) {
      const SigDoc& d = docs[i];
      auto add = [&](uint64_t key, uint64_t kind) {
        recs[i].push_back({bucket_of(key, kind, c.buckets), Rec{key, d.id | (kind << 56)}});
      };
      if (c.dedup.exact || c.dedup.near) {
        dedup_signature(d.text, d.cjk, c.dedup, sig);
        if (sig.exact != 0) {
          if (c.dedup.exact) add(sig.exact, 0);
          for (size_t j = 0; c.dedup.near && j < sig.bands.size(); ++j) add(sig.bands[j], 2 + j);
        }
      }
      if (c.url && !d.url.empty()) add(hash64(page_key(d.url, ""), c.dedup.seed), 1);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads && static_cast<size_t>(t) < docs.size(); ++t) pool.emplace_back(work, t);
  work(0);
  for (std::thread& t : pool) t.join();
  for (auto& per_doc : recs)
    for (auto& [b, r] : per_doc) {
      if (Status s = out[static_cast<size_t>(b)].add(r); !s) return s;
      ++tuples;
    }
  docs.clear();
  return Status::ok();
}

// A task writes every bucket's file at once: raises the soft open-file limit to `n` when the hard
// limit allows, else says what to change.
Status open_files_for(int n) {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur >= static_cast<rlim_t>(n)) return Status::ok();
  if (lim.rlim_max != RLIM_INFINITY && lim.rlim_max < static_cast<rlim_t>(n))
    return Status::error(fmt::format("--buckets {}: a signatures task keeps that many files open, and the open-file "
                                     "limit is {} (ulimit -Hn); use fewer buckets or raise the limit",
                                     n - 64, lim.rlim_max));
  lim.rlim_cur = static_cast<rlim_t>(n);
  return setrlimit(RLIMIT_NOFILE, &lim) == 0 ? Status::ok()
                                              : Status::error(fmt::format("cannot raise the open-file limit to {}", n));
}

Status signatures_task(const GlobalDedupConfig& c, const Plan& p, int task, int threads, GlobalDedupSummary& s) {
  json marker;
  if (Status st = gd::read_marker(p.sig_done(task), p.fingerprint, marker); !st && !c.overwrite) return st;
  if (!marker.is_null()) {
    ++s.units_skipped;
    return Status::ok();
  }
  std::error_code ec;
  fs::create_directories(fmt::format("{}/task-{:05d}", p.sig_dir, task), ec);
  if (Status st = open_files_for(p.buckets + 64); !st) return st;
  std::vector<gd::Writer> out(static_cast<size_t>(p.buckets));
  for (int b = 0; b < p.buckets; ++b) {
    gd::sweep_tmp(p.sig_file(task, b));
    if (Status st = out[static_cast<size_t>(b)].open(p.sig_file(task, b), gd::FileType::kSignatures, p.fingerprint,
                                                     static_cast<uint64_t>(task));
        !st)
      return st;
  }
  std::vector<std::string> files;
  std::vector<uint64_t> index;
  for (size_t f = static_cast<size_t>(task); f < p.files.size(); f += static_cast<size_t>(p.tasks)) {
    files.push_back(p.files[f]);
    index.push_back(f);
  }
  std::vector<SigDoc> chunk;
  size_t chunk_bytes = 0;
  uint64_t docs = 0, skipped = 0, tuples = 0;
  Status failed;
  gd::ReadDocs r;
  r.files = &files;
  r.text_field = c.text_field;
  r.counted_in = "the signatures marker";
  r.doc = [&](uint32_t f, uint64_t rec, RawDoc& d, std::vector<std::string>& issues) {
    skipped += issues.size();
    if (d.is_html) {
      failed = Status::error(fmt::format("{}: HTML or WARC input; global dedup reads JSONL or text (run smelt prep first)",
                                         files[f]));
      return false;
    }
    if (rec >= (1ull << kGdRecordBits)) {
      failed = Status::error(fmt::format("{}: more than {} records; split the file", files[f], 1ull << kGdRecordBits));
      return false;
    }
    const bool cjk = is_cjk(d.text, d.meta_json);
    chunk.push_back({gd_doc_id(index[f], rec), std::move(d.text), std::move(d.url), cjk});
    chunk_bytes += chunk.back().text.size();
    ++docs;
    if (chunk.size() >= 1024 || chunk_bytes >= (16u << 20)) {
      failed = write_chunk(c, chunk, threads, out, tuples);
      chunk_bytes = 0;
    }
    return failed.is_ok();
  };
  r.file_end = [&](uint32_t, uint64_t, std::vector<std::string>& issues) {
    skipped += issues.size();
    return true;
  };
  gd::read_docs(r);
  if (failed && !chunk.empty()) failed = write_chunk(c, chunk, threads, out, tuples);
  if (!failed) return failed;
  if (stage_stop_flag().load()) return Status::error(fmt::format("signatures of task {}: stopped; rerun to redo it", task));
  json counts = json::array();
  for (gd::Writer& w : out) {
    counts.push_back(w.count());
    if (Status st = w.finish(); !st) return st;
    s.bytes_written += w.bytes();
    if (counts.size() * 2 >= out.size()) gd::inject_kill("signatures");
  }
  s.documents += docs;
  s.records_skipped += skipped;
  s.tuples += tuples;
  ++s.units_done;
  return gd::write_marker(p.sig_done(task), p.fingerprint,
                          {{"stage", "signatures"}, {"task", task}, {"files", files.size()}, {"documents", docs},
                           {"records_skipped", skipped}, {"tuples", tuples}, {"bucket_tuples", counts}});
}

}  // namespace

Status gd_signatures(const GlobalDedupConfig& c, int task, GlobalDedupSummary& s) {
  gd::Plan p;
  if (Status st = gd::make_plan(c, p); !st) return st;
  s.stage = "signatures";
  if (task >= p.tasks) return Status::error(fmt::format("--task {} with --tasks {}: expected a task below the task count", task, p.tasks));
  const int threads = c.threads > 0 ? c.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int t = task < 0 ? 0 : task; t < (task < 0 ? p.tasks : task + 1); ++t)
    if (Status st = signatures_task(c, p, t, threads, s); !st) return st;
  return Status::ok();
}

// ---------------------------------------------------------------- buckets

namespace {

// Sort order of signature tuples: key, then kind, then document (b is kind << 56 | document), so
// the tuples of one (kind, key) are adjacent with their smallest document first.
struct TupleLess {
  bool operator()(const Rec& x, const Rec& y) const { return x.a != y.a ? x.a < y.a : x.b < y.b; }
};
inline bool tuple_less(const Rec& x, const Rec& y) { return TupleLess{}(x, y); }

inline GdKind kind_of_key(uint8_t key_kind) {
  return key_kind == 0 ? GdKind::kExact : key_kind == 1 ? GdKind::kUrl : GdKind::kNear;
}

// Emits, for each run of equal (kind, key), a pair of the run's first document with every other.
struct PairEmitter {
  gd::Writer* out;
  bool have = false;
  uint64_t kind = 0, key = 0, first = 0;
  Status add(const Rec& r) {
    const uint64_t k = gd::top8(r.b), doc = gd::low56(r.b);
    if (have && k == kind && r.a == key) {
      if (doc == first) return Status::ok();
      return out->add(Rec{first, doc | (static_cast<uint64_t>(kind_of_key(static_cast<uint8_t>(k))) << 56)});
    }
    have = true;
    kind = k;
    key = r.a;
    first = doc;
    return Status::ok();
  }
};

Status spill(const Plan& p, int bucket, std::vector<Rec>& mem, std::vector<std::string>& runs) {
  std::sort(mem.begin(), mem.end(), TupleLess{});
  const std::string path = fmt::format("{}.spill-{:05d}", p.pairs_file(bucket), runs.size());
  gd::Writer w;
  if (Status s = w.open(path, gd::FileType::kSpill, p.fingerprint, static_cast<uint64_t>(bucket)); !s) return s;
  for (const Rec& r : mem)
    if (Status s = w.add(r); !s) return s;
  mem.clear();
  runs.push_back(path);
  return w.finish();
}

// k-way merge of the sorted runs into the emitter; each run read in blocks of `block` records.
Status merge_runs(const Plan& p, const std::vector<std::string>& runs, size_t block, PairEmitter& emit) {
  std::vector<std::unique_ptr<gd::Reader>> in(runs.size());
  std::vector<std::vector<Rec>> buf(runs.size());
  std::vector<size_t> at(runs.size(), 0);
  auto greater = [](const std::pair<Rec, size_t>& x, const std::pair<Rec, size_t>& y) {
    return tuple_less(y.first, x.first);
  };
  std::priority_queue<std::pair<Rec, size_t>, std::vector<std::pair<Rec, size_t>>, decltype(greater)> heap(greater);
  for (size_t i = 0; i < runs.size(); ++i) {
    in[i] = std::make_unique<gd::Reader>();
    if (Status s = in[i]->open(runs[i], gd::FileType::kSpill, p.fingerprint); !s) return s;
    if (Status s = in[i]->read(buf[i], block); !s) return s;
    if (!buf[i].empty()) heap.push({buf[i][0], i});
  }
  while (!heap.empty()) {
    auto [r, i] = heap.top();
    heap.pop();
    if (Status s = emit.add(r); !s) return s;
    if (++at[i] == buf[i].size()) {
      if (Status s = in[i]->read(buf[i], block); !s) return s;
      at[i] = 0;
    }
    if (at[i] < buf[i].size()) heap.push({buf[i][at[i]], i});
  }
  return Status::ok();
}

// Every tuple of one signature file, in blocks, to add.
Status read_tuples(const std::string& path, uint64_t fingerprint, std::vector<Rec>& block, size_t cap,
                   const std::function<Status(const std::vector<Rec>&)>& add) {
  gd::Reader r;
  if (Status st = r.open(path, gd::FileType::kSignatures, fingerprint); !st) return st;
  for (;;) {
    if (Status st = r.read(block, std::min<size_t>(cap, 1 << 16)); !st) return st;
    if (block.empty()) return Status::ok();
    if (Status st = add(block); !st) return st;
  }
}

// The earlier runs' tuples of this bucket, renumbered to their generation (earlier run i:
// generation i, before this run's documents).
Status add_earlier_tuples(const Plan& p, int bucket, std::vector<Rec>& block, size_t cap,
                          const std::function<Status(const std::vector<Rec>&)>& add) {
  const uint64_t base_mask = (1ull << kGdGenerationShift) - 1;
  for (size_t g = 0; g < p.earlier.size(); ++g) {
    const gd::EarlierRun& e = p.earlier[g];
    std::vector<Rec> renumbered;
    auto renumber = [&](const std::vector<Rec>& in) {
      renumbered.clear();
      for (const Rec& x : in) {
        const uint64_t doc = gd::low56(x.b);
        if (gd_doc_generation(doc) != kGdThisRun) continue;  // that run's own earlier runs: not read
        renumbered.push_back(Rec{x.a, (static_cast<uint64_t>(gd::top8(x.b)) << 56) | (g << kGdGenerationShift) |
                                          (doc & base_mask)});
      }
      return add(renumbered);
    };
    for (int t = 0; t < e.tasks; ++t) {
      const std::string path = fmt::format("{}/task-{:05d}/bucket-{:05d}.sig", e.sig_dir, t, bucket);
      if (Status st = read_tuples(path, e.fingerprint, block, cap, renumber); !st) return st;
    }
  }
  return Status::ok();
}

Status buckets_unit(const GlobalDedupConfig& c, const Plan& p, int bucket, GlobalDedupSummary& s) {
  const std::string out_path = p.pairs_file(bucket);
  bool done = false;
  if (Status st = gd::output_done(out_path, gd::FileType::kPairs, p.fingerprint, c.overwrite, done); !st) return st;
  if (done) {
    ++s.units_skipped;
    return Status::ok();
  }
  for (int t = 0; t < p.tasks; ++t) {
    json m;
    if (Status st = gd::read_marker(p.sig_done(t), p.fingerprint, m); !st) return st;
    if (m.is_null())
      return Status::error(fmt::format("{}: missing: the signatures of task {} are not complete (run smelt dedup "
                                       "signatures --task {})",
                                       p.sig_done(t), t, t));
  }
  gd::sweep_tmp(out_path);
  gd::sweep_tmp(out_path + ".spill-", true);  // a killed attempt's runs
  const size_t cap = std::max<size_t>(256, c.memory_bytes / sizeof(Rec));
  std::vector<Rec> mem, block;
  std::vector<std::string> runs;
  uint64_t expected = 0;  // this task's files' tuples, from their sizes: one allocation up to the budget
  for (int t = 0; t < p.tasks; ++t) {
    std::error_code ec;
    expected += fs::file_size(p.sig_file(t, bucket), ec) / sizeof(Rec);
  }
  mem.reserve(static_cast<size_t>(std::min<uint64_t>(cap, expected + 1024)));
  auto add = [&](const std::vector<Rec>& in) {
    for (size_t at = 0; at < in.size();) {
      if (mem.size() >= cap)
        if (Status st = spill(p, bucket, mem, runs); !st) return st;
      const size_t n = std::min(in.size() - at, cap - mem.size());
      mem.insert(mem.end(), in.begin() + static_cast<std::ptrdiff_t>(at), in.begin() + static_cast<std::ptrdiff_t>(at + n));
      at += n;
    }
    s.tuples += in.size();
    return Status::ok();
  };
  for (int t = 0; t < p.tasks; ++t)
    if (Status st = read_tuples(p.sig_file(t, bucket), p.fingerprint, block, cap, add); !st) return st;
  if (Status st = add_earlier_tuples(p, bucket, block, cap, add); !st) return st;
  s.peak_memory_bytes = std::max<uint64_t>(s.peak_memory_bytes, mem.capacity() * sizeof(Rec));
  gd::Writer w;
  if (Status st = w.open(out_path, gd::FileType::kPairs, p.fingerprint, static_cast<uint64_t>(bucket)); !st) return st;
  PairEmitter emit{&w};
  if (runs.empty()) {
    std::sort(mem.begin(), mem.end(), TupleLess{});
    for (const Rec& x : mem)
      if (Status st = emit.add(x); !st) return st;
  } else {
    if (!mem.empty())
      if (Status st = spill(p, bucket, mem, runs); !st) return st;
    std::vector<Rec>().swap(mem);
    gd::inject_kill("buckets");
    if (Status st = merge_runs(p, runs, std::max<size_t>(64, cap / (runs.size() + 1)), emit); !st) return st;
  }
  s.pairs += w.count();
  s.spilled_runs += runs.size();
  if (Status st = w.finish(); !st) return st;
  s.bytes_written += w.bytes();
  std::error_code ec;
  for (const std::string& run : runs) fs::remove(run, ec);
  ++s.units_done;
  return Status::ok();
}

}  // namespace

Status gd_buckets(const GlobalDedupConfig& c, int bucket, GlobalDedupSummary& s) {
  gd::Plan p;
  if (Status st = gd::make_plan(c, p); !st) return st;
  s.stage = "buckets";
  if (bucket >= p.buckets)
    return Status::error(fmt::format("--task {} with --buckets {}: expected a bucket below the bucket count", bucket, p.buckets));
  for (int b = bucket < 0 ? 0 : bucket; b < (bucket < 0 ? p.buckets : bucket + 1); ++b)
    if (Status st = buckets_unit(c, p, b, s); !st) return st;
  return Status::ok();
}

}  // namespace smelt
