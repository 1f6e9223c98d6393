// The routes of `smelt dashboard` over cpp-httplib (dashboard_server.hpp). Every answer is made
// from the embedded assets or from the runs' files read on the connection's thread; a run's
// cached state sits behind its own mutex, so runs are read in parallel and one run's readers wait
// for each other only.
#include "smelt/obs/dashboard_server.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>
#include <httplib.h>

#include "smelt/common/log.hpp"
#include "smelt/obs/dashboard_assets.hpp"

namespace smelt {

using json = nlohmann::json;

namespace {

constexpr const char* kJson = "application/json";
constexpr const char* kAllow = "GET, HEAD";

void send_json(httplib::Response& s, int status, const json& j) {
  s.status = status;
  s.set_content(j.dump(), kJson);
  s.set_header("Cache-Control", "no-store");
}

void send_error(httplib::Response& s, int status, const std::string& message) {
  send_json(s, status, {{"error", message}});
}

const char* content_type(std::string_view name) {
  auto ends = [&](std::string_view e) { return name.size() >= e.size() && name.substr(name.size() - e.size()) == e; };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".js")) return "text/javascript; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  return "text/plain; charset=utf-8";
}

// The paths this server answers (405 elsewhere than GET/HEAD on them, 404 for the rest).
bool known_path(const std::string& p) {
  if (p == "/" || p == "/index.html" || p == "/api/runs" || p == "/metrics" || p == "/health" || p == "/favicon.ico")
    return true;
  if (p.rfind("/assets/", 0) == 0) return true;
  return p.rfind("/api/runs/", 0) == 0;
}

// A decimal integer >= 0 and nothing else.
bool parse_offset(const std::string& s, int64_t& v) {
  if (s.empty() || s.size() > 18 || s.find_first_not_of("0123456789") != std::string::npos) return false;
  v = std::stoll(s);
  return true;
}

}  // namespace

DashboardServer::DashboardServer(std::vector<DashboardRun> runs, DashboardServerConfig c)
    : runs_(std::move(runs)), cfg_(std::move(c)), http_(cfg_) {
  for (size_t i = 0; i < runs_.size(); i++) state_.push_back(std::make_unique<RunState>());
  if (cfg_.title.empty()) cfg_.title = dashboard_title(runs_);
  routes();
}

DashboardServer::~DashboardServer() {
  http_.stop();
  http_.join();
}

Status DashboardServer::bind() {
  if (Status s = dashboard_page(nullptr, page_); !s) return s;
  return http_.bind("(--port 0 takes any free one)");
}

void DashboardServer::start() { http_.start(); }

void DashboardServer::stop() { http_.stop(); }

bool DashboardServer::join() { return http_.join(); }

bool DashboardServer::run_index(const Req& q, Res& s, size_t& i) const {
  int64_t v = -1;
  if (!parse_offset(q.matches[1].str(), v) || v >= (int64_t)runs_.size()) {
    send_error(s, 404, fmt::format("no run {} (this dashboard shows {} run{}, 0-{})", q.matches[1].str(), runs_.size(),
                                   runs_.size() == 1 ? "" : "s", runs_.size() - 1));
    return false;
  }
  i = (size_t)v;
  return true;
}

