// `smelt plan --calibrate`: measures this machine into a cluster file (cluster.hpp). What the
// cost model needs: GEMM rates at the given models' shapes (every TP split up to the rank count,
// fp32 and, where the CPU has it, bf16), the GEMM rate of a large square GEMM, the attention and
// elementwise kernels' rates from a probe model's profiled step, the triad memory bandwidth, the
// disk's write rate, a training process's fixed memory (1 rank and under mpirun: peak RSS minus
// the run's plan), and the all-reduce and point-to-point curves on loopback (mpirun of
// `smelt plan --calibrate-comm`). Not the cost model (cost.hpp).
#pragma once

#include <string>
#include <vector>

#include "smelt/common/status.hpp"
#include "smelt/model/config.hpp"
#include "smelt/plan/cluster.hpp"

namespace smelt {

struct CalibrateOptions {
  std::vector<ModelConfig> models;  // GEMM shapes to measure (none: the square GEMM only)
  std::vector<int> rows = {512};    // rows per GEMM (micro-batch rows x seq)
  int max_ranks = 4;                // TP splits and all-reduce curves up to this many ranks
  int threads = 1;                  // per rank
  std::string work_dir;             // scratch (token shards, runs, the disk probe)
  std::string mpirun;               // the launcher command line ("" : no MPI measurements)
  std::string self;                 // this binary (smelt-full), for the child runs
  double seconds = 0.3;             // per GEMM measurement
};

// Fills out (name, source, one node of max_ranks devices, the measured figures). Progress on the
// log (spdlog info).
Status plan_calibrate(const CalibrateOptions& o, ClusterSpec& out);

// Under mpirun: every rank takes part; rank 0 writes the curves as JSON to out_path
// ({"ranks": R, "allreduce": {"bytes": [...], "seconds": [...]}, "p2p": {...}}). p2p: ranks 0
// and 1 (a ping-pong's half), the other ranks idle in a barrier.
Status plan_calibrate_comm(const std::string& out_path);
// One probe process of the shared-core measurement: the probe model's step time, as JSON
// {"step_s": ...}, in out_path.
Status plan_calibrate_probe(const std::string& out_path);

}  // namespace smelt
