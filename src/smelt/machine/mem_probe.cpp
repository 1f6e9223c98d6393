// The streaming read probe (mem_probe.hpp). Eight independent accumulators of full-width loads,
// combined by xor (one-cycle latency, so the loop is bound by the loads, never by a dependency
// chain); the xor of every word is the checksum that shows each byte was read.
#include "smelt/machine/mem_probe.hpp"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "smelt/hw/cpu_info.hpp"

namespace smelt {

namespace {

__attribute__((target("avx512f"))) uint64_t read_avx512(const char* p, int64_t n) {
  __m512i a[8];
  for (auto& v : a) v = _mm512_setzero_si512();
  for (int64_t i = 0; i + 512 <= n; i += 512)
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) a[j] = _mm512_xor_si512(a[j], _mm512_load_si512((const void*)(p + i + 64 * j)));
  for (int j = 1; j < 8; j++) a[0] = _mm512_xor_si512(a[0], a[j]);
  alignas(64) uint64_t l[8];
  _mm512_store_si512((void*)l, a[0]);
  return l[0] ^ l[1] ^ l[2] ^ l[3] ^ l[4] ^ l[5] ^ l[6] ^ l[7];
}

__attribute__((target("avx2"))) uint64_t read_avx2(const char* p, int64_t n) {
  __m256i a[8];
  for (auto& v : a) v = _mm256_setzero_si256();
  for (int64_t i = 0; i + 256 <= n; i += 256)
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) a[j] = _mm256_xor_si256(a[j], _mm256_load_si256((const __m256i*)(p + i + 32 * j)));
  for (int j = 1; j < 8; j++) a[0] = _mm256_xor_si256(a[0], a[j]);
  return (uint64_t)_mm256_extract_epi64(a[0], 0) ^ (uint64_t)_mm256_extract_epi64(a[0], 1) ^
         (uint64_t)_mm256_extract_epi64(a[0], 2) ^ (uint64_t)_mm256_extract_epi64(a[0], 3);
}

uint64_t read_portable(const char* p, int64_t n) {
  uint64_t a[8] = {};
  for (int64_t i = 0; i + 64 <= n; i += 64)
    for (int j = 0; j < 8; j++) {
      uint64_t v;
      std::memcpy(&v, p + i + 8 * j, 8);
      a[j] ^= v;
    }
  return a[0] ^ a[1] ^ a[2] ^ a[3] ^ a[4] ^ a[5] ^ a[6] ^ a[7];
}

}  // namespace

ReadBandwidth read_bandwidth(int threads, int64_t bytes, int passes) {
  ReadBandwidth r;
  r.threads = std::max(1, threads);
  // at least 64 MiB (past the caches), at most a quarter of the memory
  const int64_t mem = (int64_t)sysconf(_SC_PHYS_PAGES) * (int64_t)sysconf(_SC_PAGESIZE);
  r.bytes = std::max<int64_t>(bytes, int64_t(64) << 20);
  if (mem > 0) r.bytes = std::min(r.bytes, std::max<int64_t>(mem / 4, int64_t(64) << 20));
  r.bytes = r.bytes / 4096 * 4096;
  const CpuInfo& c = cpu_info();
  uint64_t (*read)(const char*, int64_t) = read_portable;
  r.isa = "portable";
  if (c.avx512f) read = read_avx512, r.isa = "avx512";
  else if (c.avx2) read = read_avx2, r.isa = "avx2";
  std::unique_ptr<char, decltype(&std::free)> buf((char*)std::aligned_alloc(4096, (size_t)r.bytes), &std::free);
  if (!buf) return r;
  // Each thread's part: whole 4 KiB pages, touched first by the thread that reads it (its NUMA node).
  const int64_t pages = r.bytes / 4096;
  auto part = [&](int t, int64_t& lo, int64_t& n) {
    lo = pages * t / r.threads * 4096;
    n = pages * (t + 1) / r.threads * 4096 - lo;
  };
  // (parts taken round robin: every part is covered even if OpenMP gives fewer threads)
#pragma omp parallel num_threads(r.threads)
  for (int t = omp_get_thread_num(); t < r.threads; t += omp_get_num_threads()) {
    int64_t lo, n;
    part(t, lo, n);
    uint64_t* w = (uint64_t*)(buf.get() + lo);
    for (int64_t i = 0, i0 = lo / 8; i < n / 8; i++) w[i] = mem_probe_word(i0 + i);
  }
  for (int pass = 0; pass < std::max(1, passes); pass++) {
    const auto t0 = std::chrono::steady_clock::now();
    uint64_t s = 0;
#pragma omp parallel num_threads(r.threads) reduction(^ : s)
    for (int t = omp_get_thread_num(); t < r.threads; t += omp_get_num_threads()) {
      int64_t lo, n;
      part(t, lo, n);
      s ^= read(buf.get() + lo, n);
    }
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.checksum = s;
    if (sec > 0) r.gb_s = std::max(r.gb_s, (double)r.bytes / sec * 1e-9);
  }
  return r;
}

}  // namespace smelt
