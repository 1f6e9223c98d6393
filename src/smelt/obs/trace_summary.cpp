// `smelt trace summary` (trace_tools.hpp): every span's duration grouped by name, over all tracks.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "smelt/obs/trace_tools.hpp"

namespace smelt {

using json = nlohmann::json;

namespace {

// Nearest rank: the value at position ceil(p/100 n) (1-based) of the sorted durations.
double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t n = sorted.size();
  size_t k = (size_t)std::ceil(p / 100.0 * (double)n);
  k = std::clamp<size_t>(k, 1, n);
  return sorted[k - 1];
}

double number(const json& e, const char* key) {
  return e.contains(key) && e[key].is_number() ? e[key].get<double>() : NAN;
}

}  // namespace

Status trace_summarize(const json& trace, TraceSummary& out) {
  out = TraceSummary{};
  if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array())
    return Status::error("not a trace (expected a JSON object with a \"traceEvents\" array)");
  std::map<std::string, std::vector<double>> by_name;  // durations, microseconds
  std::map<std::pair<int64_t, int64_t>, std::vector<std::pair<std::string, double>>> open;  // B events per track
  std::set<int64_t> pids;
  int64_t index = 0;
  for (const json& e : trace["traceEvents"]) {
    index++;
    if (!e.is_object() || !e.contains("ph") || !e["ph"].is_string()) continue;
    const std::string ph = e["ph"].get<std::string>();
    if (ph == "M") continue;
    const int64_t pid = e.contains("pid") && e["pid"].is_number() ? e["pid"].get<int64_t>() : 0;
    const int64_t tid = e.contains("tid") && e["tid"].is_number() ? e["tid"].get<int64_t>() : 0;
    pids.insert(pid);
    const std::string name = e.contains("name") && e["name"].is_string() ? e["name"].get<std::string>() : "";
    const double ts = number(e, "ts");
    if (ph == "X") {
      const double dur = number(e, "dur");
      if (std::isfinite(dur) && dur >= 0) by_name[name].push_back(dur);
    } else if (ph == "B") {
      open[{pid, tid}].push_back({name, ts});
    } else if (ph == "E") {
      auto& stack = open[{pid, tid}];
      if (stack.empty() || !std::isfinite(ts) || !std::isfinite(stack.back().second))
        return Status::error(fmt::format("event {}: an end (\"E\") without its begin on pid {} tid {}", index, pid, tid));
      by_name[stack.back().first].push_back(ts - stack.back().second);
      stack.pop_back();
    }
  }
  out.processes = (int)pids.size();
  if (auto it = by_name.find("step"); it != by_name.end()) {
    out.steps = (int64_t)it->second.size();
    for (double d : it->second) out.step_total_ms += d / 1e3;
  }
  for (auto& [name, d] : by_name) {
    std::sort(d.begin(), d.end());
    TraceSpanStats s;
    s.name = name;
    s.count = (int64_t)d.size();
    for (double x : d) s.total_ms += x / 1e3;
    s.p50_ms = percentile(d, 50) / 1e3;
    s.p95_ms = percentile(d, 95) / 1e3;
    s.p99_ms = percentile(d, 99) / 1e3;
    s.share_of_step = out.step_total_ms > 0 ? s.total_ms / out.step_total_ms : 0;
    out.spans.push_back(s);
  }
  std::stable_sort(out.spans.begin(), out.spans.end(),
                   [](const TraceSpanStats& a, const TraceSpanStats& b) { return a.total_ms > b.total_ms; });
  return Status::ok();
}

json TraceSummary::to_json() const {
  json spans_j = json::array();
  for (const auto& s : spans)
    spans_j.push_back({{"name", s.name}, {"count", s.count}, {"total_ms", s.total_ms}, {"p50_ms", s.p50_ms},
                       {"p95_ms", s.p95_ms}, {"p99_ms", s.p99_ms}, {"share_of_step", s.share_of_step}});
  return {{"file", file}, {"processes", processes}, {"steps", steps}, {"step_total_ms", step_total_ms},
          {"spans", spans_j}};
}

std::string TraceSummary::text() const {
  std::string t = fmt::format("{}: {} process(es), {} step span(s), {:.3f} ms in steps\n", file, processes, steps,
                              step_total_ms);
  size_t w = 4;
  for (const auto& s : spans) w = std::max(w, s.name.size());
  t += fmt::format("{:<{}}  {:>7}  {:>11}  {:>9}  {:>9}  {:>9}  {:>8}\n", "span", w, "count", "total ms", "p50 ms",
                   "p95 ms", "p99 ms", "of step");
  for (const auto& s : spans)
    t += fmt::format("{:<{}}  {:>7}  {:>11.3f}  {:>9.3f}  {:>9.3f}  {:>9.3f}  {:>8}\n", s.name, w, s.count, s.total_ms,
                     s.p50_ms, s.p95_ms, s.p99_ms,
                     steps > 0 ? fmt::format("{:.1f}%", 100 * s.share_of_step) : std::string("-"));
  if (steps > 0)
    t += "(of step: the name's total over the step spans' total; spans on other threads or outside the steps, such "
         "as the checkpoint write or eval, are not part of it)\n";
  return t;
}

}  // namespace smelt
