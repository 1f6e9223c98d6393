// The dashboard's data side (dashboard.hpp): metrics.jsonl read by byte offset, a run's latest
// values, Prometheus text, and the page with its assets inlined for a report. A trainer appends
// whole lines and fsyncs nothing in between, so a read can end inside a line: only lines ending in
// a newline are taken, and the offset returned points at the first byte not taken.
#include "smelt/obs/dashboard.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>

#include "smelt/obs/dashboard_assets.hpp"
#include "smelt/obs/vitals.hpp"

namespace fs = std::filesystem;

namespace smelt {

using json = nlohmann::json;

namespace {

// A line longer than this is skipped (and counted) without being held in memory.
constexpr size_t kMaxLineBytes = 16u << 20;

std::vector<std::string> path_parts(const std::string& dir) {
  fs::path p = fs::absolute(dir).lexically_normal();
  std::vector<std::string> parts;
  for (const auto& c : p)
    if (!c.empty() && c != "/") parts.push_back(c.string());
  return parts;
}

// The last k parts joined by '/'.
std::string tail_name(const std::vector<std::string>& parts, size_t k) {
  std::string s;
  for (size_t i = parts.size() - std::min(k, parts.size()); i < parts.size(); i++) s += (s.empty() ? "" : "/") + parts[i];
  return s.empty() ? "/" : s;
}

// Keeps a parsed line when it is a metrics line: an object with an integer step.
bool metrics_line(std::string_view text, json& j) {
  j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return false;
  auto it = j.find("step");
  return it != j.end() && it->is_number_integer();
}

bool blank(std::string_view s) { return s.find_first_not_of(" \t\r") == std::string_view::npos; }

}  // namespace

Status dashboard_runs(const std::vector<std::string>& dirs, std::vector<DashboardRun>& out) {
  out.clear();
  if (dirs.empty()) return Status::error("no run folder given (RUN...: folders that hold metrics.jsonl)");
  std::vector<std::vector<std::string>> parts;
  for (const auto& d : dirs) {
    std::error_code ec;
    const fs::path m = fs::path(d) / "metrics.jsonl";
    if (!fs::is_directory(d, ec))
      return Status::error(fmt::format("{}: not a folder (want a run folder, the --run-dir of smelt train)", d));
    if (!fs::is_regular_file(m, ec))
      return Status::error(fmt::format("{}: no metrics.jsonl in it (is it a run folder? smelt train --run-dir writes one)", d));
    out.push_back({"", d});
    parts.push_back(path_parts(d));
  }
  // The shortest tails that tell the runs apart; a run named twice keeps its index.
  for (size_t i = 0; i < out.size(); i++) {
    for (size_t k = 1;; k++) {
      const std::string name = tail_name(parts[i], k);
      bool clash = false;
      for (size_t j = 0; j < out.size(); j++)
        if (j != i && tail_name(parts[j], k) == name) clash = true;
      if (!clash || k >= parts[i].size()) {
        out[i].name = clash ? fmt::format("{} ({})", name, i + 1) : name;
        break;
      }
    }
  }
  return Status::ok();
}

json MetricsChunk::to_json() const {
  return {{"from", from}, {"next", next}, {"size", size}, {"reset", reset}, {"file", file_id},
          {"bad_lines", bad_lines}, {"more", more()}, {"lines", lines}};
}

Status dashboard_read_metrics(const std::string& path, int64_t from, const std::string& file_id, size_t max_bytes,
                              MetricsChunk& out) {
  out = MetricsChunk{};
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Status::error(fmt::format("{}: cannot read it ({})", path, std::strerror(errno)));
  out.file_id = fmt::format("{}:{}", (unsigned long long)st.st_dev, (unsigned long long)st.st_ino);
  out.size = (int64_t)st.st_size;
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::error(fmt::format("{}: cannot open it ({})", path, std::strerror(errno)));
  bool reset = from < 0 || from > out.size || (!file_id.empty() && file_id != out.file_id);
  if (!reset && from > 0) {
    char c = 0;
    f.seekg(from - 1);
    reset = !f.get(c) || c != '\n';
  }
  out.reset = reset;
  out.from = reset ? 0 : from;
  f.clear();
  f.seekg(out.from);
  // Blocks of max_bytes until at least one whole line is in (or the file ends).
  const size_t block = std::max<size_t>(max_bytes, 4096);
  std::string buf;
  int64_t pos = out.from;   // file offset of buf[0]
  int64_t taken = out.from;  // offset after the last complete line handled
  bool skipping = false;     // inside a line longer than kMaxLineBytes
  while (true) {
    const size_t old = buf.size();
    buf.resize(old + block);
    f.read(buf.data() + old, (std::streamsize)block);
    buf.resize(old + (size_t)f.gcount());
    if (buf.size() == old) break;  // end of the file
    size_t start = 0;
    for (size_t nl; (nl = buf.find('\n', start)) != std::string::npos; start = nl + 1) {
      std::string_view text(buf.data() + start, nl - start);
      if (skipping || text.size() > kMaxLineBytes) {
        skipping = false;
        out.bad_lines++;
      } else if (!blank(text)) {
        json j;
        if (metrics_line(text, j)) out.lines.push_back(std::move(j));
        else out.bad_lines++;
      }
      taken = pos + (int64_t)nl + 1;
      if ((size_t)(taken - out.from) >= max_bytes) break;
    }
    if ((size_t)(taken - out.from) >= max_bytes) break;
    buf.erase(0, start);
    pos += (int64_t)start;
    if (buf.size() > kMaxLineBytes) {  // drop the long line's bytes; it is counted at its newline
      pos += (int64_t)buf.size();
      buf.clear();
      skipping = true;
    }
  }
  out.next = taken;
  out.size = std::max(out.size, pos + (int64_t)buf.size());
  return Status::ok();
}

std::vector<std::string> DashboardMarks::next(const json& line) {
  std::vector<std::string> marks;
  if (auto e = line.find("event"); e != line.end()) {
    marks.push_back(e->is_string() ? e->get<std::string>() : "event");
    return marks;
  }
  const bool stall = line.contains("ckpt_stall_ms");
  if (line.contains("ckpt_write_mb_s") || (stall && !prev_stall_)) marks.push_back("checkpoint");
  if (line.contains("skipped")) marks.push_back("skipped");
  if (line.contains("loss_spike")) marks.push_back("loss_spike");
  prev_stall_ = stall;
  return marks;
}

namespace {

// An evaluation line's "tasks" (docs/eval.md): each task's value and stderr as
// "tasks.NAME.value" and "tasks.NAME.stderr" (NaN: null), and its metric.
void latest_tasks(const json& tasks, std::map<std::string, double>& values, std::map<std::string, std::string>& metrics) {
  for (const auto& [name, t] : tasks.items()) {
    if (!t.is_object()) continue;
    for (const char* field : {"value", "stderr"})
      if (auto it = t.find(field); it != t.end() && (it->is_number() || it->is_null()))
        values[fmt::format("tasks.{}.{}", name, field)] = it->is_number() ? it->get<double>() : NAN;
    if (auto m = t.find("metric"); m != t.end() && m->is_string()) metrics[name] = m->get<std::string>();
  }
}

}  // namespace

Status DashboardLatest::update(const std::string& metrics_path) {
  constexpr size_t kBlock = 8u << 20;
  MetricsChunk c;
  do {
    if (Status s = dashboard_read_metrics(metrics_path, offset, file_id, kBlock, c); !s) return s;
    if (c.reset) {
      lines = bad_lines = 0;
      step = -1;
      values.clear();
      task_metrics.clear();
      events.clear();
      marks.reset();
    }
    file_id = c.file_id;
    offset = c.next;
    lines += (int64_t)c.lines.size() + c.bad_lines;
    bad_lines += c.bad_lines;
    for (const auto& j : c.lines) {
      for (const auto& m : marks.next(j)) events[m]++;
      if (j.contains("event")) continue;
      const int64_t s = j["step"].get<int64_t>();
      if (step >= 0 && s <= step) events["restart"]++;
      step = s;
      for (const auto& [k, v] : j.items()) {
        if (k == "tasks" && v.is_object()) latest_tasks(v, values, task_metrics);
        else if (v.is_number()) values[k] = v.get<double>();
        else if (v.is_null()) values[k] = NAN;
        else if (v.is_object())
          for (const auto& [k2, v2] : v.items())
            if (v2.is_number()) values[k + "." + k2] = v2.get<double>();
      }
    }
  } while (c.more() && c.next > c.from);  // (a torn last line: no progress, wait for its end)
  struct stat st {};
  if (::stat(metrics_path.c_str(), &st) == 0) mtime = (double)st.st_mtim.tv_sec + st.st_mtim.tv_nsec * 1e-9;
  return Status::ok();
}

// ---- Prometheus text format 0.0.4 -------------------------------------------------------------

namespace {

// A sample value as the format spells it: NaN, +Inf, -Inf, or the shortest text of the double.
std::string prom_num(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

// A label value: backslash, double quote and newline escaped.
std::string prom_label(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '\\') o += "\\\\";
    else if (c == '"') o += "\\\"";
    else if (c == '\n') o += "\\n";
    else o += c;
  }
  return o;
}

void prom_family(std::string& o, const char* name, const char* type, const char* help) {
  o += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

// A gauge read from one metrics key, scaled into the unit its name says.
struct PromGauge {
  const char* name;
  const char* key;
  double scale;
  const char* help;
};
constexpr PromGauge kGauges[] = {
    {"smelt_train_loss", "loss", 1, "Training loss of the last step (nats per token)."},
    {"smelt_train_eval_loss", "eval_loss", 1, "Validation loss of the last evaluation (nats per token)."},
    {"smelt_train_eval_bits_per_byte", "eval_bpb", 1, "Validation bits per byte of the last evaluation."},
    {"smelt_train_learning_rate", "lr", 1, "Learning rate of the last step."},
    {"smelt_train_grad_norm", "grad_norm", 1, "Gradient norm of the last step (before clipping)."},
    {"smelt_train_grad_norm_ratio", "grad_norm_ratio", 1, "The last step's gradient norm over the step before's."},
    {"smelt_train_tokens_per_second", "tokens_per_s", 1, "Training tokens per second of the last step."},
    {"smelt_train_mfu_ratio", "mfu", 1, "Model FLOPs utilisation of the last step against the model's measured GEMM rate (0-1)."},
    {"smelt_train_mfu_peak_ratio", "mfu_peak", 1, "Model FLOPs utilisation of the last step against the CPU's peak (0-1)."},
    {"smelt_train_step_seconds", "step_ms", 1e-3, "Wall time of the last step."},
    {"smelt_train_data_wait_seconds", "data_wait_ms", 1e-3, "Time the last step waited for its batch."},
    {"smelt_train_allreduce_wait_seconds", "allreduce_wait_ms", 1e-3, "Time the last step waited in the gradient all-reduce."},
    {"smelt_train_checkpoint_write_bytes_per_second", "ckpt_write_mb_s", 1e6, "Write rate of the last checkpoint."},
    {"smelt_train_token_entropy", "token_entropy", 1, "Mean entropy of the model's next-token distribution in the last step (nats)."},
    {"smelt_train_attention_sparsity_ratio", "attn_sparsity", 1, "Share of attention weights below the threshold, last sampled (0-1)."},
};

// Each downstream task's last value and standard error, labelled with the task and its metric.
void prom_tasks(std::string& o, const std::vector<DashboardRun>& runs, const std::vector<DashboardLatest>& latest, size_t n) {
  constexpr std::pair<const char*, const char*> kFamilies[] = {
      {"value", "smelt_train_task_value"}, {"stderr", "smelt_train_task_stderr"}};
  for (const auto& [field, name] : kFamilies) {
    prom_family(o, name, "gauge",
                std::string_view(field) == "value"
                    ? "Headline metric of each downstream task at its last evaluation (acc_norm, bits_per_byte, ...: the metric label)."
                    : "Standard error of each downstream task's headline metric at its last evaluation.");
    for (size_t i = 0; i < n; i++)
      for (const auto& [task, metric] : latest[i].task_metrics)
        if (auto it = latest[i].values.find(fmt::format("tasks.{}.{}", task, field)); it != latest[i].values.end())
          o += fmt::format("{}{{run=\"{}\",task=\"{}\",metric=\"{}\"}} {}\n", name, prom_label(runs[i].name), prom_label(task),
                           prom_label(metric), prom_num(it->second));
  }
}

double state_code(const std::string& s) {
  if (s == "ok") return 0;
  if (s == "warn") return 1;
  if (s == "bad") return 2;
  return -1;
}

}  // namespace

std::string dashboard_prometheus(const std::vector<DashboardRun>& runs, const std::vector<DashboardLatest>& latest,
                                 const std::vector<json>& vitals) {
  std::string o;
  const size_t n = std::min(runs.size(), latest.size());
  auto label = [&](size_t i) { return fmt::format("run=\"{}\"", prom_label(runs[i].name)); };
  auto value = [&](size_t i, const std::string& key, double& v) {
    auto it = latest[i].values.find(key);
    if (it == latest[i].values.end()) return false;
    v = it->second;
    return true;
  };
  prom_family(o, "smelt_train_step", "gauge", "Step of the last metrics line.");
  for (size_t i = 0; i < n; i++)
    if (latest[i].step >= 0) o += fmt::format("smelt_train_step{{{}}} {}\n", label(i), latest[i].step);
  prom_family(o, "smelt_train_tokens_total", "counter", "Training tokens seen (all ranks).");
  for (size_t i = 0; i < n; i++)
    if (double v; value(i, "tokens", v)) o += fmt::format("smelt_train_tokens_total{{{}}} {}\n", label(i), prom_num(v));
  for (const auto& g : kGauges) {
    prom_family(o, g.name, "gauge", g.help);
    for (size_t i = 0; i < n; i++)
      if (double v; value(i, g.key, v)) o += fmt::format("{}{{{}}} {}\n", g.name, label(i), prom_num(v * g.scale));
  }
  prom_family(o, "smelt_train_data_fetch_seconds", "gauge",
              "The loader's batch fetch latency over its recent window, by quantile.");
  constexpr std::pair<const char*, const char*> kQuantiles[] = {
      {"0.5", "fetch_ms.p50"}, {"0.95", "fetch_ms.p95"}, {"0.99", "fetch_ms.p99"}};
  for (size_t i = 0; i < n; i++)
    for (const auto& [q, key] : kQuantiles)
      if (double v; value(i, key, v))
        o += fmt::format("smelt_train_data_fetch_seconds{{{},quantile=\"{}\"}} {}\n", label(i), q, prom_num(v * 1e-3));
  prom_family(o, "smelt_train_source_loss", "gauge", "Training loss of the last step by data source (nats per token).");
  const std::string src = "loss_by_source.";
  for (size_t i = 0; i < n; i++)
    for (const auto& [k, v] : latest[i].values)
      if (k.rfind(src, 0) == 0)
        o += fmt::format("smelt_train_source_loss{{{},source=\"{}\"}} {}\n", label(i), prom_label(k.substr(src.size())),
                         prom_num(v));
  prom_tasks(o, runs, latest, n);
  prom_family(o, "smelt_train_events_total", "counter",
              "Marks in metrics.jsonl by kind: checkpoint, skipped, loss_spike, rollback, lr_restart, restart, ...");
  for (size_t i = 0; i < n; i++)
    for (const auto& [k, c] : latest[i].events)
      o += fmt::format("smelt_train_events_total{{{},kind=\"{}\"}} {}\n", label(i), prom_label(k), c);
  prom_family(o, "smelt_train_metrics_bad_lines", "gauge", "Lines of metrics.jsonl that did not parse and were skipped.");
  for (size_t i = 0; i < n; i++) o += fmt::format("smelt_train_metrics_bad_lines{{{}}} {}\n", label(i), latest[i].bad_lines);
  prom_family(o, "smelt_train_last_update_timestamp_seconds", "gauge", "When metrics.jsonl last changed (Unix time).");
  for (size_t i = 0; i < n; i++)
    if (latest[i].mtime > 0)
      o += fmt::format("smelt_train_last_update_timestamp_seconds{{{}}} {}\n", label(i), prom_num(latest[i].mtime));
  // Vital signs: 0 ok, 1 warn, 2 bad, -1 unknown (nothing to judge yet).
  prom_family(o, "smelt_train_vitals_state", "gauge", "The run's worst vital sign: 0 ok, 1 warn, 2 bad.");
  for (size_t i = 0; i < n && i < vitals.size(); i++)
    if (vitals[i].is_object())
      o += fmt::format("smelt_train_vitals_state{{{}}} {}\n", label(i), prom_num(state_code(vitals[i].value("state", ""))));
  prom_family(o, "smelt_train_vital_sign_state", "gauge", "A vital sign's state: 0 ok, 1 warn, 2 bad, -1 unknown.");
  for (size_t i = 0; i < n && i < vitals.size(); i++)
    if (vitals[i].is_object())
      for (const auto& s : vitals[i].value("signs", json::array()))
        o += fmt::format("smelt_train_vital_sign_state{{{},sign=\"{}\"}} {}\n", label(i),
                         prom_label(s.value("name", "")), prom_num(state_code(s.value("state", ""))));
  prom_family(o, "smelt_train_vital_sign_value", "gauge", "A vital sign's latest value, in the sign's own unit.");
  for (size_t i = 0; i < n && i < vitals.size(); i++)
    if (vitals[i].is_object())
      for (const auto& s : vitals[i].value("signs", json::array()))
        if (auto v = s.find("value"); v != s.end() && v->is_number())
          o += fmt::format("smelt_train_vital_sign_value{{{},sign=\"{}\"}} {}\n", label(i), prom_label(s.value("name", "")),
                           prom_num(v->get<double>()));
  return o;
}

// ---- the page and the report --------------------------------------------------------------------

namespace {

const DashboardAsset* find_asset(std::string_view name) {
  for (const auto& a : dashboard_assets())
    if (name == a.name) return &a;
  return nullptr;
}

// Text inside <script>: "</script" (any case) would end it early; "<\/" means the same in JS.
std::string script_safe(std::string_view s) {
  std::string o;
  o.reserve(s.size());
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] == '<' && i + 1 < s.size() && s[i + 1] == '/') {
      o += "<\\/";
      i++;
    } else {
      o += s[i];
    }
  }
  return o;
}

