// `smelt dashboard RUN...`: a page that follows the runs' metrics.jsonl live, with Prometheus text at
// /metrics; `smelt report RUN... -o FILE`: the same page as one self-contained HTML file
// (docs/dashboard.md). Both light: no MPI, BLAS or OpenMP. SIGTERM/SIGINT stop the server, on
// HttpSignalWatch's thread (common/http_listener.hpp).
// Not the routes (obs/dashboard_server.hpp) nor the data (obs/dashboard.hpp).
#include <cstdio>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "smelt/cli/cli_parse.hpp"
#include "smelt/cli/commands.hpp"
#include "smelt/common/files.hpp"
#include "smelt/common/log.hpp"
#include "smelt/common/http_listener.hpp"
#include "smelt/obs/dashboard.hpp"
#include "smelt/obs/dashboard_server.hpp"

namespace smelt {

int cli_dashboard(int argc, char** argv) {
  CLI::App app{"smelt dashboard: a live page of training runs' metrics, vital signs and events, with Prometheus "
               "text at /metrics (docs/dashboard.md)"};
  app.name("smelt dashboard");
  std::vector<std::string> dirs;
  std::string host = "127.0.0.1", title;
  int port = 8080, refresh_ms = 1500;
  app.add_option("RUN", dirs, "run folders (each holds metrics.jsonl); several overlay on the same charts")->required();
  app.add_option("--host", host, "address to bind (default 127.0.0.1: this machine only; 0.0.0.0 for every interface)");
  app.add_option("--port", port, "TCP port (default 8080; 0: any free port, printed)")->check(CLI::Range(0, 65535));
  app.add_option("--refresh-ms", refresh_ms, "how often the page asks for new lines (default 1500)")
      ->check(CLI::Range(100, 600000));
  app.add_option("--title", title, "the page's title (default: the runs' names)");
  if (int rc = cli_parse(app, argc, argv, "dashboard"); rc >= 0) return rc;

  std::vector<DashboardRun> runs;
  if (Status s = dashboard_runs(dirs, runs); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  DashboardServerConfig dc;
  dc.host = host;
  dc.port = port;
  dc.refresh_ms = refresh_ms;
  dc.title = title;
  dc.vitals = dashboard_vitals;
  // SIGINT/SIGTERM blocked in every thread started from here and taken by StopSignals' watcher.
  HttpSignalWatch signals;
  if (Status s = signals.open(); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  DashboardServer server(runs, dc);
  if (Status s = server.bind(); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  server.start();
  for (const auto& r : runs) spdlog::info("run '{}': {}", r.name, r.dir);
  signals.watch([&] {
    spdlog::info("signal: stopping");
    server.stop();
  });
  std::fprintf(stdout, "listening on http://%s:%d\n", host.c_str(), server.port());
  std::fflush(stdout);
  const bool by_stop = server.join();
  signals.end();
  if (!by_stop) {
    spdlog::error("the HTTP listener stopped with an error");
    return kExitFailure;
  }
  spdlog::info("stopped");
  return kExitOk;
}

int cli_report(int argc, char** argv) {
  CLI::App app{"smelt report: the dashboard of training runs as one self-contained HTML file (data, script and "
               "charts inlined; opens with no server and no network) (docs/dashboard.md)"};
  app.name("smelt report");
  std::vector<std::string> dirs;
  std::string out, title;
  app.add_option("RUN", dirs, "run folders (each holds metrics.jsonl); several overlay on the same charts")->required();
  app.add_option("-o,--output", out, "the HTML file to write (replaced atomically)")->required();
  app.add_option("--title", title, "the page's title (default: the runs' names)");
  if (int rc = cli_parse(app, argc, argv, "report"); rc >= 0) return rc;

  std::vector<DashboardRun> runs;
  if (Status s = dashboard_runs(dirs, runs); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  std::vector<nlohmann::json> vitals(runs.size());
  for (size_t i = 0; i < runs.size(); i++)
    if (Status s = dashboard_vitals(runs[i], vitals[i]); !s) {  // (the curves are still worth the file)
      spdlog::warn("{}; the report shows no vital signs for {}", s.message(), runs[i].name);
      vitals[i] = nullptr;
    }
  nlohmann::json data;
  std::string html;
  if (Status s = dashboard_report_data(runs, vitals, title.empty() ? dashboard_title(runs) : title, data); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  if (Status s = dashboard_page(&data, html); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  if (Status s = files_write_atomic(out, html); !s) {
    spdlog::error("-o {}: {}", out, s.message());
    return kExitFailure;
  }
  int64_t lines = 0;
  for (const auto& r : data["runs"]) {
    lines += (int64_t)r["lines"].size();
    if (const int64_t bad = r["bad_lines"].get<int64_t>(); bad > 0)
      spdlog::warn("{}/metrics.jsonl: {} line{} not a metrics line (a JSON object with a step); skipped",
                   r["dir"].get<std::string>(), bad, bad == 1 ? " is" : "s are");
  }
  spdlog::info("{}: {} run{}, {} lines, {:.1f} KB", out, runs.size(), runs.size() == 1 ? "" : "s", lines, html.size() / 1024.0);
  return kExitOk;
}

}  // namespace smelt
