// The data side of the training dashboard (docs/dashboard.md): run folders named on the command
// line, their metrics.jsonl read incrementally by byte offset (what the page polls), the latest
// values as Prometheus text, and the page itself, served with its assets or inlined with the data
// into one self-contained report file. Not the HTTP routes (dashboard_server.hpp), not the page's
// drawing (web/dashboard.js), not the verdicts on the numbers (vitals.hpp, which it calls).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "smelt/common/status.hpp"

namespace smelt {

// A run as the dashboard shows it.
struct DashboardRun {
  std::string name;  // unique among the runs shown: the folder's name, with its parents' where two agree
  std::string dir;   // the folder as given
  std::string metrics_path() const { return dir + "/metrics.jsonl"; }
};

// Checks that every folder holds metrics.jsonl (the error names the first that does not) and
// names the runs.
Status dashboard_runs(const std::vector<std::string>& dirs, std::vector<DashboardRun>& out);

// What one read of metrics.jsonl from a byte offset gives: the complete lines after it.
struct MetricsChunk {
  int64_t from = 0;     // where the lines start (0 after a reset)
  int64_t next = 0;     // just after the last complete line: the next read's offset
  int64_t size = 0;     // the file's size at the read
  bool reset = false;   // the file is not the one the offset was taken in: read from 0
  std::string file_id;  // "DEVICE:INODE": a resume replaces the file (atomic rename), a new id
  int64_t bad_lines = 0;              // complete lines in [from, next) that were skipped
  std::vector<nlohmann::json> lines;  // the others, in file order
  bool more() const { return next < size; }  // a torn last line, or the byte limit came first
  // {"from", "next", "size", "reset", "file", "bad_lines", "more", "lines"}
  nlohmann::json to_json() const;
};

// Reads the complete lines of `path` from byte offset `from`, at most about max_bytes of them
// (always at least one line). A line is kept when it is a JSON object with an integer "step"
// (a step line, or an event line with "event"); others are skipped and counted. The read starts
// over from 0 (reset) when the file is shorter than `from`, is another file than `file_id` ("" :
// any), or `from` does not follow a newline: the trainer rewrote it on a resume.
Status dashboard_read_metrics(const std::string& path, int64_t from, const std::string& file_id,
                              size_t max_bytes, MetricsChunk& out);

// The marks the lines of a run carry, read in file order: an event line's event ("rollback",
// "lr_restart", "checkpoint_failed", ...); on a step line "skipped" (a non-finite step),
// "loss_spike", and "checkpoint" (a save at that step: ckpt_write_mb_s, or ckpt_stall_ms when the
// step before had none; the step after a save carries ckpt_stall_ms alone when it waited for the
// save's staging copy). web/dashboard.js reads lines by the same rules.
class DashboardMarks {
 public:
  std::vector<std::string> next(const nlohmann::json& line);
  void reset() { prev_stall_ = false; }

 private:
  bool prev_stall_ = false;  // the last step line had ckpt_stall_ms
};

// The latest values of one run, kept up to date by reading only what was appended since.
struct DashboardLatest {
  int64_t offset = 0;
  std::string file_id;
  int64_t lines = 0, bad_lines = 0;
  int64_t step = -1;                             // of the last step line
  double mtime = 0;                              // metrics.jsonl's, seconds since the epoch
  std::map<std::string, double> values;          // key -> its value in the last step line holding it
                                                 // ("fetch_ms.p95", "loss_by_source.NAME",
                                                 // "tasks.NAME.value", "tasks.NAME.stderr"; NaN: null)
  std::map<std::string, std::string> task_metrics;  // downstream task -> its headline metric
  std::map<std::string, int64_t> events;         // marks by kind (DashboardMarks), and "restart":
                                                 // a step line whose step is not above the last
  DashboardMarks marks;
  // Reads what was appended since the last call (all of it again after a reset).
  Status update(const std::string& metrics_path);
};

// Prometheus text format 0.0.4 over the runs' latest values (every sample labelled run="NAME");
// vitals[i]: run i's VitalsReport::to_json(), or null where there is none.
std::string dashboard_prometheus(const std::vector<DashboardRun>& runs, const std::vector<DashboardLatest>& latest,
                                 const std::vector<nlohmann::json>& vitals);

// The page. data == nullptr: as served, its assets under assets/. Otherwise the report: the
// assets' text inlined and `data` ({"title", "generated", "runs": [{"name", "dir", "lines",
// "bad_lines", "vitals"}]}) in a <script type="application/json" id="smelt-data">, so the file
// opens with no server and no network.
Status dashboard_page(const nlohmann::json* data, std::string& html);

// The report's data for these runs: every line of each metrics.jsonl, vitals[i] (null: none).
Status dashboard_report_data(const std::vector<DashboardRun>& runs, const std::vector<nlohmann::json>& vitals,
                             const std::string& title, nlohmann::json& out);

// A run's vital signs: vitals_check_run's verdict (obs/vitals.hpp) as VitalsReport::to_json().
Status dashboard_vitals(const DashboardRun& run, nlohmann::json& out);

// A title for these runs: "Smelt: NAME, NAME".
std::string dashboard_title(const std::vector<DashboardRun>& runs);

}  // namespace smelt
