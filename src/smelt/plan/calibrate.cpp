// Measuring this machine for the planner (calibrate.hpp).
#include "smelt/plan/calibrate.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "smelt/common/batch.hpp"
#include "smelt/common/clock.hpp"
#include "smelt/common/files.hpp"
#include "smelt/dataset/indexed.hpp"
#include "smelt/dist/communicator.hpp"
#include "smelt/hw/cpu_info.hpp"
#include "smelt/kernels/kernels.hpp"
#include "smelt/machine/gemm_select.hpp"
#include "smelt/model/activations.hpp"
#include "smelt/model/model.hpp"
#include "smelt/model/shard.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace smelt {

namespace {

// GEMM rates at every model's shapes, for every TP split the model allows up to max_ranks.
void measure_gemms(const CalibrateOptions& o, Precision p, ClusterSpec& out) {
  std::set<std::tuple<int64_t, int64_t, int64_t>> seen;
  std::vector<GemmShape> shapes;
  for (const ModelConfig& m : o.models)
    for (int tp = 1; tp <= o.max_ranks; tp++) {
      const ModelShard s = model_shard(tp, 0, 1, 0, {0, m.n_layers});
      if (!shard_validate(m, s)) continue;
      const ShardDims d = shard_dims(m, s);
      for (int rows : o.rows)
        for (const LinearShape& l : linear_shapes(d))
          if (seen.insert({rows, l.IC, l.OC}).second) shapes.push_back({rows, l.IC, l.OC});
    }
  if (shapes.empty()) return;
  const std::vector<double> secs = gemm_measure_shapes(shapes, p, o.threads, o.seconds * shapes.size());
  for (size_t i = 0; i < shapes.size(); i++)
    out.gemm.push_back({shapes[i].rows, shapes[i].in, shapes[i].out, p,
                        6.0 * shapes[i].rows * shapes[i].in * shapes[i].out / secs[i] / 1e9});
}

double square_gemm_gflops(Precision p, int threads) {
  const std::vector<GemmShape> sq = {{1024, 1024, 1024}};
  return 6.0 * 1024 * 1024 * 1024 / gemm_measure_shapes(sq, p, threads, 0.5)[0] / 1e9;
}

// The probe model of the kernel rates and of the process's fixed memory, and its batch rows.
constexpr int kProbeRows = 4;
ModelConfig probe_model() {
  ModelConfig m;
  m.vocab_size = 4096, m.d_model = 256, m.n_layers = 2, m.n_heads = 4, m.n_kv_heads = 4, m.ffn_hidden = 688;
  m.max_seq_len = 256;
  return m;
}

// A probe model's profiled training step: the attention kernels' rate (FLOPs as
// train_flops_per_token counts them) and the other non-GEMM kernels' rate over 12 bytes per
// activation float of the size table (the cost model's convention).
Status measure_probe(int threads, double min_seconds, double& attention_gflops, double& elementwise_gb_s,
                     double& step_s) {
  const ModelConfig m = probe_model();
  const int B = kProbeRows, T = m.max_seq_len;
  Model model;
  if (Status s = model.init(m, B, T, threads, 1); !s) return s;
  Batch b;
  b.B = B, b.T = T;
  const size_t n = (size_t)B * T;
  b.inputs.resize(n), b.targets.resize(n), b.segments.assign(n, 0), b.positions.resize(n), b.sources.assign(n, 0);
  std::mt19937 rng(7);
  for (size_t i = 0; i < n; i++) {
    b.inputs[i] = (int32_t)(rng() % m.vocab_size);
    b.targets[i] = (int32_t)(rng() % m.vocab_size);
    b.positions[i] = (int32_t)(i % T);
  }
  b.target_tokens = n;
  kernels_set_threads(threads);
  model.set_profiling(true);
  float loss = 0;
  int steps = 0;
  double t0 = 0;
  for (int s = 0;; s++) {
    if (s == 1) model.profile_reset(), t0 = now_s();  // the first step warms up
    model.zero_grad();
    if (Status st = model.forward(b, loss, 1.0f); !st) return st;
    model.backward(1.0f);
    if (s >= 1) steps++;
    if (steps >= 3 && now_s() - t0 >= min_seconds) break;
  }
  step_s = (now_s() - t0) / steps;
  double t_att = 0, t_ew = 0;
  for (int op = 0; op < Model::profile_count(); op++) {
    const std::string name = Model::profile_name(op);
    if (name.find("matmul") != std::string::npos || name == "zero_grad") continue;
    (name.find("attention") != std::string::npos ? t_att : t_ew) += model.profile_seconds(op);
  }
  const double att_flops = 12.0 * m.n_layers * n * T * m.n_heads * m.head_size() * steps;
  attention_gflops = t_att > 0 ? att_flops / t_att / 1e9 : 0;
  const double floats = (double)activation_floats(m, B, T);
  elementwise_gb_s = t_ew > 0 ? 12.0 * floats * steps / t_ew / 1e9 : 0;
  return Status::ok();
}

// Triad a = b + s c over arrays far larger than the caches: bytes moved / best time.
double triad_gb_s(int threads) {
  const size_t n = 16u << 20;
  std::vector<float> a(n, 0.f), b(n, 1.f), c(n, 2.f);
  double best = 1e30;
  for (int rep = 0; rep < 5; rep++) {
    const double t0 = now_s();
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; t++)
      ts.emplace_back([&, t] {
        const size_t lo = n * t / threads, hi = n * (t + 1) / threads;
        for (size_t i = lo; i < hi; i++) a[i] = b[i] + 0.5f * c[i];
      });
    for (auto& t : ts) t.join();
    best = std::min(best, now_s() - t0);
  }
  return a[n / 2] == 2.0f ? 3.0 * 4 * n / best / 1e9 : 0;
}

