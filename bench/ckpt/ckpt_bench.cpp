// Checkpoint benchmark (bench/RESULTS.md, "ckpt"): the disk's own sequential write ceiling (write
// + fsync of one file of the checkpoint's size: buffered, and O_DIRECT from 2 MiB and from 4 KiB
// pages), measured in the same rounds
// as the saves (ceiling, saves, ceiling, saves, ...) so both see the same disk state; a synchronous
// save (ckpt_save), the safetensors file alone (no commit), CkptWriter (submit = the stall, the
// background save timed apart) and a tiny save (the commit's fixed cost); then what a save adds
// to a step whose compute keeps every core busy. Prints medians and bests, each save's rate
// against the ceiling of its own round (target >= 80%) and the stall ratio (target: async <= 10%
// of sync). Not a test: numbers depend on the machine and on what else runs.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "smelt/ckpt/async_writer.hpp"
#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/ckpt/crc32c.hpp"
#include "smelt/ckpt/safetensors.hpp"

namespace fs = std::filesystem;
using namespace smelt;
using Clock = std::chrono::steady_clock;

namespace {

// CPU time of the whole process (user + system), ms.
double cpu_ms() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e3;
}

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
std::string fmt_int(double x) { return std::to_string(static_cast<int64_t>(x + 0.5)); }
double best(const std::vector<double>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }

// A plain sequential writer: `bytes` bytes of `src` (4 KiB aligned, rounded up to 4 KiB) in 8 MiB
// writes, then fsync, through the page cache or with O_DIRECT. MB/s from open to close.
double plain_write_mb_s(const std::string& path, const char* src, int64_t bytes, bool direct) {
  const int64_t chunk = 8 << 20;
  int64_t total = (bytes + 4095) / 4096 * 4096;
  auto t0 = Clock::now();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | (direct ? O_DIRECT : 0), 0644);
  if (fd < 0) return 0;
  bool ok = true;
  for (int64_t off = 0; ok && off < total; off += chunk) {
    size_t len = static_cast<size_t>(std::min(chunk, total - off));
    ok = ::write(fd, src + off, len) == static_cast<ssize_t>(len);
  }
  ok = ::fsync(fd) == 0 && ok;
  ::close(fd);
  double ms = ms_since(t0);
  ::unlink(path.c_str());
  return ok ? total / 1e6 / (ms / 1e3) : 0;
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

// Before each timed write: commit what the previous one left (its deletion's journal, dirty
// metadata), so no measurement pays for the one before it.
void settle() { ::sync(); }

bool check(const Status& s) {
  if (!s) std::fprintf(stderr, "%s\n", s.message().c_str());
  return static_cast<bool>(s);
}

