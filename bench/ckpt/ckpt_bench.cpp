// Checkpoint benchmark (bench/RESULTS.md, "ckpt"): the disk's own sequential write ceiling
// (write + fsync of one large file), then the same state saved synchronously (ckpt_save) and
// through CkptWriter (submit = the stall, the background write timed apart), and what a save adds
// to a step whose compute keeps every core busy. Prints the stalls, their ratio (target: async <=
// 10% of sync) and the write rate against the ceiling (target >= 80%). Not a test: numbers depend
// on the machine and on what else runs.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "smelt/ckpt/async_writer.hpp"
#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/ckpt/crc32c.hpp"

namespace fs = std::filesystem;
using namespace smelt;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// 8 MiB writes + fsync: what the disk gives a plain sequential writer, through the page cache or
// with O_DIRECT from an aligned buffer (the ceiling is the better of the two).
double disk_ceiling_mb_s(const std::string& path, int64_t bytes, bool direct) {
  const size_t chunk = 8 << 20;
  char* buf = static_cast<char*>(std::aligned_alloc(4096, chunk));
  for (size_t i = 0; i < chunk; ++i) buf[i] = static_cast<char>(i * 131 + 7);
  auto t0 = Clock::now();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | (direct ? O_DIRECT : 0), 0644);
  if (fd < 0) {
    std::free(buf);
    return 0;
  }
  for (int64_t left = bytes; left > 0; left -= static_cast<int64_t>(chunk))
    if (::write(fd, buf, chunk) != static_cast<ssize_t>(chunk)) break;
  ::fsync(fd);
  ::close(fd);
  double ms = ms_since(t0);
  ::unlink(path.c_str());
  std::free(buf);
  return bytes / 1e6 / (ms / 1e3);
}