void DashboardServer::routes() {
  auto& svr = http_.server();
  svr.Get("/", [this](const Req&, Res& s) {
    s.set_content(page_, "text/html; charset=utf-8");
    s.set_header("Cache-Control", "no-cache");
  });
  svr.Get("/index.html", [](const Req&, Res& s) { s.set_redirect("/"); });
  // Assets by name from the embedded table only: "../x" and the like are simply not in it.
  svr.Get("/assets/(.+)", [](const Req& q, Res& s) {
    const std::string name = q.matches[1].str();
    for (const auto& a : dashboard_assets()) {
      if (name != a.name) continue;
      s.set_content(reinterpret_cast<const char*>(a.data), a.size, content_type(name));
      s.set_header("Cache-Control", "no-cache");
      return;
    }
    send_error(s, 404, fmt::format("no asset '{}'", name));
  });
  svr.Get("/favicon.ico", [](const Req&, Res& s) { s.status = 204; });  // (browsers ask for one)
  svr.Get("/health", [](const Req&, Res& s) { send_json(s, 200, {{"status", "ok"}}); });
  svr.Get("/api/runs", [this](const Req&, Res& s) {
    json runs = json::array();
    for (size_t i = 0; i < runs_.size(); i++) runs.push_back({{"id", i}, {"name", runs_[i].name}, {"dir", runs_[i].dir}});
    send_json(s, 200, {{"title", cfg_.title}, {"refresh_ms", cfg_.refresh_ms}, {"vitals", (bool)cfg_.vitals}, {"runs", runs}});
  });
  svr.Get(R"(/api/runs/([^/]+)/metrics)", [this](const Req& q, Res& s) { metrics_chunk(q, s); });
  svr.Get(R"(/api/runs/([^/]+)/vitals)", [this](const Req& q, Res& s) { vitals(q, s); });
  svr.Get("/metrics", [this](const Req&, Res& s) { prometheus(s); });

  auto fallback = [](const Req& q, Res& s) {
    if (q.method != "GET" && q.method != "HEAD" && known_path(q.path)) {
      send_error(s, 405, fmt::format("{} does not take {}; it takes {}", q.path, q.method, kAllow));
      s.set_header("Allow", kAllow);
    } else {
      send_error(s, 404, fmt::format("no route {} {} (docs/dashboard.md lists them)", q.method, q.path));
    }
  };
  http_.fallback(fallback);
  svr.set_exception_handler([](const Req& q, Res& s, std::exception_ptr ep) {
    const std::string what = http_exception_text(ep);
    spdlog::error("{} {}: {}", q.method, q.path, what);
    send_error(s, 500, "internal error: " + what);
  });
  svr.set_logger([](const Req& q, const Res& s) { spdlog::debug("{} {} -> {}", q.method, q.path, s.status); });
}

void DashboardServer::metrics_chunk(const Req& q, Res& s) {
  size_t i = 0;
  if (!run_index(q, s, i)) return;
  int64_t from = 0;
  if (q.has_param("from") && !parse_offset(q.get_param_value("from"), from))
    return send_error(s, 400, fmt::format("from={}: want a byte offset (an integer >= 0)", q.get_param_value("from")));
  MetricsChunk c;
  if (Status st = dashboard_read_metrics(runs_[i].metrics_path(), from, q.get_param_value("file"), cfg_.chunk_bytes, c); !st)
    return send_error(s, 500, st.message());
  send_json(s, 200, c.to_json());
}

Status DashboardServer::vitals_of(size_t i, json& out) {
  RunState& st = *state_[i];
  std::lock_guard<std::mutex> lk(st.mu);
  struct stat fs {};
  std::string key;
  if (::stat(runs_[i].metrics_path().c_str(), &fs) == 0)
    key = fmt::format("{}:{}:{}:{}.{}", (unsigned long long)fs.st_dev, (unsigned long long)fs.st_ino, (long long)fs.st_size,
                      (long long)fs.st_mtim.tv_sec, (long)fs.st_mtim.tv_nsec);
  if (key.empty() || key != st.vitals_key) {
    json v;
    if (Status s = cfg_.vitals(runs_[i], v); !s) return s;
    st.vitals = std::move(v);
    st.vitals_key = key;
  }
  out = st.vitals;
  return Status::ok();
}

void DashboardServer::vitals(const Req& q, Res& s) {
  size_t i = 0;
  if (!run_index(q, s, i)) return;
  if (!cfg_.vitals) return send_error(s, 404, "this dashboard has no vital signs");
  json v;
  if (Status st = vitals_of(i, v); !st) return send_error(s, 500, st.message());
  send_json(s, 200, v);
}

void DashboardServer::prometheus(Res& s) {
  std::vector<DashboardLatest> latest(runs_.size());
  std::vector<json> vitals(runs_.size());
  for (size_t i = 0; i < runs_.size(); i++) {
    {
      std::lock_guard<std::mutex> lk(state_[i]->mu);
      if (Status st = state_[i]->latest.update(runs_[i].metrics_path()); !st) spdlog::warn("/metrics: {}", st.message());
      latest[i] = state_[i]->latest;
    }
    if (cfg_.vitals)
      if (Status st = vitals_of(i, vitals[i]); !st) spdlog::warn("/metrics: vital signs of {}: {}", runs_[i].dir, st.message());
  }
  s.status = 200;
  s.set_content(dashboard_prometheus(runs_, latest, vitals), "text/plain; version=0.0.4; charset=utf-8");
}

}  // namespace smelt