// One measured quantity over the rounds: MB/s, and the ratio to the ceiling of the same round.
struct Series {
  std::vector<double> rate, ratio;
  void add(double r, double ceiling) {
    rate.push_back(r);
    ratio.push_back(ceiling > 0 ? r / ceiling : 0);
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ckpt_bench: synchronous vs asynchronous checkpoint saves against the disk's write ceiling"};
  std::string dir = (fs::temp_directory_path() / "smelt_ckpt_bench").string();
  double mb = 400;
  int n_tensors = 64, reps = 5, busy_reps = 3, threads = 2;
  double step_ms = 1000;
  app.add_option("--dir", dir, "scratch folder on the disk to measure (removed at the end)");
  app.add_option("--mb", mb, "checkpoint size in MB (default 400)");
  app.add_option("--tensors", n_tensors, "number of tensors (default 64)");
  app.add_option("--reps", reps, "rounds of ceiling + saves (default 5)");
  app.add_option("--busy-reps", busy_reps, "repetitions of the busy-core step (default 3; 0 skips it)");
  app.add_option("--step-ms", step_ms, "simulated forward/backward time for the busy-core step (default 1000)");
  app.add_option("--threads", threads, "threads of the simulated forward/backward (default 2)");
  CLI11_PARSE(app, argc, argv);

  fs::remove_all(dir);
  fs::create_directories(dir);
  int64_t total_floats = static_cast<int64_t>(mb * 1e6 / 4);
  int64_t per = total_floats / n_tensors;
  std::vector<float> state(static_cast<size_t>(per * n_tensors));  // the trainer's memory: not 4 KiB aligned
  for (size_t i = 0; i < state.size(); ++i) state[i] = static_cast<float>(i % 65521) * 1e-3f;
  int64_t bytes = static_cast<int64_t>(state.size()) * 4;
  CkptSaveRequest req;
  req.config_toml = "[model]\n";
  req.state = {{"bench", true}};
  for (int k = 0; k < n_tensors; ++k)
    req.tensors.push_back({"t." + std::to_string(k), {per}, state.data() + k * per});
  std::printf("checkpoint: %d tensors, %.1f MB; crc32c %s; %d rounds\n", n_tensors, bytes / 1e6,
              crc32c_hw_available() ? "sse4.2" : "software", reps);

  // The same bytes in aligned buffers: the plain writers' sources, and a staging buffer laid out
  // like the file (what CkptWriter hands the safetensors writer). One in 2 MiB transparent huge
  // pages, as CkptWriter's staging buffers (O_DIRECT pins every page of every write: on the
  // benchmark VM huge pages write much faster), one in 4 KiB pages; the ceiling takes the best.
  const int64_t huge = 2 << 20;
  int64_t image_bytes = (bytes + huge - 1) / huge * huge;
  char* image = static_cast<char*>(std::aligned_alloc(huge, static_cast<size_t>(image_bytes)));
  char* image_4k = static_cast<char*>(std::aligned_alloc(huge, static_cast<size_t>(image_bytes)));
  ::madvise(image, static_cast<size_t>(image_bytes), MADV_HUGEPAGE);
  ::madvise(image_4k, static_cast<size_t>(image_bytes), MADV_NOHUGEPAGE);
  for (char* b : {image, image_4k}) {
    std::memset(b, 0, static_cast<size_t>(image_bytes));
    std::memcpy(b, state.data(), static_cast<size_t>(bytes));
  }
  {  // CPU rates of the pieces of a save (memory to memory, one thread)
    std::vector<char> dst(static_cast<size_t>(bytes));
    std::memcpy(dst.data(), state.data(), static_cast<size_t>(bytes));  // fault pages in
    auto t0 = Clock::now();
    std::memcpy(dst.data(), state.data(), static_cast<size_t>(bytes));
    double copy = bytes / 1e6 / (ms_since(t0) / 1e3);
    t0 = Clock::now();
    volatile uint32_t crc = crc32c_update(0, state.data(), static_cast<size_t>(bytes));
    double crc_rate = bytes / 1e6 / (ms_since(t0) / 1e3);
    // copy + CRC in 4 MiB pieces, as the writer's buffers: two passes and the fused one
    const size_t piece = 4 << 20;
    char* buf = static_cast<char*>(std::aligned_alloc(4096, piece));
    const char* src = reinterpret_cast<const char*>(state.data());
    t0 = Clock::now();
    uint32_t c2 = 0;
    for (int64_t off = 0; off < bytes; off += piece) {
      size_t n = static_cast<size_t>(std::min<int64_t>(piece, bytes - off));
      std::memcpy(buf, src + off, n);
      c2 = crc32c_update(c2, buf, n);
    }
    double two_pass = bytes / 1e6 / (ms_since(t0) / 1e3);
    t0 = Clock::now();
    uint32_t c1 = 0;
    for (int64_t off = 0; off < bytes; off += piece) {
      size_t n = static_cast<size_t>(std::min<int64_t>(piece, bytes - off));
      c1 = crc32c_copy(c1, buf, src + off, n);
    }
    double fused = bytes / 1e6 / (ms_since(t0) / 1e3);
    std::free(buf);
    std::printf("cpu (1 thread):    memcpy %.0f MB/s, crc32c %.0f MB/s, memcpy+crc32c into 4 MiB %.0f MB/s, "
                "fused crc32c_copy %.0f MB/s%s\n",
                copy, crc_rate, two_pass, fused, c1 == c2 && c1 == crc ? "" : " (CRC MISMATCH)");
  }

  // Rounds: ceiling (O_DIRECT, buffered), sync save, the file alone (from the trainer's memory and
  // from an aligned image), async save. A save's rate counts every byte it writes over its whole
  // time (ckpt_save: create, write, fsync, commit with manifest, renames and `latest`).
  std::string run = dir + "/run";
  Series c_direct, c_direct_4k, c_buffered, ceil, sync_s, file_copy, file_image, async_s;
  std::vector<double> sync_ms, async_ms, async_write_ms, fixed_ms, sync_cpu, submit_cpu, async_cpu;
  {
    CkptWriter w(run);
    w.reserve(static_cast<int64_t>(state.size()));
    for (int i = 0; i < reps; ++i) {
      settle();
      double d = plain_write_mb_s(dir + "/ceiling.bin", image, bytes, true);
      settle();
      double d4 = plain_write_mb_s(dir + "/ceiling.bin", image_4k, bytes, true);
      settle();
      double b = plain_write_mb_s(dir + "/ceiling.bin", image, bytes, false);
      double c = std::max({d, d4, b});
      c_direct.add(d, c);
      c_direct_4k.add(d4, c);
      c_buffered.add(b, c);
      ceil.add(c, c);

      req.step = 1 + 2 * i;
      CkptSaveStats st;
      settle();
      double c0 = cpu_ms();
      auto t0 = Clock::now();
      if (!check(ckpt_save(run, req, &st))) return 1;
      sync_ms.push_back(ms_since(t0));
      sync_cpu.push_back(cpu_ms() - c0);
      sync_s.add(st.bytes / 1e6 / (sync_ms.back() / 1e3), c);
      if (!check(ckpt_retain(run, 1, 0))) return 1;

      for (int image_src = 0; image_src < 2; ++image_src) {
        std::vector<SafetensorsTensor> specs;
        for (const auto& t : req.tensors) specs.push_back({t.name, "F32", t.shape});
        std::string path = dir + "/file.safetensors";
        SafetensorsWriter sw;
        // the aligned image is what CkptWriter's staging buffer is: laid out like the file, stable
        SafetensorsStableMemory stable(image_src ? image : nullptr, image_src ? image_bytes : 0);
        settle();
        t0 = Clock::now();
        if (!check(sw.open(path, specs, {{"format", "smelt"}}))) return 1;
        for (int k = 0; k < n_tensors; ++k)
          if (!check(sw.write_next(image_src ? reinterpret_cast<const float*>(image) + k * per : state.data() + k * per)))
            return 1;
        if (!check(sw.finish())) return 1;
        (image_src ? file_image : file_copy).add(sw.file_bytes() / 1e6 / (ms_since(t0) / 1e3), c);
        fs::remove(path);
      }

      req.step = 2 + 2 * i;
      settle();
      c0 = cpu_ms();
      t0 = Clock::now();
      if (!check(w.submit(req))) return 1;
      async_ms.push_back(ms_since(t0));
      double c1 = cpu_ms();
      submit_cpu.push_back(c1 - c0);
      if (!check(w.wait())) return 1;  // the trainer would be computing here; this thread sleeps
      async_cpu.push_back(cpu_ms() - c1);
      CkptSaveStats ast = w.last_stats();
      async_s.add(ast.write_mb_s, c);
      async_write_ms.push_back(ast.write_ms);
      if (!check(ckpt_retain(run, 1, 0))) return 1;

      // The commit protocol's fixed cost: a save of one 4 KB tensor (create the folder, write and
      // fsync the rank file, config and manifest, fsync the folder, rename, fsync, `latest`).
      CkptSaveRequest tiny = req;
      tiny.step = 1000 + i;
      tiny.tensors = {{"tiny", {1024}, state.data()}};
      settle();
      t0 = Clock::now();
      if (!check(ckpt_save(run, tiny))) return 1;
      fixed_ms.push_back(ms_since(t0));
      if (!check(ckpt_retain(run, 1, 0))) return 1;
    }
  }
  auto row = [&](const char* name, const Series& s) {
    std::string rounds;
    for (double x : s.rate) rounds += fmt_int(x) + " ";
    std::printf("  %-36s %7.0f %7.0f   %5.1f%% %5.1f%%   %s\n", name, median(s.rate), best(s.rate),
                100 * median(s.ratio), 100 * best(s.ratio), rounds.c_str());
  };
  std::printf("write rates, MB/s (%d rounds; %% = rate / the same round's ceiling):\n", reps);
  std::printf("  %-36s %7s %7s   %6s %6s   %s\n", "", "median", "best", "median", "best", "per round");
  row("ceiling: plain O_DIRECT, 2 MiB pages", c_direct);
  row("ceiling: plain O_DIRECT, 4 KiB pages", c_direct_4k);
  row("ceiling: plain write, buffered", c_buffered);
  row("ceiling (best of the three)", ceil);
  row("sync save (ckpt_save)", sync_s);
  row("safetensors file, unaligned source", file_copy);
  row("safetensors file, aligned image", file_image);
  row("async save (background ckpt_save)", async_s);
  double sync_stall = median(sync_ms), async_stall = median(async_ms);
  std::printf("ratio of medians: sync %.1f%%, async %.1f%% of the ceiling (target >= 80%%)\n",
              100 * median(sync_s.rate) / median(ceil.rate), 100 * median(async_s.rate) / median(ceil.rate));
  double data_ms = bytes / 1e6 / median(ceil.rate) * 1e3;
  std::printf("commit protocol alone (a 4 KB save): median %.1f ms, best %.1f ms; a save writing its data at the "
              "median ceiling would reach %.0f%% of it\n",
              median(fixed_ms), *std::min_element(fixed_ms.begin(), fixed_ms.end()),
              100 * data_ms / (data_ms + median(fixed_ms)));
  std::printf("cpu time: sync save %.0f ms; async: submit (copy + CRC) %.0f ms, background save %.0f ms (medians)\n",
              median(sync_cpu), median(submit_cpu), median(async_cpu));
  std::printf("stalls: sync save %.1f ms, async submit (kNow: copy into staging) %.1f ms, background save %.0f ms; "
              "stall ratio async/sync %.1f%% (target <= 10%%)\n",
              sync_stall, async_stall, median(async_write_ms), 100 * async_stall / sync_stall);

  // The cost to training when the trainer keeps every core busy: a simulated forward/backward
  // (--step-ms on --threads threads) runs right after the submit, so the copy (kDeferred) and the
  // background save's own CPU work (CRC, copies) compete with it. Overhead = that step's time minus
  // the same step alone.
  if (busy_reps > 0) {
    int64_t iters = 1 << 20;
    auto tc = Clock::now();
    compute(threads, iters);
    iters = static_cast<int64_t>(iters * step_ms / std::max(1.0, ms_since(tc)));
    std::vector<double> alone, with_now, with_def, def_blocked;
    CkptWriter w(run);
    w.reserve(static_cast<int64_t>(state.size()));
    for (int i = 0; i < busy_reps; ++i) {
      auto t0 = Clock::now();
      compute(threads, iters);
      alone.push_back(ms_since(t0));
      for (CkptCopy mode : {CkptCopy::kNow, CkptCopy::kDeferred}) {
        req.step = 200 + 2 * i + (mode == CkptCopy::kDeferred);
        t0 = Clock::now();
        if (!check(w.submit(req, mode))) return 1;
        compute(threads, iters);
        w.staged();
        (mode == CkptCopy::kNow ? with_now : with_def).push_back(ms_since(t0));
        double staged_ms = w.last_staged_wait_ms();
        if (!check(w.wait())) return 1;
        if (mode == CkptCopy::kDeferred) def_blocked.push_back(w.last_stats().stall_ms + staged_ms);
        if (!check(ckpt_retain(run, 1, 0))) return 1;
      }
    }
    double over_now = std::max(0.0, median(with_now) - median(alone));
    double over_def = std::max(0.0, median(with_def) - median(alone));
    std::printf("busy-core step:    %.0f ms alone on %d threads; with a save behind it: +%.0f ms (submit kNow, %.0f%% "
                "of sync), +%.0f ms (kDeferred, %.0f%% of sync)\n",
                median(alone), threads, over_now, 100 * over_now / sync_stall, over_def, 100 * over_def / sync_stall);
    std::printf("deferred submit:   %.2f ms the caller was blocked (submit + staged()), %.1f%% of sync\n",
                median(def_blocked), 100 * median(def_blocked) / sync_stall);
  }
  std::free(image);
  std::free(image_4k);
  fs::remove_all(dir);
  return 0;
}