Status disk_write_mb_s(const std::string& dir, double& out) {
  const std::string path = (fs::path(dir) / "disk-probe").string();
  const size_t chunk = 4u << 20, total = 64u << 20;
  std::vector<char> buf(chunk, 'x');
  const double t0 = now_s();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return Status::error(fmt::format("{}: cannot write the disk probe", path));
  for (size_t done = 0; done < total; done += chunk)
    if (::write(fd, buf.data(), chunk) != (ssize_t)chunk) {
      ::close(fd);
      return Status::error(fmt::format("{}: write failed (disk full?)", path));
    }
  ::fsync(fd);
  ::close(fd);
  out = total / 1e6 / (now_s() - t0);
  fs::remove(path);
  return Status::ok();
}

int run_command(const std::string& cmd) {
  spdlog::debug("calibrate: {}", cmd);
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 1;
}

std::string sh_quote(const std::string& s) {
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

// The memory probe's inputs, written once: synthetic token shards and a 3-step fp32 run config of
// the probe model. Returns the shards' prefix and the config's path.
Status write_memory_probe(const std::string& work_dir, std::string& prefix, std::string& cfg) {
  const fs::path dir = fs::path(work_dir) / "mem-probe";
  fs::create_directories(dir);
  prefix = (dir / "tokens").string();
  cfg = (dir / "run.toml").string();
  const ModelConfig m = probe_model();
  IndexedWriter w;
  if (Status s = w.open(prefix, IndexedDType::kUInt16); !s) return s;
  std::mt19937 rng(3);
  std::vector<uint32_t> doc(2048);
  for (int d = 0; d < 64; d++) {
    for (auto& t : doc) t = rng() % m.vocab_size;
    if (Status s = w.add_document(doc); !s) return s;
  }
  if (Status s = w.finish(); !s) return s;
  return files_write_atomic(
      cfg, fmt::format("[model]\nvocab_size = {}\nd_model = {}\nn_layers = {}\nn_heads = {}\nn_kv_heads = {}\n"
                       "ffn_hidden = {}\nmax_seq_len = {}\n[data]\nseq_len = {}\nbatch_size = {}\nappend_eod = false\n"
                       "[train]\nsteps = 3\nsparsity_every = 0\nprecision = \"fp32\"\n[ckpt]\nsave_at_end = false\n",
                       m.vocab_size, m.d_model, m.n_layers, m.n_heads, m.n_kv_heads, m.ffn_hidden, m.max_seq_len,
                       m.max_seq_len, kProbeRows));
}

// A training process's memory besides its plan: a 3-step run of the probe model on the probe's
// shards (write_memory_probe), peak RSS minus the planned bytes of summary.json without their
// process row (the trainer's own measurement at its start; the largest over the ranks).
Status process_memory(const CalibrateOptions& o, const std::string& prefix, const std::string& cfg, bool mpi,
                      const std::string& sets, double& mb) {
  const fs::path dir = fs::path(o.work_dir) / (!mpi ? "mem-1" : sets.empty() ? "mem-mpi" : "mem-mp");
  fs::create_directories(dir);
  const std::string run = (dir / "run").string();
  const std::string cmd = fmt::format("{}{} train --config {} --data {} --run-dir {} --threads {} {} > {} 2>&1",
                                      mpi ? o.mpirun + " -np 2 " : "", sh_quote(o.self), sh_quote(cfg), sh_quote(prefix),
                                      sh_quote(run), o.threads, sets, sh_quote((dir / "log").string()));
  if (run_command(cmd) != 0)
    return Status::error(fmt::format("calibrate: the memory probe run failed; see {}", (dir / "log").string()));
  std::ifstream in(fs::path(run) / "summary.json");
  json j = json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.contains("memory_per_rank"))
    return Status::error(fmt::format("calibrate: {}/summary.json: no memory_per_rank", run));
  mb = 0;
  for (const auto& r : j["memory_per_rank"])
    mb = std::max(mb, (r["peak_rss_bytes"].get<double>() - r["planned_bytes"].get<double>() +
                       r.value("process_bytes", 0.0)) / 1e6);
  return Status::ok();
}

