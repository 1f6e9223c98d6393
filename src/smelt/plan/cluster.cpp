// Cluster files (cluster.hpp): TOML in, TOML out, and the measured curves' interpolation.
#include "smelt/plan/cluster.hpp"

#include <algorithm>
#include <sstream>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "smelt/common/config.hpp"
#include "smelt/common/files.hpp"

namespace smelt {

double CommCurve::at(double b) const {
  const size_t n = bytes.size();
  if (n == 0) return 0;
  if (n == 1) return seconds[0];
  size_t i = 1;
  while (i + 1 < n && bytes[i] < b) i++;
  const double x0 = bytes[i - 1], x1 = bytes[i], y0 = seconds[i - 1], y1 = seconds[i];
  const double t = x1 > x0 ? y0 + (y1 - y0) * (b - x0) / (x1 - x0) : y1;
  return std::max(t, seconds[0]);
}

namespace {

// One [[name]] entry read through ConfigSection (unknown keys and types checked like a section).
ConfigSection entry_section(const toml::table& entry, const char* name, size_t i, toml::table& holder) {
  holder = toml::table{};
  holder.insert_or_assign(fmt::format("{}[{}]", name, i), entry);
  return ConfigSection(holder, fmt::format("{}[{}]", name, i));
}

// x, y: the keys' names for the messages ("bytes" and "seconds"; a sync curve's "segment_s" and
// "wait_s").
Status check_curve(const CommCurve& c, const std::string& where, const char* x = "bytes", const char* y = "seconds") {
  if (c.bytes.size() != c.seconds.size())
    return Status::error(fmt::format("{}: {} has {} values and {} {}: expected one {} value per {} value", where,
                                     x, c.bytes.size(), y, c.seconds.size(), y, x));
  for (size_t i = 0; i < c.bytes.size(); i++) {
    if (c.bytes[i] <= 0 || c.seconds[i] <= 0)
      return Status::error(fmt::format("{}: point {} ({} {}, {} {}): expected positive values", where, i, x,
                                       c.bytes[i], y, c.seconds[i]));
    if (i > 0 && c.bytes[i] <= c.bytes[i - 1])
      return Status::error(fmt::format("{}: {} must increase (point {})", where, x, i));
  }
  return Status::ok();
}

}  // namespace

Status cluster_parse(const std::string& text, const std::string& file, ClusterSpec& out) {
  toml::table root;
  try {
    root = toml::parse(text, file);
  } catch (const toml::parse_error& e) {
    return Status::error(fmt::format("{} line {} column {}: {}", file, e.source().begin.line, e.source().begin.column,
                                     e.description()));
  }
  ClusterSpec c;
  std::vector<std::string> errs;
  auto take = [&](ConfigSection& s) {
    for (auto& e : s.finish()) errs.push_back(e);
  };
  {
    ConfigSection s(root, "cluster");
    s.get("name", c.name);
    s.get("source", c.source);
    s.get("nodes", c.nodes);
    s.get("devices_per_node", c.devices_per_node);
    s.get("cores_per_node", c.cores_per_node);
    s.get("threads_per_rank", c.threads_per_rank);
    s.get("memory_gb", c.memory_gb);
    take(s);
  }
  {
    ConfigSection s(root, "compute");
    s.get("fp32_gflops", c.fp32_gflops);
    s.get("bf16_gflops", c.bf16_gflops);
    s.get("attention_gflops", c.attention_gflops);
    s.get("elementwise_gb_s", c.elementwise_gb_s);
    s.get("memory_gb_s", c.memory_gb_s);
    s.get("shared_slowdown", c.shared_slowdown);
    take(s);
  }
  {
    ConfigSection s(root, "network");
    s.get("intra_gb_s", c.intra_gb_s);
    s.get("intra_latency_us", c.intra_latency_us);
    s.get("inter_gb_s", c.inter_gb_s);
    s.get("inter_latency_us", c.inter_latency_us);
    take(s);
  }
  {
    ConfigSection s(root, "disk");
    s.get("write_mb_s", c.disk_write_mb_s);
    take(s);
  }
  {
    ConfigSection s(root, "runtime");
    s.get("process_mb", c.process_mb);
    s.get("mpi_process_mb", c.mpi_process_mb);
    s.get("mp_process_mb", c.mp_process_mb);
    take(s);
  }
  for (const auto& [k, v] : root) {
    const std::string key(k.str());
    static const char* known[] = {"cluster", "compute", "network", "disk", "runtime", "gemm", "allreduce", "p2p",
                                  "sync"};
    if (std::none_of(std::begin(known), std::end(known), [&](const char* x) { return key == x; }))
      errs.push_back(fmt::format("[{}]: unknown table (expected cluster, compute, network, disk, runtime, gemm, "
                                 "allreduce, p2p, sync)", key));
  }
  auto entries = [&](const char* name, auto&& each) {
    const toml::node* n = root.get(name);
    if (!n) return;
    const toml::array* a = n->as_array();
    if (!a || !a->is_array_of_tables()) {
      errs.push_back(fmt::format("{}: expected an array of tables ([[{}]])", name, name));
      return;
    }
    for (size_t i = 0; i < a->size(); i++) {
      toml::table holder;
      ConfigSection s = entry_section(*(*a)[i].as_table(), name, i, holder);
      each(s, i);
      take(s);
    }
  };
  entries("gemm", [&](ConfigSection& s, size_t i) {
    GemmRate g;
    s.get("rows", g.rows);
    s.get("in", g.in);
    s.get("out", g.out);
    s.get("precision", g.precision);
    s.get("gflops", g.gflops);
    if (g.rows <= 0 || g.in <= 0 || g.out <= 0 || g.gflops <= 0 || (g.precision != "fp32" && g.precision != "bf16"))
      errs.push_back(fmt::format("gemm[{}]: expected positive rows, in, out, gflops and precision fp32 or bf16", i));
    c.gemm.push_back(g);
  });
  entries("allreduce", [&](ConfigSection& s, size_t i) {
    CommCurve cv;
    s.get("ranks", cv.ranks);
    s.get("bytes", cv.bytes);
    s.get("seconds", cv.seconds);
    if (Status st = check_curve(cv, fmt::format("allreduce[{}]", i)); !st) errs.push_back(st.message());
    if (cv.ranks < 2) errs.push_back(fmt::format("allreduce[{}]: ranks {}: expected 2 or more", i, cv.ranks));
    c.allreduce.push_back(cv);
  });
  entries("p2p", [&](ConfigSection& s, size_t i) {
    if (i > 0) errs.push_back("p2p: expected one [[p2p]] curve");
    s.get("bytes", c.p2p.bytes);
    s.get("seconds", c.p2p.seconds);
    if (Status st = check_curve(c.p2p, "p2p"); !st) errs.push_back(st.message());
  });
  entries("sync", [&](ConfigSection& s, size_t i) {
    CommCurve cv;
    s.get("ranks", cv.ranks);
    s.get("segment_s", cv.bytes);
    s.get("wait_s", cv.seconds);
    if (Status st = check_curve(cv, fmt::format("sync[{}]", i), "segment_s", "wait_s"); !st) errs.push_back(st.message());
    if (cv.ranks < 2) errs.push_back(fmt::format("sync[{}]: ranks {}: expected 2 or more", i, cv.ranks));
    c.sync.push_back(cv);
  });
  if (c.nodes < 1 || c.devices_per_node < 1 || c.threads_per_rank < 1)
    errs.push_back(fmt::format("[cluster] nodes {}, devices_per_node {}, threads_per_rank {}: expected 1 or more",
                               c.nodes, c.devices_per_node, c.threads_per_rank));
  if (c.memory_gb <= 0) errs.push_back("[cluster] memory_gb: expected the memory per device (GB, > 0)");
  if (c.fp32_gflops <= 0 && c.bf16_gflops <= 0)
    errs.push_back("[compute] fp32_gflops or bf16_gflops: expected a GEMM rate per device (> 0)");
  if (c.attention_gflops <= 0) errs.push_back("[compute] attention_gflops: expected a rate (> 0)");
  if (c.elementwise_gb_s <= 0) errs.push_back("[compute] elementwise_gb_s: expected a rate (> 0)");
  if (c.shared_slowdown < 1) errs.push_back("[compute] shared_slowdown: expected 1 or more");
  if (c.intra_gb_s <= 0 || (c.nodes > 1 && c.inter_gb_s <= 0))
    errs.push_back("[network] intra_gb_s (and inter_gb_s with several nodes): expected a bandwidth (> 0)");
  if (!errs.empty()) {
    std::string m = file + ":";
    for (const auto& e : errs) m += "\n  " + e;
    return Status::error(m);
  }
  out = std::move(c);
  return Status::ok();
}

Status cluster_load(const std::string& path, ClusterSpec& out) {
  std::string text;
  if (Status s = files_read_small(path, text); !s) return Status::error(fmt::format("cluster file: {}", s.message()));
  return cluster_parse(text, path, out);
}

namespace {
std::string numbers(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); i++) s += fmt::format("{}{:.6g}", i ? ", " : "", v[i]);
  return s + "]";
}
std::string quoted(const std::string& s) {
  std::stringstream ss;
  ss << toml::value<std::string>(s);
  return ss.str();
}
}  // namespace

