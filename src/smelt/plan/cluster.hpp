// A cluster as `smelt plan` sees it (docs/plan.md): nodes of devices (one rank each), each
// device's memory and rates, the links inside and between nodes, the disk, a training process's
// fixed memory; and, when `smelt plan --calibrate` measured them on this machine, GEMM rates at
// given shapes and the all-reduce and point-to-point time curves (bytes -> seconds). Read from and
// written to TOML (configs/clusters/*.toml). Each table has a field table in cluster.cpp (the keys,
// their defaults and limits; docs/plan.md lists them); the rules between keys are in cluster_parse.
// Not the cost model (cost.hpp).
//
//   [cluster]  name, source, nodes, devices_per_node, cores_per_node (CPU nodes: the cores the
//              node's ranks share; 0: every device is its own processor), threads_per_rank,
//              memory_gb (per device, what a rank may use)
//   [compute]  fp32_gflops, bf16_gflops (per device, GEMMs at large shapes), attention_gflops
//              (FLOPs as train_flops_per_token counts them), elementwise_gb_s (the non-GEMM kernels'
//              rate over the bytes the cost model counts), memory_gb_s (triad bandwidth, reported),
//              shared_slowdown (CPU nodes: compute time when every core runs a rank at once, over
//              one rank alone; 1 or absent: none)
//   [network]  intra_gb_s, intra_latency_us, inter_gb_s, inter_latency_us (per rank, one direction)
//   [disk]     write_mb_s
//   [runtime]  process_mb, mpi_process_mb, mp_process_mb (resident memory a training process has
//              besides its plan: one process; a rank under mpirun; a rank with TP or PP sub-groups)
//   [[gemm]]       rows, in, out, precision ("fp32" | "bf16"), gflops: measured forward+backward rates
//   [[allreduce]]  ranks, bytes = [...], seconds = [...]: one measured curve per group size
//   [[p2p]]        bytes = [...], seconds = [...]: one send and its receive
//   [[sync]]       ranks, segment_s = [...], wait_s = [...]: per group size, what an all-reduce
//                  waits beyond its curve when the ranks come to it from segment_s seconds of
//                  compute each (their skew); a curve of the same kind, segment -> wait
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "smelt/common/status.hpp"
#include "smelt/hw/precision.hpp"

namespace smelt {

struct GemmRate {
  int64_t rows = 0, in = 0, out = 0;
  Precision precision = Precision::kFp32;
  double gflops = 0;
};

// Time by message size, measured: linear interpolation between points, the two nearest points'
// line beyond the ends (never below the first point's time).
struct CommCurve {
  int ranks = 2;
  std::vector<double> bytes, seconds;
  double at(double b) const;
};

struct ClusterSpec {
  std::string name, source;
  int nodes = 1, devices_per_node = 1, cores_per_node = 0, threads_per_rank = 1;
  double memory_gb = 0;
  double fp32_gflops = 0, bf16_gflops = 0, attention_gflops = 0, elementwise_gb_s = 0, memory_gb_s = 0;
  double shared_slowdown = 1;
  double intra_gb_s = 0, intra_latency_us = 0, inter_gb_s = 0, inter_latency_us = 0;
  double disk_write_mb_s = 0;
  double process_mb = 0, mpi_process_mb = 0, mp_process_mb = 0;  // mp 0: as mpi
  std::vector<GemmRate> gemm;
  std::vector<CommCurve> allreduce;  // by group size
  CommCurve p2p;                     // ranks unused
  std::vector<CommCurve> sync;       // by group size; bytes: a rank's compute seconds between two
                                     // collectives, seconds: the mean wait for the slowest rank
  int devices() const { return nodes * devices_per_node; }
};

Status cluster_load(const std::string& path, ClusterSpec& out);
Status cluster_parse(const std::string& toml_text, const std::string& name_for_errors, ClusterSpec& out);
std::string cluster_toml(const ClusterSpec& c);  // cluster_parse(cluster_toml(c)) == c

// The field tables' docs: [cluster], [compute], [network], [disk], [runtime], then one entry of
// [[gemm]], [[allreduce]], [[p2p]] and [[sync]] (tests/common/config_docs_test.cpp).
struct SectionDoc;
std::vector<SectionDoc> cluster_config_docs();

}  // namespace smelt
