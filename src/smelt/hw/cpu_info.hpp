// What this machine's CPU can do: model name, the instruction-set features that decide GEMM
// kernels (AVX2, AVX-512, AVX512-BF16, AMX), its clock and the peak FLOP/s that follow; and the
// OpenBLAS core check (a generic or older core on a newer CPU is fixed before any GEMM runs).
// Not a benchmark (machine/gemm_select.hpp measures), not the kernels.
#pragma once
#include <cstdint>
#include <string>

#include "smelt/hw/precision.hpp"

namespace smelt {

struct CpuInfo {
  std::string model;   // /proc/cpuinfo "model name"
  std::string vendor;  // GenuineIntel, AuthenticAMD, ...
  int family = 0, model_number = 0;  // cpuid leaf 1, extended fields folded in (as /proc/cpuinfo shows them)
  bool avx = false, avx2 = false, fma = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_bf16 = false, avx512_vnni = false, amx_bf16 = false, amx_tile = false;
  double mhz = 0;           // the clock the peaks use (cpu_info_measured: the higher of stated and measured)
  std::string mhz_source;   // where mhz came from (cpufreq max, cpuid leaf 0x16, /proc/cpuinfo, measured)
  double measured_mhz = 0;  // a timed chain of dependent multiplies (3 cycles each)
  int logical_cpus = 1;
  // The feature list in /proc/cpuinfo order, only the ones above (for reports).
  std::string flags() const;
};

// One timing of a chain of `loops` x 8 dependent 64-bit multiplies (3 cycles each on every x86-64
// core of the last decade): the MHz the core ran at meanwhile.
double cpu_chain_mhz(int64_t loops);

// Read once per process (cpuid and /proc/cpuinfo), then cached; mhz is the stated clock.
const CpuInfo& cpu_info();
// The same with the clock also measured (~75 ms, once per process): mhz is the higher of the two.
// What peaks and MFU use.
const CpuInfo& cpu_info_measured();

// Peak GFLOP/s of `threads` cores: FLOP per cycle per core x cores x GHz, the FLOP per cycle from
// the microarchitecture table (hw/uarch.hpp: the width and number of FMA units, which the
// instruction set does not tell). bf16: AMX 1024 FLOP/cycle (a 16x32 by 32x16 tile product per 16
// cycles), else the table's AVX512-BF16 figure, else the fp32 peak (the portable path runs fp32
// FMAs).
struct PeakRate {
  double gflops = 0;
  double flop_per_cycle = 0;
  std::string unit;  // "AVX-512 FMA (Zen 4: AVX-512 on 2 x 256-bit FMA)", "AMX bf16", ...
};
PeakRate cpu_peak(const CpuInfo& c, Precision p, int threads);

// The OpenBLAS core check. OpenBLAS picks its kernels when the library loads, from its own table
// of CPUs; on a CPU it does not know it falls back to generic ones (Prescott: SSE3, ~4x slower
// than the AVX-512 kernels). blas_core_fix runs first thing in main(): when the core OpenBLAS
// chose is of an older instruction set than the CPU has, it re-executes the process with
// OPENBLAS_CORETYPE naming the right core, once (SMELT_BLAS_CORE=keep leaves OpenBLAS alone).
struct BlasCore {
  std::string name;         // what OpenBLAS runs now (openblas_get_corename)
  std::string fixed_from;   // the core it had chosen before the re-exec, empty if none
  std::string wanted;       // the core this CPU should run (empty: no better core known)
  bool mismatched = false;  // name is of an older instruction set than the CPU has
  std::string note() const; // one line for logs and summaries
};
BlasCore blas_core();
// The OpenBLAS core for this CPU's instruction set: Cooperlake (AVX-512 + BF16), SkylakeX
// (AVX-512), Zen (AMD with AVX2), Haswell (AVX2 + FMA), else empty.
std::string blas_core_for(const CpuInfo& c);
// 1 = SSE, 2 = AVX, 3 = AVX2, 4 = AVX-512: the instruction set of an OpenBLAS core name (0 unknown).
int blas_core_tier(const std::string& core);
// Returns when nothing needs fixing (or the fix already ran); otherwise execv()s argv again.
void blas_core_fix(int argc, char** argv);

}  // namespace smelt