std::string cluster_toml(const ClusterSpec& c) {
  std::string t = fmt::format(
      "[cluster]\nname = {}\nsource = {}\nnodes = {}\ndevices_per_node = {}\ncores_per_node = {}\n"
      "threads_per_rank = {}\nmemory_gb = {:.6g}\n\n"
      "[compute]\nfp32_gflops = {:.6g}\nbf16_gflops = {:.6g}\nattention_gflops = {:.6g}\nelementwise_gb_s = {:.6g}\n"
      "memory_gb_s = {:.6g}\nshared_slowdown = {:.6g}\n\n"
      "[network]\nintra_gb_s = {:.6g}\nintra_latency_us = {:.6g}\ninter_gb_s = {:.6g}\ninter_latency_us = {:.6g}\n\n"
      "[disk]\nwrite_mb_s = {:.6g}\n\n[runtime]\nprocess_mb = {:.6g}\nmpi_process_mb = {:.6g}\nmp_process_mb = {:.6g}\n",
      quoted(c.name), quoted(c.source), c.nodes, c.devices_per_node, c.cores_per_node, c.threads_per_rank,
      c.memory_gb, c.fp32_gflops, c.bf16_gflops, c.attention_gflops, c.elementwise_gb_s, c.memory_gb_s, c.shared_slowdown, c.intra_gb_s,
      c.intra_latency_us, c.inter_gb_s, c.inter_latency_us, c.disk_write_mb_s, c.process_mb, c.mpi_process_mb, c.mp_process_mb);
  for (const GemmRate& g : c.gemm)
    t += fmt::format("\n[[gemm]]\nrows = {}\nin = {}\nout = {}\nprecision = {}\ngflops = {:.6g}\n", g.rows, g.in, g.out,
                     quoted(g.precision), g.gflops);
  for (const CommCurve& a : c.allreduce)
    t += fmt::format("\n[[allreduce]]\nranks = {}\nbytes = {}\nseconds = {}\n", a.ranks, numbers(a.bytes),
                     numbers(a.seconds));
  for (const CommCurve& w : c.sync)
    t += fmt::format("\n[[sync]]\nranks = {}\nsegment_s = {}\nwait_s = {}\n", w.ranks, numbers(w.bytes),
                     numbers(w.seconds));
  if (!c.p2p.bytes.empty())
    t += fmt::format("\n[[p2p]]\nbytes = {}\nseconds = {}\n", numbers(c.p2p.bytes), numbers(c.p2p.seconds));
  return t;
}

}  // namespace smelt
