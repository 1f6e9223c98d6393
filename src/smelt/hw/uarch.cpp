// The microarchitecture table of peak FLOP per cycle and its measured check.
#include "smelt/hw/uarch.hpp"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <regex>

#include <fmt/format.h>

#include "smelt/hw/cpu_info.hpp"

namespace smelt {

namespace {

// One row: vendor, family, models [lo, hi], whether the row is for cores with AVX-512 (1), without
// (0) or either (-1); the figures per core per cycle. fp32: FMA units x lanes x 2. bf16: vdpbf16ps
// does two multiply-adds per fp32 lane, so twice the fp32 figure of the same datapath.
struct Row {
  const char* vendor;
  int family, model_lo, model_hi, avx512;
  const char* name;
  double fp32, bf16;
  const char* datapath;
};

// Sources:
// - AMD family 17h-1Ah: AMD's Software Optimization Guides (pub. 55723 Zen: "two 128-bit FMA"
//   pipes, 256-bit ops split in two; 56305 Zen 2 and 56665 Zen 3: two 256-bit FMA pipes; 57647
//   Zen 4: AVX-512 executed on the 256-bit datapaths, a 512-bit op in two halves; 58455 Zen 5:
//   512-bit datapaths on the desktop and server cores, 256-bit on the mobile ones), and AMD's
//   Hot Chips 2024 Zen 5 talk. Zen 4's figures were measured on an EPYC 9004 guest (family 25
//   model 17: 32 fp32, 64 bf16 FLOP/cycle; OpenBLAS's 97 GFLOP/s at 3.66 GHz agrees), Zen 5's on
//   an EPYC 9005 guest (family 26 model 2: 64 fp32, ~120 bf16; bench/RESULTS.md "machine").
// - Intel family 6: the Intel 64 and IA-32 Architectures Optimization Reference Manual (Skylake
//   server: two 512-bit FMA units on Platinum, Gold 6000 and Core i9 parts, one on Gold 5000
//   (but 5122), Silver and Bronze: handled below by name; Ice Lake and Tiger Lake clients: one
//   512-bit FMA unit; Ice Lake, Sapphire, Emerald and Granite Rapids servers: two), ark.intel.com
//   "# of AVX-512 FMA Units" per SKU.
constexpr Row kRows[] = {
    {"AuthenticAMD", 0x17, 0x00, 0x2F, 0, "Zen / Zen+", 16, 0, "2 x 128-bit FMA, 256-bit ops in two halves"},
    {"AuthenticAMD", 0x17, 0x30, 0xFF, 0, "Zen 2", 32, 0, "2 x 256-bit FMA"},
    {"AuthenticAMD", 0x19, 0x00, 0xFF, 0, "Zen 3", 32, 0, "2 x 256-bit FMA"},
    {"AuthenticAMD", 0x19, 0x00, 0xFF, 1, "Zen 4", 32, 64, "AVX-512 on 2 x 256-bit FMA, 512-bit ops in two halves"},
    {"AuthenticAMD", 0x1A, 0x20, 0x2F, -1, "Zen 5 (mobile)", 32, 64, "AVX-512 on 2 x 256-bit FMA"},
    {"AuthenticAMD", 0x1A, 0x60, 0x6F, -1, "Zen 5 (mobile)", 32, 64, "AVX-512 on 2 x 256-bit FMA"},
    {"AuthenticAMD", 0x1A, 0x00, 0xFF, -1, "Zen 5", 64, 128, "2 x 512-bit FMA"},
    {"GenuineIntel", 6, 0x55, 0x55, 1, "Skylake / Cascade Lake / Cooper Lake server", 64, 128, "2 x 512-bit FMA"},
    {"GenuineIntel", 6, 0x6A, 0x6A, 1, "Ice Lake server", 64, 0, "2 x 512-bit FMA"},
    {"GenuineIntel", 6, 0x6C, 0x6C, 1, "Ice Lake server", 64, 0, "2 x 512-bit FMA"},
    {"GenuineIntel", 6, 0x7D, 0x7E, 1, "Ice Lake client", 32, 0, "1 x 512-bit FMA"},
    {"GenuineIntel", 6, 0x8C, 0x8D, 1, "Tiger Lake", 32, 0, "1 x 512-bit FMA"},
    {"GenuineIntel", 6, 0xA7, 0xA7, 1, "Rocket Lake", 32, 0, "1 x 512-bit FMA"},
    {"GenuineIntel", 6, 0x8F, 0x8F, 1, "Sapphire Rapids", 64, 128, "2 x 512-bit FMA"},
    {"GenuineIntel", 6, 0xCF, 0xCF, 1, "Emerald Rapids", 64, 128, "2 x 512-bit FMA"},
    {"GenuineIntel", 6, 0xAD, 0xAE, 1, "Granite Rapids", 64, 128, "2 x 512-bit FMA"},
};

// Skylake-family Xeons with one 512-bit FMA unit: Silver, Bronze, and Gold 5000 but the 5122.
bool one_fma_port_xeon(const std::string& model) {
  static const std::regex gold5(R"(Gold 5\d\d\d)");
  return model.find("Silver") != std::string::npos || model.find("Bronze") != std::string::npos ||
         (std::regex_search(model, gold5) && model.find("Gold 5122") == std::string::npos);
}

Uarch isa_default(const CpuInfo& c) {
  Uarch u;
  u.name = "unknown";
  if (c.avx512f) u.fp32 = 64, u.datapath = "AVX-512, 2 FMA units assumed";
  else if (c.avx2 && c.fma) u.fp32 = 32, u.datapath = "AVX2, 2 FMA units assumed";
  else u.fp32 = 8, u.datapath = "SSE, 2 units assumed";
  u.bf16 = c.avx512_bf16 ? 2 * u.fp32 : 0;
  return u;
}

}  // namespace

Uarch cpu_uarch(const CpuInfo& c) {
  for (const Row& r : kRows) {
    if (c.vendor != r.vendor || c.family != r.family || c.model_number < r.model_lo || c.model_number > r.model_hi)
      continue;
    if (r.avx512 >= 0 && (int)c.avx512f != r.avx512) continue;
    Uarch u{r.name, r.fp32, c.avx512_bf16 ? r.bf16 : 0, r.datapath, true};
    if (c.avx512_bf16 && u.bf16 == 0) u.bf16 = 2 * u.fp32;  // a stepping with BF16 the row does not list
    if (r.family == 6 && r.model_lo == 0x55 && one_fma_port_xeon(c.model)) {
      u.fp32 /= 2, u.bf16 /= 2;
      u.datapath = "1 x 512-bit FMA, this SKU's one port";
    }
    return u;
  }
  return isa_default(c);
}

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Twelve independent accumulators: enough to cover an FMA latency of 4-6 cycles on two ports. The
// empty asm keeps the compiler from folding the chains. Each returns FLOP/s.
#define SMELT_TWELVE(OP) OP(a0) OP(a1) OP(a2) OP(a3) OP(a4) OP(a5) OP(a6) OP(a7) OP(a8) OP(a9) OP(a10) OP(a11)
#define SMELT_KEEP(C) \
  __asm__ volatile("" : "+" C(a0), "+" C(a1), "+" C(a2), "+" C(a3), "+" C(a4), "+" C(a5), "+" C(a6), "+" C(a7), \
                   "+" C(a8), "+" C(a9), "+" C(a10), "+" C(a11))

__attribute__((target("avx512f"))) double fma512(int64_t n) {
  __m512 a0 = _mm512_set1_ps(1.0f), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0,
         a9 = a0, a10 = a0, a11 = a0;
  const __m512 m = _mm512_set1_ps(0.999999f), k = _mm512_set1_ps(1e-7f);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < n; i++) {
#define SMELT_F(x) x = _mm512_fmadd_ps(x, m, k);
    SMELT_TWELVE(SMELT_F)
#undef SMELT_F
    SMELT_KEEP("v");
  }
  const double s = seconds_since(t0);
  volatile float sink = _mm512_cvtss_f32(_mm512_add_ps(a0, a11));
  (void)sink;
  return 12.0 * 16 * 2 * (double)n / s;
}

