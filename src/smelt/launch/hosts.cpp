// Hosts of a supervised job: parsing, blame, the shape the hosts that are up hold, probing.
#include "smelt/launch/hosts.hpp"

#include <algorithm>
#include <memory>
#include <sstream>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "smelt/common/clock.hpp"
#include "smelt/launch/job.hpp"

namespace smelt {

Status launch_hosts_parse(const std::string& spec, std::vector<LaunchHost>& out) {
  out.clear();
  std::istringstream in(spec);
  for (std::string item; std::getline(in, item, ',');) {
    LaunchHost h;
    const size_t colon = item.rfind(':');
    h.name = item.substr(0, colon);
    if (colon != std::string::npos) {
      const std::string n = item.substr(colon + 1);
      h.slots = n.empty() || n.find_first_not_of("0123456789") != std::string::npos || n.size() > 6 ? 0 : std::stoi(n);
    }
    if (h.name.empty() || h.slots < 1)
      return Status::error(fmt::format("--hosts: \"{}\": expected HOST or HOST:SLOTS with SLOTS >= 1", item));
    for (const auto& o : out)
      if (o.name == h.name) return Status::error(fmt::format("--hosts: {} is named twice", h.name));
    out.push_back(h);
  }
  if (out.empty()) return Status::error("--hosts: no host given (expected HOST:SLOTS,...)");
  return Status::ok();
}

Status launch_layout_parse(const std::string& toml_text, LaunchLayout& out) {
  toml::table t;
  try {
    t = toml::parse(toml_text);
  } catch (const toml::parse_error& e) {
    return Status::error(fmt::format("the training config printed by --print-config does not parse: {}", e.description()));
  }
  out.tp = t["parallel"]["tp"].value_or(1);
  out.pp = t["parallel"]["pp"].value_or(1);
  out.batch_size = t["data"]["batch_size"].value_or(1);
  out.grad_accum = t["train"]["grad_accum"].value_or(1);
  out.packed = t["data"]["mode"].value_or(std::string("packed")) == "packed";
  if (out.tp < 1 || out.pp < 1 || out.batch_size < 1 || out.grad_accum < 1)
    return Status::error("the training config printed by --print-config has no usable [parallel]/[data]/[train] values");
  return Status::ok();
}

namespace {

std::string down_hosts(const std::vector<LaunchHost>& hosts) {
  std::string s;
  for (const auto& h : hosts)
    if (!h.up) s += fmt::format("{}{} ({})", s.empty() ? "" : ", ", h.name, h.why);
  return s.empty() ? "none" : s;
}

}  // namespace

Status launch_shape(const LaunchLayout& cfg, int np, int min_ranks, const std::vector<LaunchHost>& hosts,
                    LaunchShape& out) {
  const int model = cfg.tp * cfg.pp;
  if (np % model != 0)
    return Status::error(fmt::format("--np {} is not a multiple of tp x pp = {}", np, model));
  const int dp0 = np / model;
  int free = 0;
  for (const auto& h : hosts) free += h.up ? h.slots : 0;
  int d = std::min(dp0, free / model);
  // A packed global batch re-splits over fewer ranks; other modes keep the rank count they have.
  while (d > 0 && (cfg.packed ? (dp0 * cfg.grad_accum) % d != 0 : d != dp0)) d--;
  if (d == 0 || d * model < min_ranks)
    return Status::error(fmt::format("{} ranks free on the hosts that are up, and the run needs {} (--min-ranks {}, "
                                     "tp x pp = {}{}); down: {}",
                                     free, std::max(min_ranks, model), min_ranks, model,
                                     cfg.packed ? "" : ", and a data.mode other than packed keeps its rank count",
                                     down_hosts(hosts)));
  out = LaunchShape{};
  out.ranks = d * model;
  out.batch_size = cfg.batch_size / dp0 * d;
  out.grad_accum = dp0 * cfg.grad_accum / d;
  out.changed = d != dp0;
  int left = out.ranks;
  for (const auto& h : hosts) {
    if (!h.up || left == 0) continue;
    const int take = std::min(left, h.slots);
    out.hosts.emplace_back(h.name, take);
    left -= take;
  }
  return Status::ok();
}

std::string launch_rank_host(const LaunchShape& s, int rank) {
  for (const auto& [name, n] : s.hosts) {
    if (rank >= 0 && rank < n) return name;
    rank -= n;
  }
  return "";
}

std::string launch_hosts_failed(std::vector<LaunchHost>& hosts, const LaunchShape& shape, const Failure& f,
                                double now) {
  std::string blamed = f.rank >= 0 ? launch_rank_host(shape, f.rank) : "";
  if (blamed.empty()) blamed = f.host;
  std::string dropped;
  for (auto& h : hosts) {
    if (h.name != blamed) {
      h.failures_in_row = 0;
      continue;
    }
    h.failures_in_row++;
    if (f.cause == "launch" || h.failures_in_row >= 2) {
      h.up = false, h.down_since = now, dropped = h.name;
      h.why = f.cause == "launch" ? "not reached" : fmt::format("failed {} times in a row, last: {}", h.failures_in_row, f.cause);
    }
  }
  return dropped;
}

std::vector<std::string> launch_probe_hosts(const std::vector<std::string>& names, const std::string& launcher,
                                            const std::vector<std::string>& launcher_args, double timeout_s) {
  std::vector<std::unique_ptr<Job>> jobs;
  std::vector<std::string> why(names.size());
  for (size_t i = 0; i < names.size(); i++) {
    std::vector<std::string> argv = launcher == "srun"
        ? std::vector<std::string>{"srun", "--ntasks=1", "--nodelist=" + names[i]}
        : std::vector<std::string>{"mpirun", "-np", "1", "--host", names[i] + ":1"};
    argv.insert(argv.end(), launcher_args.begin(), launcher_args.end());
    argv.push_back("true");
    jobs.push_back(std::make_unique<Job>());
    if (Status s = jobs.back()->start(argv, nullptr, false); !s) why[i] = s.message();
  }
  const double until = now_s() + timeout_s;
  for (bool any = true; any && now_s() < until;) {
    any = false;
    for (auto& j : jobs)
      if (j->running()) any = j->poll(any ? 0 : 50) || any;
  }
  for (size_t i = 0; i < jobs.size(); i++) {
    if (!why[i].empty()) continue;
    if (jobs[i]->running()) {
      why[i] = fmt::format("no answer to a probe in {:.0f} s", timeout_s);
    } else if (jobs[i]->exit_code() != 0) {
      std::string last = jobs[i]->tail();  // the probe's first line of complaint
      const size_t at = last.find_first_not_of(" \n-");
      last = at == std::string::npos ? "" : last.substr(at, last.find('\n', at) - at);
      why[i] = fmt::format("a probe exited with status {}: {}", jobs[i]->exit_code(), last.substr(0, 200));
    }
  }
  for (auto& j : jobs) j->stop(1.0);  // (after every verdict: a stop ends everything this process started)
  return why;
}

}  // namespace smelt

