// The HTTP side of `smelt dashboard` (docs/dashboard.md) over cpp-httplib: the page and its
// embedded assets, the runs' metrics.jsonl by byte offset for the page's polling, their vital
// signs, and Prometheus text at /metrics. It opens no file but RUN/metrics.jsonl (and what the
// vitals function reads) of the runs it was given; no path in a request reaches the file system.
// Not the data (dashboard.hpp), not flags or signals (cli/dashboard_cmd.cpp).
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "smelt/common/http_listener.hpp"
#include "smelt/common/status.hpp"
#include "smelt/obs/dashboard.hpp"

namespace smelt {

// The listener's settings (16 connection threads: a browser keeps up to 6 connections open; a
// 64 KiB body limit: no route takes a body) and the dashboard's own.
struct DashboardServerConfig : HttpListenerConfig {
  DashboardServerConfig() {
    port = 8080;
    threads = 16;
    max_body_bytes = 64 << 10;
  }
  int refresh_ms = 1500;            // how often the page polls
  size_t chunk_bytes = 4u << 20;    // metrics.jsonl bytes per answer at most (the page asks again)
  std::string title;
  // A run's vital signs as VitalsReport::to_json(); empty: /api/runs/N/vitals answers 404.
  std::function<Status(const DashboardRun&, nlohmann::json&)> vitals;
};

class DashboardServer {
 public:
  DashboardServer(std::vector<DashboardRun> runs, DashboardServerConfig c);
  ~DashboardServer();
  DashboardServer(const DashboardServer&) = delete;
  DashboardServer& operator=(const DashboardServer&) = delete;

  Status bind();  // errors name host and port
  int port() const { return http_.port(); }
  void start();   // serves on a thread of its own
  void stop();    // from any thread but a signal handler; idempotent
  bool join();    // true when the listener ended by stop(), false when listening failed

 private:
  using Req = httplib::Request;
  using Res = httplib::Response;
  // Per run: the latest values for /metrics and the last vital signs, each read again only when
  // metrics.jsonl changed.
  struct RunState {
    std::mutex mu;
    DashboardLatest latest;
    std::string vitals_key;  // file id, size and mtime the cached vitals were read at
    nlohmann::json vitals;
  };
  void routes();
  bool run_index(const Req& q, Res& s, size_t& i) const;
  void metrics_chunk(const Req& q, Res& s);
  void vitals(const Req& q, Res& s);
  void prometheus(Res& s);
  Status vitals_of(size_t i, nlohmann::json& out);

  std::vector<DashboardRun> runs_;
  DashboardServerConfig cfg_;
  std::vector<std::unique_ptr<RunState>> state_;
  std::string page_;
  HttpListener http_;
};

}  // namespace smelt
