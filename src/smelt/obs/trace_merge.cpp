// Reading trace files and merging the ranks' files (trace_tools.hpp). Clocks: every rank notes its
// steady clock right after one barrier at the start of the traced range (otherData.clock_sync_us);
// ranks left that barrier within a message latency of each other, so shifting each file to make
// those notes equal aligns clocks of different machines to about that latency.
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "smelt/common/files.hpp"
#include "smelt/obs/trace_tools.hpp"

namespace smelt {

using json = nlohmann::json;

Status trace_read(const std::string& path, json& out) {
  std::string text;
  if (Status s = files_read_small(path, text); !s) return s;
  out = json::parse(text, nullptr, false);
  if (out.is_discarded()) return Status::error(fmt::format("{}: not JSON", path));
  if (out.is_array()) out = json{{"traceEvents", std::move(out)}};  // the spec's array form
  if (!out.is_object() || !out.contains("traceEvents") || !out["traceEvents"].is_array())
    return Status::error(fmt::format("{}: not a trace (expected a JSON object with a \"traceEvents\" array)", path));
  return Status::ok();
}

namespace {

struct RankFile {
  std::string file;
  json trace;
  int rank = 0, world = 1;
  int64_t sync_us = 0;
};

Status read_rank_file(const std::string& path, RankFile& f) {
  f.file = path;
  if (Status s = trace_read(path, f.trace); !s) return s;
  const json& o = f.trace.value("otherData", json::object());
  if (!o.is_object() || o.value("producer", "") != "smelt")
    return Status::error(fmt::format("{}: not a Smelt trace (otherData.producer is not \"smelt\"); merge takes the "
                                     "rank files of `smelt train --trace-steps` (RUN/trace/rank*.json)", path));
  if (o.value("merged", false))
    return Status::error(fmt::format("{}: already a merged trace; merge the rank files it came from", path));
  if (!o.contains("rank") || !o["rank"].is_number_integer() || !o.contains("world_size") ||
      !o["world_size"].is_number_integer())
    return Status::error(fmt::format("{}: a Smelt trace without otherData.rank and world_size", path));
  if (!o.contains("clock_sync_us") || !o["clock_sync_us"].is_number())
    return Status::error(fmt::format("{}: rank {} has no clock sync point (otherData.clock_sync_us), so its clock "
                                     "cannot be aligned", path, o["rank"].get<int>()));
  f.rank = o["rank"].get<int>();
  f.world = o["world_size"].get<int>();
  f.sync_us = o["clock_sync_us"].get<int64_t>();
  return Status::ok();
}

}  // namespace

Status trace_merge(const std::vector<std::string>& files, const std::string& output, TraceMergeResult* result) {
  if (files.empty()) return Status::error("no trace files to merge");
  std::vector<RankFile> in(files.size());
  std::map<int, std::string> seen;  // rank -> file
  for (size_t i = 0; i < files.size(); i++) {
    if (Status s = read_rank_file(files[i], in[i]); !s) return s;
    if (auto it = seen.find(in[i].rank); it != seen.end())
      return Status::error(fmt::format("{}: rank {} again (already in {}); give each rank's file once", files[i],
                                       in[i].rank, it->second));
    if (in[i].world != in[0].world)
      return Status::error(fmt::format("{}: a run of {} ranks, but {} comes from a run of {}", files[i], in[i].world,
                                       files[0], in[0].world));
    seen[in[i].rank] = files[i];
  }
  std::sort(in.begin(), in.end(), [](const RankFile& a, const RankFile& b) { return a.rank < b.rank; });
  const int64_t ref = in[0].sync_us;
  TraceMergeResult r;
  r.clock_sync_us = ref;
  std::string out = "{\"traceEvents\":[\n";
  json inputs = json::array();
  for (RankFile& f : in) {
    const int64_t shift = ref - f.sync_us;
    int64_t n = 0;
    for (json& e : f.trace["traceEvents"]) {
      if (e.is_object() && e.value("ph", "") != "M" && e.contains("ts") && e["ts"].is_number()) {
        if (e["ts"].is_number_integer()) e["ts"] = e["ts"].get<int64_t>() + shift;
        else e["ts"] = e["ts"].get<double>() + (double)shift;
      }
      out += e.dump();
      out += ",\n";
      n++;
    }
    const json& o = f.trace["otherData"];
    inputs.push_back({{"file", f.file}, {"rank", f.rank}, {"shift_us", shift}, {"events", n},
                      {"host", o.value("host", json(nullptr))}, {"clock_sync_us", f.sync_us}});
    r.inputs.push_back({f.file, f.rank, shift, n});
    r.events += n;
  }
  if (r.events > 0) out.resize(out.size() - 2);
  json other = in[0].trace["otherData"];
  for (const char* k : {"rank", "pid", "events", "host"}) other.erase(k);
  other["merged"] = true;
  other["clock_sync_us"] = ref;
  other["events"] = r.events;
  other["inputs"] = inputs;
  out += "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":" + other.dump() + "}\n";
  if (Status s = files_write_atomic(output, out); !s) return s;
  if (result) *result = std::move(r);
  return Status::ok();
}

}  // namespace smelt