namespace smelt {

Status LaunchFleet::open(const LaunchOptions& o, const std::string& launcher) {
  o_ = &o, launcher_ = launcher;
  if (Status s = launch_hosts_parse(o.hosts, hosts_); !s) return s;
  std::string cmd;
  for (const auto& w : o.command) cmd += shell_quote(w) + " ";
  cmd += "--print-config 2>/dev/null";
  std::string text;
  if (const int rc = run_capture(cmd, text); rc != 0)
    return Status::error(fmt::format("`{}` failed (status {}): the command's config is needed to re-split its batch", cmd, rc));
  return launch_layout_parse(text, layout_);
}

Status LaunchFleet::plan(LaunchShape& out, std::vector<std::string>& notes) {
  const double now = now_s();
  std::vector<size_t> probed;
  std::vector<std::string> names;
  for (size_t i = 0; i < hosts_.size(); i++)
    if (hosts_[i].up || now - std::max(hosts_[i].down_since, hosts_[i].probed_at) >= o_->rejoin_s)
      probed.push_back(i), names.push_back(hosts_[i].name);
  const std::vector<std::string> why = launch_probe_hosts(names, launcher_, o_->launcher_args, o_->probe_s);
  for (size_t k = 0; k < probed.size(); k++) {
    LaunchHost& h = hosts_[probed[k]];
    const bool answered = why[k].empty();
    if (answered && !h.up) {
      notes.push_back(fmt::format("host {} answers again (left out {:.0f} s ago: {}): back in", h.name, now - h.down_since, h.why));
      h.up = true, h.failures_in_row = 0, h.why.clear();
    } else if (!answered && h.up) {
      h.up = false, h.down_since = now, h.why = why[k];
      notes.push_back(fmt::format("host {}: {}: left out", h.name, h.why));
    } else if (!answered) {
      h.probed_at = now;  // probed again rejoin_s from now
    }
  }
  return launch_shape(layout_, o_->np, o_->min_ranks > 0 ? o_->min_ranks : o_->np, hosts_, out);
}

std::string LaunchFleet::failed(Failure& f, const LaunchShape& shape) {
  if (f.rank >= 0) {
    const std::string h = launch_rank_host(shape, f.rank);
    if (!h.empty()) f.host = h;  // where the supervisor placed it (a rank's own hostname can be ambiguous)
  }
  return launch_hosts_failed(hosts_, shape, f, now_s());
}

nlohmann::ordered_json LaunchFleet::down_json() const {
  nlohmann::ordered_json a = nlohmann::ordered_json::array();
  for (const auto& h : hosts_)
    if (!h.up) a.push_back({{"host", h.name}, {"why", h.why}});
  return a;
}

}  // namespace smelt
