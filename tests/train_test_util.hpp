// Shared fixtures of the training tests: a token shard of real text (one token per byte) and the
// run's metrics.jsonl read back, with or without the timing fields (the only ones that differ
// between identical runs). Not product code.
#pragma once
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/dataset/indexed.hpp"
#include "smelt/dataset/lineage.hpp"
#include "test_files.hpp"

namespace smelt::test {

// An empty folder for this test under the temp dir: PREFIX_PID_TESTNAME.
inline std::filesystem::path fresh_test_dir(const std::string& prefix) {
  const std::filesystem::path d =
      std::filesystem::temp_directory_path() /
      (prefix + "_" + std::to_string(::getpid()) + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

// The [model] section of the byte model the training tests use: vocab 260 (256 bytes and EOD
// 256), d 64, 2 layers, 4 heads, 2 KV heads, SwiGLU 176.
inline std::string byte_model_toml(int max_seq_len, bool tied) {
  return "\n[model]\nvocab_size = 260\nd_model = 64\nn_layers = 2\nn_heads = 4\nn_kv_heads = 2\nffn_hidden = 176\n"
         "max_seq_len = " + std::to_string(max_seq_len) + "\n" + (tied ? "" : "tie_embeddings = false\n");
}

// One document per line of 8 bytes or more, one token per byte (ids < 256, no EOD in the shard);
// PREFIX.docs names each document "FILE:LINE".
inline void write_byte_shard(const std::string& prefix, const std::vector<std::string>& files) {
  IndexedWriter w;
  LineageWriter lin;
  ASSERT_TRUE(w.open(prefix, IndexedDType::kUInt16).is_ok());
  ASSERT_TRUE(lin.open(lineage_path(prefix)).is_ok());
  for (const auto& f : files) {
    std::istringstream in(read_file(f));
    std::string line;
    for (int n = 1; std::getline(in, line); n++) {
      if (line.size() < 8) continue;
      std::vector<uint32_t> ids(line.begin(), line.end());
      for (auto& x : ids) x &= 0xFF;
      ASSERT_TRUE(w.add_document(ids).is_ok());
      ASSERT_TRUE(lin.add(std::filesystem::path(f).filename().string() + ":" + std::to_string(n)).is_ok());
    }
  }
  ASSERT_TRUE(w.finish().is_ok());
  ASSERT_TRUE(lin.finish().is_ok());
}

// mpirun as the multi-rank tests start it: as root in containers, more ranks than cores, shared
// memory between the ranks without the single-copy path that containers refuse.
inline constexpr const char* kMpirun =
    "mpirun --allow-run-as-root --oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none";

// A metrics line without its timing fields.
inline nlohmann::json drop_timing(nlohmann::json j) {
  for (const char* k : {"tokens_per_s", "mfu", "mfu_peak", "step_ms", "data_wait_ms", "fetch_ms", "ckpt_stall_ms",
                        "ckpt_write_mb_s", "ckpt_write_mb", "eval_tokens_per_s", "forward_ms", "allreduce_ms", "allreduce_wait_ms", "allreduce_bytes",
                        "allreduce_buckets", "disk_mb_s", "rank_compute_ms", "tp_ms", "pp_wait_ms",
                        "pp_idle_fraction"})
    j.erase(k);
  return j;
}

// RUN/metrics.jsonl, one object per line: timing fields dropped unless keep_timing, vital-sign
// events unless keep_vital_signs.
inline std::vector<nlohmann::json> read_metrics(const std::filesystem::path& run_dir, bool keep_timing = false,
                                                 bool keep_vital_signs = false) {
  std::vector<nlohmann::json> out;
  std::istringstream in(read_file((run_dir / "metrics.jsonl").string()));
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    // (a vital sign's event can come from a timing sign: a busy machine adds one)
    if (!keep_vital_signs && j.value("event", "") == "vital_sign") continue;
    out.push_back(keep_timing ? j : drop_timing(j));
  }
  return out;
}

// Tensor `name` (fp32) of the newest valid checkpoint of `run_dir`; empty (and a failure) when absent.
inline std::vector<float> ckpt_weights(const std::filesystem::path& run_dir, const std::string& name) {
  std::string dir;
  EXPECT_TRUE(ckpt_find_latest(run_dir.string(), dir).is_ok()) << run_dir;
  CkptManifest m;
  EXPECT_TRUE(ckpt_read_manifest(dir, m).is_ok()) << dir;
  const CkptTensorInfo* t = m.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return {};
  std::vector<float> v(t->bytes / 4);
  EXPECT_TRUE(ckpt_load_tensor(dir, m, name, v.data(), (int64_t)v.size()).is_ok());
  return v;
}

// A job started with `sh -c cmd` (exec mpirun ... smelt train --config CONFIG ... --run-dir RUN),
// one of whose ranks is killed (SIGKILL) once RUN has a checkpoint: the newest `smelt train`
// process with that config (ranks' command lines start with the binary). ended: the job ended by
// itself within a minute after (else it was killed here); rank: the victim's OMPI rank.
struct KilledJob {
  bool ended = false;
  int status = 0;
  int rank = -1;
};
inline KilledJob kill_a_rank(const std::string& cmd, const std::filesystem::path& run, const std::string& binary,
                             const std::string& config) {
  KilledJob k;
  pid_t job = fork();
  if (job == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), (char*)nullptr);
    _exit(127);
  }
  for (int i = 0; i < 6000 && !std::filesystem::exists(run / "checkpoints" / "latest"); i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const std::string pids = (run.parent_path() / "pids").string();
  std::system(("pgrep -n -f '^" + binary + " train --config " + config + "' > " + pids).c_str());
  const int victim = std::atoi(read_file(pids).c_str());
  if (victim > 0) {
    const std::string env = read_file("/proc/" + std::to_string(victim) + "/environ");
    const size_t at = env.find("OMPI_COMM_WORLD_RANK=");
    if (at != std::string::npos) k.rank = std::atoi(env.c_str() + at + 21);
    kill(victim, SIGKILL);
  }
  for (int i = 0; i < 600 && !k.ended; i++) {
    k.ended = waitpid(job, &k.status, WNOHANG) == job;
    if (!k.ended) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!k.ended) {
    kill(job, SIGKILL);
    waitpid(job, &k.status, 0);
  }
  return k;
}

}  // namespace smelt::test