// JSON inside <script type="application/json">: '<' is only ever inside strings, where \u003c
// reads back the same, so no tag can start within it.
std::string json_script_safe(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    if (c == '<') o += "\\u003c";
    else o += c;
  }
  return o;
}

Status replace_once(std::string& html, const std::string& tag, const std::string& with) {
  const size_t at = html.find(tag);
  if (at == std::string::npos)
    return Status::error(fmt::format("the embedded dashboard.html has no {} to inline (web/dashboard.html and "
                                     "obs/dashboard.cpp disagree)", tag));
  html.replace(at, tag.size(), with);
  return Status::ok();
}

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

Status dashboard_page(const json* data, std::string& html) {
  const DashboardAsset* page = find_asset("dashboard.html");
  if (!page) return Status::error("dashboard.html is not among the embedded assets (see CMakeLists.txt)");
  html.assign(page->text());
  if (!data) return Status::ok();
  for (const char* css : {"uPlot.min.css", "dashboard.css"}) {
    const DashboardAsset* a = find_asset(css);
    if (!a) return Status::error(fmt::format("{} is not among the embedded assets", css));
    if (a->text().find("</") != std::string_view::npos)
      return Status::error(fmt::format("{} holds '</', which would end its <style> early", css));
    if (Status s = replace_once(html, fmt::format("<link rel=\"stylesheet\" href=\"assets/{}\">", css),
                                fmt::format("<style>/* {} */\n{}</style>", css, a->text()));
        !s)
      return s;
  }
  for (const char* js : {"uPlot.iife.min.js", "dashboard.js"}) {
    const DashboardAsset* a = find_asset(js);
    if (!a) return Status::error(fmt::format("{} is not among the embedded assets", js));
    std::string block = fmt::format("<script>/* {} */\n{}</script>", js, script_safe(a->text()));
    if (std::string_view(js) == "uPlot.iife.min.js") {
      if (const DashboardAsset* lic = find_asset("uPlot-LICENSE.txt"); lic && lic->text().find("--") == std::string_view::npos)
        block = fmt::format("<!-- uPlot, inlined below, comes with this licence:\n{}-->\n", lic->text()) + block;
    }
    if (Status s = replace_once(html, fmt::format("<script src=\"assets/{}\"></script>", js), block); !s) return s;
  }
  return replace_once(html, "<!--smelt:data-->",
                      fmt::format("<script type=\"application/json\" id=\"smelt-data\">{}</script>",
                                  json_script_safe(data->dump())));
}