// Stand-in for a training step's forward/backward: `threads` threads of FMA work on small hot
// buffers (compute-bound like the GEMMs), `iters` rounds each.
double compute(int threads, int64_t iters) {
  std::vector<std::thread> ts;
  std::vector<float> sinks(static_cast<size_t>(threads) * 16);
  for (int k = 0; k < threads; ++k)
    ts.emplace_back([&, k] {
      float acc[16] = {}, x[16];
      for (int i = 0; i < 16; ++i) x[i] = 1.0f + i * 1e-6f;
      for (int64_t it = 0; it < iters; ++it)
        for (int i = 0; i < 16; ++i) acc[i] = acc[i] * 0.999999f + x[i];
      for (int i = 0; i < 16; ++i) sinks[static_cast<size_t>(k * 16 + i)] = acc[i];
    });
  for (auto& t : ts) t.join();
  return sinks[0];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ckpt_bench: synchronous vs asynchronous checkpoint saves against the disk's write ceiling"};
  std::string dir = (fs::temp_directory_path() / "smelt_ckpt_bench").string();
  double mb = 400;
  int n_tensors = 64, reps = 3, threads = 2;
  double step_ms = 1000;
  app.add_option("--dir", dir, "scratch folder on the disk to measure (removed at the end)");
  app.add_option("--mb", mb, "checkpoint size in MB (default 400)");
  app.add_option("--tensors", n_tensors, "number of tensors (default 64)");
  app.add_option("--reps", reps, "repetitions of each measurement; medians are printed (default 3)");
  app.add_option("--step-ms", step_ms, "simulated forward/backward time for the deferred copy (default 1000)");
  app.add_option("--threads", threads, "threads of the simulated forward/backward (default 2)");
  CLI11_PARSE(app, argc, argv);

  fs::remove_all(dir);
  fs::create_directories(dir);
  int64_t total_floats = static_cast<int64_t>(mb * 1e6 / 4);
  int64_t per = total_floats / n_tensors;
  std::vector<float> state(static_cast<size_t>(per * n_tensors));
  for (size_t i = 0; i < state.size(); ++i) state[i] = static_cast<float>(i % 65521) * 1e-3f;
  int64_t bytes = static_cast<int64_t>(state.size()) * 4;
  CkptSaveRequest req;
  req.config_toml = "[model]\n";
  req.state = {{"bench", true}};
  for (int k = 0; k < n_tensors; ++k)
    req.tensors.push_back({"t." + std::to_string(k), {per}, state.data() + k * per});
  std::printf("checkpoint: %d tensors, %.1f MB; crc32c %s; %d reps (medians)\n", n_tensors, bytes / 1e6,
              crc32c_hw_available() ? "sse4.2" : "software", reps);

  {  // memory copy rate: the floor of the async stall
    std::vector<float> dst(state.size());
    std::memcpy(dst.data(), state.data(), static_cast<size_t>(bytes));  // fault pages in
    auto t0 = Clock::now();
    std::memcpy(dst.data(), state.data(), static_cast<size_t>(bytes));
    std::printf("memcpy:            %8.0f MB/s\n", bytes / 1e6 / (ms_since(t0) / 1e3));
    t0 = Clock::now();
    volatile uint32_t crc = crc32c_update(0, state.data(), static_cast<size_t>(bytes));
    (void)crc;
    std::printf("crc32c:            %8.0f MB/s\n", bytes / 1e6 / (ms_since(t0) / 1e3));
  }
  std::vector<double> ceil_buffered, ceil_direct;
  for (int i = 0; i < reps; ++i) {
    ceil_buffered.push_back(disk_ceiling_mb_s(dir + "/ceiling.bin", bytes, false));
    ceil_direct.push_back(disk_ceiling_mb_s(dir + "/ceiling.bin", bytes, true));
  }
  double ceiling = std::max(*std::max_element(ceil_buffered.begin(), ceil_buffered.end()),
                            *std::max_element(ceil_direct.begin(), ceil_direct.end()));  // the best the disk gave
  std::printf("disk ceiling:      %8.0f MB/s  (best of %d x 2: write + fsync of one %.0f MB file; medians %.0f "
              "buffered, %.0f O_DIRECT)\n",
              ceiling, reps, bytes / 1e6, median(ceil_buffered), median(ceil_direct));
  std::string run = dir + "/run";
  std::vector<double> sync_ms, sync_rate;
  for (int i = 0; i < reps; ++i) {
    req.step = i + 1;
    CkptSaveStats st;
    auto t0 = Clock::now();
    if (Status s = ckpt_save(run, req, &st); !s) {
      std::fprintf(stderr, "%s\n", s.message().c_str());
      return 1;
    }
    sync_ms.push_back(ms_since(t0));
    sync_rate.push_back(st.write_mb_s);
    ckpt_retain(run, 1, 0);
  }
  double sync_stall = median(sync_ms);
  std::printf("sync save:         %8.1f ms stall, %6.0f MB/s = %5.1f%% of the disk ceiling\n", sync_stall,
              median(sync_rate), 100 * median(sync_rate) / ceiling);

  std::vector<double> async_ms, async_rate, async_write_ms;
  {
    CkptWriter w(run);
    w.reserve(static_cast<int64_t>(state.size()));
    for (int i = 0; i < reps; ++i) {
      req.step = 100 + i;
      auto t0 = Clock::now();
      if (Status s = w.submit(req); !s) {
        std::fprintf(stderr, "%s\n", s.message().c_str());
        return 1;
      }
      async_ms.push_back(ms_since(t0));
      if (Status s = w.wait(); !s) {  // the trainer would be computing here
        std::fprintf(stderr, "%s\n", s.message().c_str());
        return 1;
      }
      CkptSaveStats st = w.last_stats();
      async_rate.push_back(st.write_mb_s);
      async_write_ms.push_back(st.write_ms);
      ckpt_retain(run, 1, 0);
    }
  }
  double async_stall = median(async_ms);
  std::printf("async submit:      %8.1f ms stall (copy into staging); background save %.0f ms, %6.0f MB/s = %5.1f%% "
              "of the disk ceiling\n",
              async_stall, median(async_write_ms), median(async_rate), 100 * median(async_rate) / ceiling);
  // The cost to training when the trainer keeps every core busy: a simulated forward/backward
  // (--step-ms on --threads threads) runs right after the submit, so the copy (kDeferred) and the
  // background save's own CPU work (CRC, copies into the page cache) compete with it. Overhead =
  // that step's time minus the same step alone.
  int64_t iters = 1 << 20;
  auto tc = Clock::now();
  compute(threads, iters);
  iters = static_cast<int64_t>(iters * step_ms / std::max(1.0, ms_since(tc)));
  std::vector<double> alone, with_now, with_def, def_blocked;
  {
    CkptWriter w(run);
    w.reserve(static_cast<int64_t>(state.size()));
    for (int i = 0; i < reps; ++i) {
      auto t0 = Clock::now();
      compute(threads, iters);
      alone.push_back(ms_since(t0));
      for (CkptCopy mode : {CkptCopy::kNow, CkptCopy::kDeferred}) {
        req.step = 200 + 2 * i + (mode == CkptCopy::kDeferred);
        t0 = Clock::now();
        if (Status s = w.submit(req, mode); !s) {
          std::fprintf(stderr, "%s\n", s.message().c_str());
          return 1;
        }
        compute(threads, iters);
        w.staged();
        (mode == CkptCopy::kNow ? with_now : with_def).push_back(ms_since(t0));
        double staged_ms = w.last_staged_wait_ms();
        if (Status s = w.wait(); !s) {
          std::fprintf(stderr, "%s\n", s.message().c_str());
          return 1;
        }
        if (mode == CkptCopy::kDeferred) def_blocked.push_back(w.last_stats().stall_ms + staged_ms);
        ckpt_retain(run, 1, 0);
      }
    }
  }
  double over_now = std::max(0.0, median(with_now) - median(alone));
  double over_def = std::max(0.0, median(with_def) - median(alone));
  std::printf("busy-core step:    %8.0f ms alone on %d threads; with a save behind it: +%.0f ms (submit kNow, %.0f%% of "
              "sync), +%.0f ms (kDeferred, %.0f%% of sync)\n",
              median(alone), threads, over_now, 100 * over_now / sync_stall, over_def, 100 * over_def / sync_stall);
  std::printf("deferred submit:   %8.2f ms the caller was blocked (submit + staged()), %.1f%% of sync\n",
              median(def_blocked), 100 * median(def_blocked) / sync_stall);
  std::printf("stall ratio async/sync: %.1f%% (target <= 10%%); async write rate %.1f%% of ceiling (target >= 80%%)\n",
              100 * async_stall / sync_stall, 100 * median(async_rate) / ceiling);
  fs::remove_all(dir);
  return 0;
}
