// Cluster files (cluster.hpp): TOML in and out through one field table per table of the file, the
// rules between keys, and the measured curves' interpolation.
#include "smelt/plan/cluster.hpp"

#include <algorithm>
#include <span>
#include <sstream>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "smelt/common/config.hpp"
#include "smelt/common/config_schema.hpp"
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

// Precision's config names, spelled as hw/precision.hpp's precision_name spells them (the [[gemm]]
// entries' precision key).
inline constexpr EnumName<Precision> kPrecisionNames[] = {{Precision::kFp32, "fp32"}, {Precision::kBf16, "bf16"}};
std::span<const EnumName<Precision>> enum_names(Precision) { return kPrecisionNames; }

namespace {

using C = ClusterSpec;

// The file's tables, in the order cluster_toml writes them.
const Schema<C>& cluster_schema() {
  static const Schema<C> s{
      "cluster",
      {field("name", &C::name, "printed with every plan"),
       field("source", &C::source, "where the figures come from"),
       field("nodes", &C::nodes, "nodes of the cluster", at_least(1)),
       field("devices_per_node", &C::devices_per_node, "devices a node, one rank each", at_least(1)),
       field("cores_per_node", &C::cores_per_node,
             "CPU nodes: the cores the node's ranks share (0: every device is its own processor)"),
       field("threads_per_rank", &C::threads_per_rank, "threads a rank runs", at_least(1)),
       field("memory_gb", &C::memory_gb, "memory per device, GB: what a rank may use",
             above(0, "the memory per device, GB"))}};
  return s;
}

const Schema<C>& compute_schema() {
  static const Schema<C> s{
      "compute",
      {field("fp32_gflops", &C::fp32_gflops, "fp32 GEMMs at large shapes, per device"),
       field("bf16_gflops", &C::bf16_gflops, "bf16 GEMMs at large shapes, per device (0: none)"),
       field("attention_gflops", &C::attention_gflops, "attention, FLOPs as train_flops_per_token counts them",
             above(0)),
       field("elementwise_gb_s", &C::elementwise_gb_s,
             "the non-GEMM kernels' rate over the bytes the cost model counts", above(0)),
       field("memory_gb_s", &C::memory_gb_s, "triad bandwidth (reported)"),
       field("shared_slowdown", &C::shared_slowdown,
             "CPU nodes: compute time with every core running a rank, over one rank alone", at_least(1, "1: none"))}};
  return s;
}

const Schema<C>& network_schema() {
  static const Schema<C> s{
      "network",
      {field("intra_gb_s", &C::intra_gb_s, "inside a node, per rank, one direction", above(0)),
       field("intra_latency_us", &C::intra_latency_us, "inside a node"),
       field("inter_gb_s", &C::inter_gb_s, "between nodes, per rank, one direction (> 0 with several nodes)"),
       field("inter_latency_us", &C::inter_latency_us, "between nodes")}};
  return s;
}

const Schema<C>& disk_schema() {
  static const Schema<C> s{"disk", {field("write_mb_s", &C::disk_write_mb_s, "checkpoint writes")}};
  return s;
}

const Schema<C>& runtime_schema() {
  static const Schema<C> s{
      "runtime",
      {field("process_mb", &C::process_mb, "a training process's resident memory beyond its plan: one process"),
       field("mpi_process_mb", &C::mpi_process_mb, "the same for a rank under mpirun"),
       field("mp_process_mb", &C::mp_process_mb, "the same for a rank with TP or PP groups (0: as mpi_process_mb)")}};
  return s;
}

const Schema<GemmRate>& gemm_schema() {
  static const Schema<GemmRate> s{
      "gemm",
      {field("rows", &GemmRate::rows, "the GEMM's rows (micro-batch rows x seq)", above(0)),
       field("in", &GemmRate::in, "its input features", above(0)),
       field("out", &GemmRate::out, "its output features", above(0)),
       field("precision", &GemmRate::precision, "the numbers it ran in"),
       field("gflops", &GemmRate::gflops, "measured forward + backward rate", above(0))}};
  return s;
}

const Schema<CommCurve>& allreduce_schema() {
  static const Schema<CommCurve> s{
      "allreduce",
      {field("ranks", &CommCurve::ranks, "the group size", at_least(2)),
       field("bytes", &CommCurve::bytes, "message sizes, increasing"),
       field("seconds", &CommCurve::seconds, "the all-reduce's time at each")}};
  return s;
}

const Schema<CommCurve>& p2p_schema() {
  static const Schema<CommCurve> s{
      "p2p",
      {field("bytes", &CommCurve::bytes, "message sizes, increasing"),
       field("seconds", &CommCurve::seconds, "one send and its receive at each")}};
  return s;
}

const Schema<CommCurve>& sync_schema() {
  static const Schema<CommCurve> s{
      "sync",
      {field("ranks", &CommCurve::ranks, "the group size", at_least(2)),
       field("segment_s", &CommCurve::bytes, "compute seconds a rank runs between two collectives, increasing"),
       field("wait_s", &CommCurve::seconds, "the mean wait for the slowest rank beyond the all-reduce's curve")}};
  return s;
}

const std::vector<const Schema<C>*>& cluster_tables() {
  static const std::vector<const Schema<C>*> t = {&cluster_schema(), &compute_schema(), &network_schema(),
                                                  &disk_schema(), &runtime_schema()};
  return t;
}

// One [[name]] entry through its table, read as the section "name[i]" so that messages name it.
template <class S>
void read_entry(const Schema<S>& sc, const toml::table& entry, size_t i, S& s, std::vector<std::string>& errs) {
  Schema<S> at = sc;
  at.section = fmt::format("{}[{}]", sc.section, i);
  toml::table holder;
  holder.insert_or_assign(at.section, entry);
  schema_read(at, holder, s, errs);
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

// The rules between keys (each key's own limits are checked where its table is read).
void cluster_validate(const ClusterSpec& c, std::vector<std::string>& errs) {
  if (c.fp32_gflops <= 0 && c.bf16_gflops <= 0)
    errs.push_back("[compute] fp32_gflops or bf16_gflops: expected a GEMM rate per device (> 0)");
  if (c.nodes > 1 && c.inter_gb_s <= 0)
    errs.push_back("[network] inter_gb_s: expected a bandwidth between nodes (> 0) with several nodes");
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
  for (const Schema<C>* sc : cluster_tables()) schema_read(*sc, root, c, errs);
  for (const auto& [k, v] : root) {
    const std::string key(k.str());
    static const char* known[] = {"cluster", "compute", "network", "disk", "runtime", "gemm", "allreduce", "p2p",
                                  "sync"};
    if (std::none_of(std::begin(known), std::end(known), [&](const char* x) { return key == x; }))
      errs.push_back(fmt::format("[{}]: unknown table (expected cluster, compute, network, disk, runtime, gemm, "
                                 "allreduce, p2p, sync)", key));
  }
  // Each entry of the array of tables named sc.section, handed to each(entry, i) to read, check and keep.
  auto entries = [&](const auto& sc, auto&& each) {
    const char* name = sc.section.c_str();
    const toml::node* n = root.get(name);
    if (!n) return;
    const toml::array* a = n->as_array();
    if (!a || !a->is_array_of_tables()) {
      errs.push_back(fmt::format("{}: expected an array of tables ([[{}]])", name, name));
      return;
    }
    for (size_t i = 0; i < a->size(); i++) each(*(*a)[i].as_table(), i);
  };
  entries(gemm_schema(), [&](const toml::table& e, size_t i) {
    GemmRate g;
    read_entry(gemm_schema(), e, i, g, errs);
    c.gemm.push_back(g);
  });
  entries(allreduce_schema(), [&](const toml::table& e, size_t i) {
    CommCurve cv;
    read_entry(allreduce_schema(), e, i, cv, errs);
    if (Status st = check_curve(cv, fmt::format("allreduce[{}]", i)); !st) errs.push_back(st.message());
    c.allreduce.push_back(cv);
  });
  entries(p2p_schema(), [&](const toml::table& e, size_t i) {
    if (i > 0) errs.push_back("p2p: expected one [[p2p]] curve");
    read_entry(p2p_schema(), e, i, c.p2p, errs);
    if (Status st = check_curve(c.p2p, "p2p"); !st) errs.push_back(st.message());
  });
  entries(sync_schema(), [&](const toml::table& e, size_t i) {
    CommCurve cv;
    read_entry(sync_schema(), e, i, cv, errs);
    if (Status st = check_curve(cv, fmt::format("sync[{}]", i), "segment_s", "wait_s"); !st)
      errs.push_back(st.message());
    c.sync.push_back(cv);
  });
  cluster_validate(c, errs);
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

std::string quoted(const std::string& s) {
  std::stringstream ss;
  ss << toml::value<std::string>(s);
  return ss.str();
}

// A value as cluster files print it: numbers to 6 significant digits, strings quoted as TOML.
std::string value_text(const toml::node& n) {
  if (const auto* s = n.as_string()) return quoted(s->get());
  if (n.is_floating_point()) return fmt::format("{:.6g}", *n.value<double>());
  if (const toml::array* a = n.as_array()) {
    std::string out = "[";
    for (size_t i = 0; i < a->size(); i++) out += (i ? ", " : "") + value_text(*a->get(i));
    return out + "]";
  }
  return config_value_text(n);
}

// A table's keys in its schema's order, with the values schema_to_toml gives them.
template <class S>
std::string table_text(const std::string& header, const Schema<S>& sc, const S& s) {
  const toml::table t = schema_to_toml(sc, s);
  std::string out = header + "\n";
  for (const auto& f : sc.fields) out += fmt::format("{} = {}\n", f.name, value_text(*t.get(f.name)));
  return out;
}

}  // namespace

std::string cluster_toml(const ClusterSpec& c) {
  std::string t;
  for (const Schema<C>* sc : cluster_tables())
    t += (t.empty() ? "" : "\n") + table_text("[" + sc->section + "]", *sc, c);
  for (const GemmRate& g : c.gemm) t += "\n" + table_text("[[gemm]]", gemm_schema(), g);
  for (const CommCurve& a : c.allreduce) t += "\n" + table_text("[[allreduce]]", allreduce_schema(), a);
  for (const CommCurve& w : c.sync) t += "\n" + table_text("[[sync]]", sync_schema(), w);
  if (!c.p2p.bytes.empty()) t += "\n" + table_text("[[p2p]]", p2p_schema(), c.p2p);
  return t;
}

std::vector<SectionDoc> cluster_config_docs() {
  std::vector<SectionDoc> d;
  for (const Schema<C>* sc : cluster_tables()) d.push_back(section_doc(*sc));
  d.push_back(section_doc(gemm_schema()));
  d.push_back(section_doc(allreduce_schema()));
  d.push_back(section_doc(p2p_schema()));
  d.push_back(section_doc(sync_schema()));
  return d;
}

}  // namespace smelt