// Every core running a probe process at once against one alone: the node's shared caches, memory
// bandwidth and clock (and, on a virtual machine, whatever shares the host's cores).
Status shared_slowdown(const CalibrateOptions& o, int cores, double alone_s, double& out) {
  out = 1;
  if (cores < 2 || alone_s <= 0) return Status::ok();
  std::string cmd = "(";
  for (int i = 0; i < cores; i++)
    cmd += fmt::format("{} plan --calibrate-probe {} > /dev/null 2>&1 & ", sh_quote(o.self),
                       sh_quote((fs::path(o.work_dir) / fmt::format("probe-{}.json", i)).string()));
  cmd += "wait)";
  if (run_command(cmd) != 0) return Status::error("calibrate: the concurrent probe processes failed");
  double sum = 0;
  for (int i = 0; i < cores; i++) {
    std::ifstream in(fs::path(o.work_dir) / fmt::format("probe-{}.json", i));
    json j = json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.contains("step_s")) return Status::error("calibrate: a probe process wrote no time");
    sum += j["step_s"].get<double>();
  }
  out = std::max(1.0, sum / cores / alone_s);
  return Status::ok();
}

Status comm_curves(const CalibrateOptions& o, ClusterSpec& out) {
  std::vector<int> sizes;
  for (int r = 2; r <= o.max_ranks; r *= 2) sizes.push_back(r);
  if (o.max_ranks > 2 && sizes.back() != o.max_ranks) sizes.push_back(o.max_ranks);
  for (int R : sizes) {
    const std::string path = (fs::path(o.work_dir) / fmt::format("comm-{}.json", R)).string();
    spdlog::info("calibrate: all-reduce and point-to-point curves on {} ranks", R);
    const std::string cmd = fmt::format("{} -np {} {} plan --calibrate-comm {} > {}.log 2>&1", o.mpirun, R,
                                        sh_quote(o.self), sh_quote(path), sh_quote(path));
    if (run_command(cmd) != 0)
      return Status::error(fmt::format("calibrate: '{}' failed; see {}.log", cmd, path));
    std::ifstream in(path);
    json j = json::parse(in, nullptr, false);
    if (j.is_discarded()) return Status::error(fmt::format("calibrate: {}: not JSON", path));
    CommCurve a;
    a.ranks = R;
    a.bytes = j["allreduce"]["bytes"].get<std::vector<double>>();
    a.seconds = j["allreduce"]["seconds"].get<std::vector<double>>();
    out.allreduce.push_back(a);
    if (j.contains("sync")) {
      CommCurve w;
      w.ranks = R;
      w.bytes = j["sync"]["segment_s"].get<std::vector<double>>();
      w.seconds = j["sync"]["wait_s"].get<std::vector<double>>();
      if (std::is_sorted(w.bytes.begin(), w.bytes.end()) &&
          std::adjacent_find(w.bytes.begin(), w.bytes.end()) == w.bytes.end())
        out.sync.push_back(w);
    }
    if (R == 2) {
      out.p2p.bytes = j["p2p"]["bytes"].get<std::vector<double>>();
      out.p2p.seconds = j["p2p"]["seconds"].get<std::vector<double>>();
    }
  }
  return Status::ok();
}

}  // namespace

