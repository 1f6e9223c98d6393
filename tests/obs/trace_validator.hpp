// A checker of Chrome trace-event files written from the Trace Event Format document (the JSON
// object form, its phases and their required fields), independent of Smelt's writer: every event
// well formed, duration events balanced, spans nested on every (pid, tid) track, counters numeric,
// metadata named, and (Smelt's convention) one process per rank. Not product code.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace smelt::test {

struct TraceSpanSeen {  // a complete event, or a matched begin/end pair
  std::string name;
  double ts = 0, end = 0;
  int64_t pid = 0, tid = 0;
  nlohmann::json args;
};

struct TraceCheck {
  std::vector<std::string> errors;                 // empty: the file passed
  std::set<std::string> phases;                    // phases present
  std::map<int64_t, int> rank_of_pid;              // from process_name "rank N"
  std::map<std::pair<int64_t, int64_t>, std::string> thread_names;  // (pid, tid) -> thread_name
  std::vector<TraceSpanSeen> spans;
  std::vector<nlohmann::json> instants, counters;
  std::string first_errors() const {
    std::string s;
    for (size_t i = 0; i < errors.size() && i < 10; i++) s += errors[i] + "\n";
    return s;
  }
};

// The phases the document defines: duration B/E, complete X, instant i (I, deprecated), counter C,
// async b/n/e (S/T/p/F, deprecated), flow s/t/f, sample P, object N/O/D, metadata M, memory dump
// V/v, mark R, clock sync c, context ( ).
inline bool trace_phase_known(const std::string& ph) {
  static const std::set<std::string> k = {"B", "E", "X", "i", "I", "C", "b", "n", "e", "S", "T", "p", "F", "s",
                                          "t", "f", "P", "N", "O", "D", "M", "V", "v", "R", "c", "(", ")"};
  return k.count(ph) > 0;
}

