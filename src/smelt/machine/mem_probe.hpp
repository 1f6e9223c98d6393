// The machine's streaming read bandwidth, STREAM-style: the rate at which one core (or N threads,
// each over its own part) reads a buffer far larger than any cache, the bound of batch-1 decode
// (every weight is read once a token) and the figure its bytes/s are put beside. Not the write or
// triad bandwidth (plan/calibrate measures the triad for the planner).
#pragma once
#include <cstdint>

namespace smelt {

struct ReadBandwidth {
  double gb_s = 0;        // best pass: bytes read / seconds (1 GB = 1e9 bytes)
  int64_t bytes = 0;      // the buffer's size
  int threads = 1;
  const char* isa = "";   // the loads' width: "avx512", "avx2" or "portable"
  uint64_t checksum = 0;  // the xor of the buffer's 64-bit words as the last pass read them
};

// Word i of the probe's buffer (what the checksum is the xor of, over i < bytes / 8).
inline uint64_t mem_probe_word(int64_t i) { return (uint64_t)i * 0x9E3779B97F4A7C15ull; }

// Reads a buffer of `bytes` (rounded down to whole 4 KiB pages; at least 64 MiB, at most a quarter
// of the machine's memory) `passes` times after writing it once (word i = mem_probe_word(i)), with
// `threads` OpenMP threads each reading its contiguous part with the widest vector loads the CPU
// has; the best pass counts (a preempted pass only lowers it).
ReadBandwidth read_bandwidth(int threads, int64_t bytes = int64_t(1) << 30, int passes = 5);

}  // namespace smelt