Status plan_calibrate(const CalibrateOptions& o, ClusterSpec& out) {
  ClusterSpec c;
  const CpuInfo& cpu = cpu_info_measured();
  std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  c.name = fmt::format("this machine: {}", cpu.model);
  c.source = fmt::format("smelt plan --calibrate, {}, {} ({} logical CPUs, {}), {} thread(s) per rank", date, cpu.model,
                         cpu.logical_cpus, cpu.flags(), o.threads);
  c.nodes = 1;
  c.devices_per_node = o.max_ranks;
  c.cores_per_node = cpu.logical_cpus;
  c.threads_per_rank = o.threads;
  c.memory_gb = memory_physical_bytes() * 0.9 / 1e9 / o.max_ranks;
  fs::create_directories(o.work_dir);
  // The GEMM back end the trainer would choose for the first model.
  if (!o.models.empty()) {
    GemmChoice g;
    if (Status s = gemm_select("auto", o.models[0], 1, o.rows.front(), Precision::kFp32, o.threads, g); !s) return s;
  }
  spdlog::info("calibrate: GEMMs ({} model(s), TP splits up to {})", o.models.size(), o.max_ranks);
  c.fp32_gflops = square_gemm_gflops(Precision::kFp32, o.threads);
  measure_gemms(o, Precision::kFp32, c);
  if (gemm_bf16_native()) {
    c.bf16_gflops = square_gemm_gflops(Precision::kBf16, o.threads);
    measure_gemms(o, Precision::kBf16, c);
  }
  spdlog::info("calibrate: a probe model's step (attention and elementwise rates)");
  double alone_s = 0;
  if (Status s = measure_probe(o.threads, 2.0, c.attention_gflops, c.elementwise_gb_s, alone_s); !s) return s;
  spdlog::info("calibrate: the probe on every core at once");
  if (Status s = shared_slowdown(o, cpu.logical_cpus / o.threads, alone_s, c.shared_slowdown); !s) return s;
  c.memory_gb_s = triad_gb_s(o.threads);
  spdlog::info("calibrate: disk");
  if (Status s = disk_write_mb_s(o.work_dir, c.disk_write_mb_s); !s) return s;
  spdlog::info("calibrate: a training process's fixed memory");
  std::string prefix, cfg;
  if (Status s = write_memory_probe(o.work_dir, prefix, cfg); !s) return s;
  if (Status s = process_memory(o, prefix, cfg, false, "", c.process_mb); !s) return s;
  c.mpi_process_mb = c.mp_process_mb = c.process_mb;
  if (!o.mpirun.empty()) {
    if (Status s = process_memory(o, prefix, cfg, true, "", c.mpi_process_mb); !s) return s;
    if (Status s = process_memory(o, prefix, cfg, true, "--set parallel.tp=2", c.mp_process_mb); !s) return s;
    if (Status s = comm_curves(o, c); !s) return s;
    // The link figures from the curves: latency of the smallest message, bandwidth of the largest.
    if (!c.p2p.bytes.empty()) {
      c.intra_latency_us = c.p2p.seconds.front() * 1e6;
      c.intra_gb_s = c.p2p.bytes.back() / c.p2p.seconds.back() / 1e9;
    }
  }
  if (c.intra_gb_s <= 0) c.intra_gb_s = c.memory_gb_s / 2, c.intra_latency_us = 1;
  out = std::move(c);
  return Status::ok();
}

namespace {

// Collectives between compute, as tensor parallelism runs them: every rank computes a segment
// (GEMMs that take about `seg` seconds), then all-reduces a 1 MiB message, over and over with no
// barrier. The all-reduce's time beyond the synchronized curve's (ranks arriving together) is the
// wait for the slowest rank: the skew a segment of compute leaves between the ranks (jitter, the
// core's other work, time-sharing when ranks outnumber cores). Per segment length: the mean over
// the ranks of the compute seconds per segment (x) and of that wait (y, at least 0.1 us).
Status sync_waits(Communicator& comm, const std::vector<double>& curve_s, const std::vector<double>& curve_bytes,
                  std::vector<double>& segment_s, std::vector<double>& wait_s) {
  const int R = comm.size();
  constexpr int M = 64, N = 256, K = 256;  // one unit of work: a (64 x 256) x (256 x 256) GEMM
  std::vector<float> a((size_t)M * K, 0.5f), b((size_t)K * N, 0.25f), c((size_t)M * N, 0.f);
  auto unit = [&] { gemm_f32(false, false, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, c.data(), N); };
  for (int i = 0; i < 50; i++) unit();  // warm up
  double t0 = now_s();
  for (int i = 0; i < 200; i++) unit();
  double unit_s = (now_s() - t0) / 200;
  if (Status s = comm.allreduce_sum(&unit_s, 1); !s) return s;  // every rank runs the same count
  unit_s /= R;
  const int64_t n = (1 << 20) / 4;
  std::vector<float> msg((size_t)n, 1.0f);
  CommCurve synced;
  synced.bytes = curve_bytes, synced.seconds = curve_s;
  const double msg_s = synced.at(4.0 * n);
  for (double seg : {0.5e-3, 2e-3, 8e-3, 32e-3}) {
    const int units = std::max(1, (int)std::lround(seg / unit_s));
    const int reps = std::max(8, (int)(0.5 / seg));
    if (Status s = comm.barrier(); !s) return s;
    double v[2] = {0, 0};  // compute seconds, collective seconds
    for (int r = 0; r < reps; r++) {
      t0 = now_s();
      for (int u = 0; u < units; u++) unit();
      const double t1 = now_s();
      if (Status s = comm.allreduce_sum(msg.data(), n); !s) return s;
      v[0] += t1 - t0, v[1] += now_s() - t1;
    }
    if (Status s = comm.allreduce_sum(v, 2); !s) return s;
    segment_s.push_back(v[0] / R / reps);
    wait_s.push_back(std::max(1e-7, v[1] / R / reps - msg_s));
  }
  return Status::ok();
}

}  // namespace