inline TraceCheck trace_validate(const nlohmann::json& doc) {
  using json = nlohmann::json;
  TraceCheck r;
  auto fail = [&](size_t i, const std::string& what) { r.errors.push_back(fmt::format("event {}: {}", i, what)); };
  if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array()) {
    r.errors.push_back("not the JSON object form: no \"traceEvents\" array");
    return r;
  }
  if (doc.contains("displayTimeUnit") && doc["displayTimeUnit"] != "ms" && doc["displayTimeUnit"] != "ns")
    r.errors.push_back("displayTimeUnit must be \"ms\" or \"ns\"");
  if (doc.contains("otherData") && !doc["otherData"].is_object()) r.errors.push_back("otherData must be an object");
  using Track = std::pair<int64_t, int64_t>;
  std::map<Track, std::vector<std::pair<std::string, double>>> open;  // B events not yet ended
  std::map<Track, double> last_duration_ts;                           // B/E come in time order per thread
  std::map<Track, std::vector<TraceSpanSeen>> by_track;
  std::map<int64_t, int> process_names;  // pid -> how many process_name events
  std::set<int64_t> pids_used;
  const json& events = doc["traceEvents"];
  for (size_t i = 0; i < events.size(); i++) {
    const json& e = events[i];
    if (!e.is_object()) {
      fail(i, "not an object");
      continue;
    }
    if (!e.contains("ph") || !e["ph"].is_string() || e["ph"].get<std::string>().size() != 1) {
      fail(i, "ph must be a one-character string");
      continue;
    }
    const std::string ph = e["ph"];
    r.phases.insert(ph);
    if (!trace_phase_known(ph)) fail(i, "unknown phase " + ph);
    const bool has_name = e.contains("name") && e["name"].is_string();
    if (!has_name && ph != "E") fail(i, "name must be a string");
    if (e.contains("name") && !e["name"].is_string()) fail(i, "name must be a string");
    if (!e.contains("pid") || !e["pid"].is_number_integer()) fail(i, "pid must be an integer");
    if (!e.contains("tid") || !e["tid"].is_number_integer()) fail(i, "tid must be an integer");
    if (e.contains("cat") && !e["cat"].is_string()) fail(i, "cat must be a string");
    if (e.contains("args") && !e["args"].is_object()) fail(i, "args must be an object");
    const bool has_ts = e.contains("ts") && e["ts"].is_number() && std::isfinite(e["ts"].get<double>());
    if (ph != "M" && !has_ts) fail(i, "ts must be a number (microseconds)");
    if (e.contains("ts") && !e["ts"].is_number()) fail(i, "ts must be a number");
    const int64_t pid = e.contains("pid") && e["pid"].is_number_integer() ? e["pid"].get<int64_t>() : 0;
    const int64_t tid = e.contains("tid") && e["tid"].is_number_integer() ? e["tid"].get<int64_t>() : 0;
    const std::string name = has_name ? e["name"].get<std::string>() : "";
    const double ts = has_ts ? e["ts"].get<double>() : 0;
    const Track track{pid, tid};
    if (ph != "M") pids_used.insert(pid);
    if (ph == "X") {
      if (!e.contains("dur") || !e["dur"].is_number() || !(e["dur"].get<double>() >= 0)) {
        fail(i, "a complete event needs a non-negative number dur");
        continue;
      }
      by_track[track].push_back({name, ts, ts + e["dur"].get<double>(), pid, tid,
                                 e.contains("args") ? e["args"] : json::object()});
    } else if (ph == "B" || ph == "E") {
      if (e.contains("dur")) fail(i, "a duration event has no dur");
      auto it = last_duration_ts.find(track);
      if (it != last_duration_ts.end() && ts < it->second) fail(i, "duration events out of time order on their thread");
      last_duration_ts[track] = ts;
      auto& stack = open[track];
      if (ph == "B") {
        stack.push_back({name, ts});
      } else if (stack.empty()) {
        fail(i, "an end (E) without a begin on its thread");
      } else {
        if (has_name && name != stack.back().first)
          fail(i, fmt::format("E named {} ends B named {}", name, stack.back().first));
        by_track[track].push_back({stack.back().first, stack.back().second, ts, pid, tid, json::object()});
        stack.pop_back();
      }
    } else if (ph == "i" || ph == "I") {
      if (e.contains("s") && e["s"] != "g" && e["s"] != "p" && e["s"] != "t") fail(i, "instant scope s must be g, p or t");
      if (e.contains("dur")) fail(i, "an instant has no dur");
      r.instants.push_back(e);
    } else if (ph == "C") {
      if (!e.contains("args") || !e["args"].is_object() || e["args"].empty()) {
        fail(i, "a counter needs args with at least one series");
      } else {
        for (const auto& [k, v] : e["args"].items())
          if (!v.is_number()) fail(i, "counter series " + k + " is not a number");
      }
      r.counters.push_back(e);
    } else if (ph == "M") {
      const json args = e.contains("args") ? e["args"] : json();
      if (name == "process_name" || name == "thread_name") {
        if (!args.is_object() || !args.contains("name") || !args["name"].is_string()) {
          fail(i, name + " needs args.name, a string");
          continue;
        }
        const std::string label = args["name"];
        if (name == "thread_name") {
          r.thread_names[track] = label;
        } else {
          process_names[pid]++;
          int rank = -1;
          if (std::sscanf(label.c_str(), "rank %d", &rank) == 1 && label == fmt::format("rank {}", rank))
            r.rank_of_pid[pid] = rank;
        }
      } else if (name == "process_labels") {
        if (!args.is_object() || !args.contains("labels") || !args["labels"].is_string())
          fail(i, "process_labels needs args.labels, a string");
      } else if (name == "process_sort_index" || name == "thread_sort_index") {
        if (!args.is_object() || !args.contains("sort_index") || !args["sort_index"].is_number_integer())
          fail(i, name + " needs args.sort_index, an integer");
      } else {
        fail(i, "unknown metadata name " + name);
      }
    }
  }
  for (const auto& [track, stack] : open)
    if (!stack.empty())
      r.errors.push_back(fmt::format("pid {} tid {}: {} begin(s) never ended", track.first, track.second, stack.size()));
  // Nesting: on each track every two spans are disjoint or one holds the other (ends may touch).
  constexpr double kEps = 1e-6;
  for (auto& [track, spans] : by_track) {
    std::sort(spans.begin(), spans.end(), [](const TraceSpanSeen& a, const TraceSpanSeen& b) {
      return a.ts != b.ts ? a.ts < b.ts : a.end > b.end;
    });
    std::vector<const TraceSpanSeen*> stack;
    for (const TraceSpanSeen& s : spans) {
      while (!stack.empty() && stack.back()->end <= s.ts + kEps) stack.pop_back();
      if (!stack.empty() && s.end > stack.back()->end + kEps)
        r.errors.push_back(fmt::format("pid {} tid {}: {} [{}, {}] overlaps {} [{}, {}] without nesting", track.first,
                                       track.second, s.name, s.ts, s.end, stack.back()->name, stack.back()->ts,
                                       stack.back()->end));
      stack.push_back(&s);
      r.spans.push_back(s);
    }
  }
  // One process per rank: each pid named once "rank N", no rank twice.
  std::set<int> ranks;
  for (int64_t pid : pids_used) {
    if (process_names[pid] != 1)
      r.errors.push_back(fmt::format("pid {}: {} process_name events (one expected)", pid, process_names[pid]));
    auto it = r.rank_of_pid.find(pid);
    if (it == r.rank_of_pid.end()) r.errors.push_back(fmt::format("pid {}: not named \"rank N\"", pid));
    else if (!ranks.insert(it->second).second) r.errors.push_back(fmt::format("rank {} on two pids", it->second));
  }
  return r;
}

}  // namespace smelt::test