__attribute__((target("avx2,fma"))) double fma256(int64_t n) {
  __m256 a0 = _mm256_set1_ps(1.0f), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0,
         a9 = a0, a10 = a0, a11 = a0;
  const __m256 m = _mm256_set1_ps(0.999999f), k = _mm256_set1_ps(1e-7f);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < n; i++) {
#define SMELT_F(x) x = _mm256_fmadd_ps(x, m, k);
    SMELT_TWELVE(SMELT_F)
#undef SMELT_F
    SMELT_KEEP("x");
  }
  const double s = seconds_since(t0);
  volatile float sink = _mm256_cvtss_f32(_mm256_add_ps(a0, a11));
  (void)sink;
  return 12.0 * 8 * 2 * (double)n / s;
}

__attribute__((target("avx512f,avx512bf16"))) double dpbf16(int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0,
         a9 = a0, a10 = a0, a11 = a0;
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3300);  // 1, 3e-8
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < n; i++) {
#define SMELT_F(q) q = _mm512_dpbf16_ps(q, x, y);
    SMELT_TWELVE(SMELT_F)
#undef SMELT_F
    SMELT_KEEP("v");
  }
  const double s = seconds_since(t0);
  volatile float sink = _mm512_cvtss_f32(_mm512_add_ps(a0, a11));
  (void)sink;
  return 12.0 * 16 * 4 * (double)n / s;  // 16 lanes, each two products and two additions
}
#undef SMELT_TWELVE
#undef SMELT_KEEP

}  // namespace

PeakMeasured cpu_peak_measure(const CpuInfo& c) {
  // Best of five rounds, each loop ~3 ms: a preempted round only lowers a figure, so the maxima
  // of the rates and of the clock are each the undisturbed value.
  PeakMeasured m;
  double fp32 = 0, bf16 = 0;
  constexpr int64_t kIters = 200'000;
  for (int r = 0; r < 5; r++) {
    m.mhz = std::max(m.mhz, cpu_chain_mhz(1'000'000));
    if (c.avx512f) fp32 = std::max(fp32, fma512(kIters));
    else if (c.avx2 && c.fma) fp32 = std::max(fp32, fma256(kIters));
    if (c.avx512_bf16 && c.avx512f) bf16 = std::max(bf16, dpbf16(kIters));
  }
  if (m.mhz <= 0) return m;
  m.fp32 = fp32 / (m.mhz * 1e6);
  m.bf16 = bf16 / (m.mhz * 1e6);
  return m;
}

std::string peak_check(const std::string& what, double table, double measured) {
  if (table <= 0 || measured <= 0 || std::fabs(measured / table - 1.0) <= 0.15) return std::string();
  return fmt::format("{}: the table says {:g} FLOP/cycle, a tight loop measured {:.1f} ({:+.0f}%); peaks and MFU "
                     "use the table (a busy machine measures low; a table entry that is wrong is a bug)",
                     what, table, measured, 100.0 * (measured / table - 1.0));
}

}  // namespace smelt