Status plan_calibrate_comm(const std::string& out_path) {
  std::unique_ptr<Communicator> comm;
  DistConfig dc;
  if (Status s = dist_create(dc, comm); !s) return s;
  const int R = comm->size(), me = comm->rank();
  if (R < 2) return Status::error("plan --calibrate-comm: run it under mpirun with 2 or more ranks");
  std::vector<double> bytes, ar, p2p;
  // Messages from a pool four times the largest, each repetition at the next place in it: a
  // training step's messages are not in cache when they are sent.
  const size_t largest = (size_t)(64u << 20) / 4;
  std::vector<float> pool(4 * largest, 1.0f);
  size_t at = 0;
  auto buf_for = [&](int64_t n) {
    if (at + (size_t)n > pool.size()) at = 0;
    float* p = pool.data() + at;
    at += (size_t)n;
    return p;
  };
  for (double b = 4096; b <= (64u << 20); b *= 4) bytes.push_back(b);
  auto timed = [&](auto&& op) -> Status {  // the median of enough repetitions (every rank agrees on the count)
    std::vector<double> ts;
    const double t_end = now_s() + 0.25;
    for (int i = 0; i < 200; i++) {
      if (Status s = comm->barrier(); !s) return s;
      const double t0 = now_s();
      if (Status s = op(); !s) return s;
      ts.push_back(now_s() - t0);
      double stop = (ts.size() >= 3 && now_s() > t_end) ? 1.0 : 0.0;
      if (Status s = comm->allreduce_sum(&stop, 1); !s) return s;
      if (stop > 0) break;
    }
    std::sort(ts.begin(), ts.end());
    ar.push_back(ts[ts.size() / 2]);
    return Status::ok();
  };
  for (double b : bytes) {
    const int64_t n = (int64_t)(b / 4);
    if (Status s = timed([&] { return comm->allreduce_sum(buf_for(n), n); }); !s) return s;
  }
  std::vector<double> all = ar;
  ar.clear();
  for (double b : bytes) {
    const int64_t n = (int64_t)(b / 4);
    // A ping-pong between ranks 0 and 1; the time of one message is half the round trip.
    if (Status s = timed([&]() -> Status {
          float* buf = buf_for(n);
          if (me == 0) {
            if (Status s = comm->send_async(buf, n, 1, 1); !s) return s;
            if (Status s = comm->wait_sends(); !s) return s;
            return comm->recv(buf, n, 1, 2);
          }
          if (me == 1) {
            if (Status s = comm->recv(buf, n, 0, 1); !s) return s;
            if (Status s = comm->send_async(buf, n, 0, 2); !s) return s;
            return comm->wait_sends();
          }
          return Status::ok();
        });
        !s)
      return s;
  }
  for (double& t : ar) t /= 2;
  std::vector<double> segment_s, wait_s;
  if (Status s = sync_waits(*comm, all, bytes, segment_s, wait_s); !s) return s;
  if (me != 0) return Status::ok();
  json j = {{"ranks", R},
            {"allreduce", {{"bytes", bytes}, {"seconds", all}}},
            {"p2p", {{"bytes", bytes}, {"seconds", ar}}},
            {"sync", {{"segment_s", segment_s}, {"wait_s", wait_s}}}};
  return files_write_atomic(out_path, j.dump(1) + "\n");
}

Status plan_calibrate_probe(const std::string& out_path) {
  double att = 0, ew = 0, step_s = 0;
  if (Status s = measure_probe(1, 2.0, att, ew, step_s); !s) return s;
  return files_write_atomic(out_path, json{{"step_s", step_s}}.dump() + "\n");
}

}  // namespace smelt
