// The vector units of a CPU's microarchitecture: fp32 FMA and AVX512-BF16 dot-product FLOP per
// cycle per core, looked up by vendor, family and model (cpuid), because the instruction set alone
// does not tell them: Zen 4 runs AVX-512 on 256-bit datapaths (half the FLOP of a full-width
// core), Zen 5's server and desktop parts run it full width and its mobile parts do not, and some
// Xeon SKUs have one 512-bit FMA port where others have two. And the check of the table: tight
// loops of independent FMAs (and vdpbf16ps) timed against the measured clock. Not the clock (that
// is cpu_info), not the GEMMs.
#pragma once
#include <string>

namespace smelt {

struct CpuInfo;

struct Uarch {
  std::string name;        // "Zen 4", "Sapphire Rapids", ... ("unknown" when no entry matched)
  double fp32 = 0;         // FLOP/cycle/core of the widest FMA the core has (multiply and add: 2)
  double bf16 = 0;         // FLOP/cycle/core of AVX512-BF16 vdpbf16ps; 0: the core has none
  std::string datapath;    // "2 x 512-bit FMA", "AVX-512 on 2 x 256-bit", ...
  bool from_table = false; // false: the instruction-set default (two units of the widest width)
};
// The table entry for this CPU, else the instruction-set default.
Uarch cpu_uarch(const CpuInfo& c);

// FLOP/cycle/core measured by a tight loop of independent FMAs of the widest width the CPU has
// (AVX-512, else AVX2+FMA), and of vdpbf16ps where the CPU has AVX512-BF16 (0: not measured), each
// against the clock measured between the loops (~100 ms in all). One core.
struct PeakMeasured {
  double fp32 = 0, bf16 = 0;
  double mhz = 0;  // the clock the loops ran at (a dependent-multiply chain)
};
PeakMeasured cpu_peak_measure(const CpuInfo& c);

// The warning when a table figure and its measurement differ by more than 15% (empty when they
// agree, or when nothing was measured).
std::string peak_check(const std::string& what, double table, double measured);

}  // namespace smelt