Status dashboard_report_data(const std::vector<DashboardRun>& runs, const std::vector<json>& vitals,
                             const std::string& title, json& out) {
  out = {{"title", title}, {"generated", utc_now()}, {"runs", json::array()}};
  for (size_t i = 0; i < runs.size(); i++) {
    json lines = json::array();
    int64_t bad = 0, from = 0;
    std::string id;
    MetricsChunk c;
    do {
      if (Status s = dashboard_read_metrics(runs[i].metrics_path(), from, id, 64u << 20, c); !s) return s;
      if (c.reset && from > 0) {  // replaced while we read it: start over
        lines = json::array();
        bad = 0;
      }
      for (auto& l : c.lines) lines.push_back(std::move(l));
      bad += c.bad_lines;
      from = c.next;
      id = c.file_id;
    } while (c.more() && c.next > c.from);
    out["runs"].push_back({{"name", runs[i].name}, {"dir", runs[i].dir}, {"lines", std::move(lines)}, {"bad_lines", bad},
                           {"vitals", i < vitals.size() ? vitals[i] : json()}});
  }
  return Status::ok();
}

Status dashboard_vitals(const DashboardRun& run, json& out) {
  VitalsReport r;
  if (Status s = vitals_check_run(run.dir, r); !s) return s;
  out = r.to_json();
  return Status::ok();
}

std::string dashboard_title(const std::vector<DashboardRun>& runs) {
  std::string t = "Smelt: ";
  for (size_t i = 0; i < runs.size(); i++) t += (i ? ", " : "") + runs[i].name;
  return t;
}

}  // namespace smelt
