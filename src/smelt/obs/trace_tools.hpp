// Reading traces back for `smelt trace` (docs/trace.md): the ranks' files merged into one timeline
// with their clocks aligned at the barrier every rank passed, and the per-span summary. Needs no
// MPI, BLAS or OpenMP (the light binary runs it). Not the recording (trace.hpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "smelt/common/status.hpp"

namespace smelt {

// Reads a trace in the JSON object form ({"traceEvents": [...], ...}); errors name the file.
Status trace_read(const std::string& path, nlohmann::json& out);

// Merges the rank files of one run (RUN/trace/rank*.json) into output: each file's events are
// shifted by (clock_sync_us of the lowest rank) - (its own), so the moments the ranks left the same
// barrier coincide, and keep their pid (one per rank). Refuses, naming the file, a file that is not
// a Smelt rank trace, has no sync point, repeats a rank or comes from another world size.
struct TraceMergeInput {
  std::string file;
  int rank = 0;
  int64_t shift_us = 0;
  int64_t events = 0;
};
struct TraceMergeResult {
  std::vector<TraceMergeInput> inputs;  // in rank order
  int64_t clock_sync_us = 0;            // the common sync point after the merge
  int64_t events = 0;
};
Status trace_merge(const std::vector<std::string>& files, const std::string& output, TraceMergeResult* result = nullptr);

// Per span name over every track of every process: complete events ("X") and matched begin/end
// pairs ("B"/"E"). Percentiles are nearest-rank (the smallest duration with at least p% of the
// spans at or below it); share = the name's total over the total of the spans named "step".
struct TraceSpanStats {
  std::string name;
  int64_t count = 0;
  double total_ms = 0, p50_ms = 0, p95_ms = 0, p99_ms = 0;
  double share_of_step = 0;  // 0 when the trace has no "step" span
};
struct TraceSummary {
  std::string file;
  int processes = 0;          // pids with events (one per rank)
  int64_t steps = 0;          // "step" spans
  double step_total_ms = 0;
  std::vector<TraceSpanStats> spans;  // by total time, largest first
  nlohmann::json to_json() const;
  std::string text() const;
};
Status trace_summarize(const nlohmann::json& trace, TraceSummary& out);

}  // namespace smelt
