// CPU features, clock and peaks from cpuid and /proc/cpuinfo; the OpenBLAS core check and its
// one re-exec. Linux x86-64 only, like the rest of Smelt.
#include "smelt/hw/cpu_info.hpp"

#include <cpuid.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "smelt/hw/uarch.hpp"

extern "C" char* openblas_get_corename(void);

namespace smelt {

double cpu_chain_mhz(int64_t loops) {
  uint64_t x = 3, n = (uint64_t)loops;
  const auto t0 = std::chrono::steady_clock::now();
  asm volatile(
      "1:\n\t"
      "imul %0, %0\n\timul %0, %0\n\timul %0, %0\n\timul %0, %0\n\t"
      "imul %0, %0\n\timul %0, %0\n\timul %0, %0\n\timul %0, %0\n\t"
      "dec %1\n\tjnz 1b"
      : "+r"(x), "+r"(n));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return 3.0 * 8.0 * (double)loops / s / 1e6;
}

namespace {
std::string g_fixed_from;  // what blas_core_fix's re-exec fixed (read from, then removed from, the environment)

bool has_flag(const std::string& flags, const char* f) {
  std::istringstream in(flags);
  std::string w;
  while (in >> w)
    if (w == f) return true;
  return false;
}

// The clock the cores really run at: a chain of dependent 64-bit integer multiplies takes 3 cycles
// each on every x86-64 core of the last decade (Intel since Sandy Bridge, AMD since Zen), so
// multiplies x 3 over seconds is the frequency, turbo included, which no file of a virtual machine
// shows. (Dependent add-immediate chains do not work: newer cores fold them at rename.) Best of
// three ~25 ms runs.
double measure_mhz() {
  double best = 0;
  for (int r = 0; r < 3; r++) best = std::max(best, cpu_chain_mhz(3'000'000));
  return best;
}

CpuInfo read_cpu_info() {
  CpuInfo c;
  std::ifstream in("/proc/cpuinfo");
  std::string line, flags, mhz;
  while (std::getline(in, line)) {
    auto value = [&]() {
      auto p = line.find(':');
      return p == std::string::npos ? std::string() : line.substr(line.find_first_not_of(" \t", p + 1));
    };
    if (c.model.empty() && line.rfind("model name", 0) == 0) c.model = value();
    else if (c.vendor.empty() && line.rfind("vendor_id", 0) == 0) c.vendor = value();
    else if (flags.empty() && line.rfind("flags", 0) == 0) flags = value();
    else if (mhz.empty() && line.rfind("cpu MHz", 0) == 0) mhz = value();
  }
  c.avx = has_flag(flags, "avx");
  c.avx2 = has_flag(flags, "avx2");
  c.fma = has_flag(flags, "fma");
  c.avx512f = has_flag(flags, "avx512f");
  c.avx512bw = has_flag(flags, "avx512bw");
  c.avx512vl = has_flag(flags, "avx512vl");
  c.avx512dq = has_flag(flags, "avx512dq");
  c.avx512_bf16 = has_flag(flags, "avx512_bf16");
  c.avx512_vnni = has_flag(flags, "avx512_vnni");
  c.amx_bf16 = has_flag(flags, "amx_bf16");
  c.amx_tile = has_flag(flags, "amx_tile");
  c.logical_cpus = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  unsigned a = 0, b = 0, cc = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &cc, &d)) {  // family and model with their extended fields, as Linux folds them
    const int base_family = (int)((a >> 8) & 0xF), base_model = (int)((a >> 4) & 0xF);
    c.family = base_family == 0xF ? base_family + (int)((a >> 20) & 0xFF) : base_family;
    c.model_number = base_family >= 6 ? base_model | (int)(((a >> 16) & 0xF) << 4) : base_model;
  }
  // The clock: cpufreq's maximum where the kernel exposes it, else cpuid leaf 0x16 (the
  // processor's own nominal and maximum MHz; zero on many virtual machines), else the MHz the
  // kernel measured at boot. A virtual machine usually shows only the last.
  std::ifstream fq("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
  double khz = 0;
  if (fq >> khz && khz > 0) {
    c.mhz = khz / 1000.0;
    c.mhz_source = "cpufreq cpuinfo_max_freq";
  } else {
    unsigned a = 0, b = 0, cc = 0, d = 0;
    if (__get_cpuid_max(0, nullptr) >= 0x16 && __get_cpuid(0x16, &a, &b, &cc, &d) && (b & 0xffff) > 0) {
      c.mhz = b & 0xffff;
      c.mhz_source = "cpuid leaf 0x16 (maximum MHz)";
    } else if (!mhz.empty()) {
      c.mhz = std::atof(mhz.c_str());
      c.mhz_source = "/proc/cpuinfo cpu MHz";
    }
  }
  return c;
}
}  // namespace

const CpuInfo& cpu_info() {
  static const CpuInfo c = read_cpu_info();
  return c;
}

const CpuInfo& cpu_info_measured() {
  static const CpuInfo c = [] {
    CpuInfo m = cpu_info();
    // A stated clock below what the cores run at would put MFU against the peak above the truth:
    // the measured clock wins when it is higher.
    m.measured_mhz = measure_mhz();
    if (m.measured_mhz > m.mhz * 1.02) {
      m.mhz_source = fmt::format("measured (a dependent-multiply chain; {} says {:.0f})", m.mhz_source, m.mhz);
      m.mhz = m.measured_mhz;
    }
    return m;
  }();
  return c;
}

std::string CpuInfo::flags() const {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (on) s += (s.empty() ? "" : " ") + std::string(name);
  };
  add(avx, "avx"), add(avx2, "avx2"), add(fma, "fma"), add(avx512f, "avx512f"), add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl"), add(avx512dq, "avx512dq"), add(avx512_vnni, "avx512_vnni");
  add(avx512_bf16, "avx512_bf16"), add(amx_tile, "amx_tile"), add(amx_bf16, "amx_bf16");
  return s;
}

PeakRate cpu_peak(const CpuInfo& c, Precision p, int threads) {
  PeakRate r;
  const Uarch u = cpu_uarch(c);
  const std::string where = fmt::format(" ({}: {})", u.name, u.datapath);
  if (p == Precision::kBf16 && c.amx_bf16 && c.amx_tile) {
    r.flop_per_cycle = 1024, r.unit = "AMX bf16";
  } else if (p == Precision::kBf16 && u.bf16 > 0) {
    r.flop_per_cycle = u.bf16, r.unit = "AVX512-BF16 dot products" + where;
  } else {
    r.flop_per_cycle = u.fp32;
    r.unit = (c.avx512f ? "AVX-512 FMA" : c.avx2 && c.fma ? "AVX2 FMA" : "SSE") + where;
  }
  r.gflops = r.flop_per_cycle * std::max(1, threads) * c.mhz / 1000.0;
  return r;
}

int blas_core_tier(const std::string& core) {
  static const char* const sse[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Nano",
                                    "Opteron", "Opteron(SSE3)", "Barcelona", "Bobcat"};
  static const char* const avx[] = {"Sandybridge", "Bulldozer", "Piledriver", "Steamroller", "Excavator"};
  static const char* const avx2[] = {"Haswell", "Zen"};
  static const char* const avx512[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
  for (const char* n : sse)
    if (core == n) return 1;
  for (const char* n : avx)
    if (core == n) return 2;
  for (const char* n : avx2)
    if (core == n) return 3;
  for (const char* n : avx512)
    if (core == n) return 4;
  return 0;
}

std::string blas_core_for(const CpuInfo& c) {
  if (c.avx512f && c.avx512bw && c.avx512vl && c.avx512dq) return c.avx512_bf16 ? "Cooperlake" : "SkylakeX";
  if (c.avx2 && c.fma) return c.vendor == "AuthenticAMD" ? "Zen" : "Haswell";
  return "";
}

std::string BlasCore::note() const {
  std::string s = "OpenBLAS core " + name;
  if (!fixed_from.empty())
    s += fmt::format(" (OpenBLAS had chosen {} on this {}; re-executed with OPENBLAS_CORETYPE={})", fixed_from,
                     cpu_info().avx512f ? "AVX-512 CPU" : "AVX2 CPU", name);
  else if (mismatched)
    s += fmt::format(" (older than this CPU: {} would fit; SMELT_BLAS_CORE=keep or the fix did not take)", wanted);
  return s;
}

BlasCore blas_core() {
  BlasCore b;
  const char* n = openblas_get_corename();
  b.name = n ? n : "";
  b.fixed_from = g_fixed_from;
  b.wanted = blas_core_for(cpu_info());
  const int have = blas_core_tier(b.name), want = blas_core_tier(b.wanted);
  b.mismatched = want > 0 && have < want;
  return b;
}

void blas_core_fix(int argc, char** argv) {
  (void)argc;
  const char* keep = std::getenv("SMELT_BLAS_CORE");
  if (keep && !std::strcmp(keep, "keep")) return;
  if (const char* from = std::getenv("SMELT_BLAS_CORE_FIXED_FROM")) {  // this process is the re-exec
    g_fixed_from = from;
    unsetenv("SMELT_BLAS_CORE_FIXED_FROM");  // children (mpirun, pipelines) check for themselves
    return;
  }
  BlasCore b = blas_core();
  if (!b.mismatched) return;
  // OpenBLAS reads OPENBLAS_CORETYPE only while it loads, before main(): a fresh image is the only
  // way to change its kernels. The marker tells the new process what it was fixed from.
  setenv("SMELT_BLAS_CORE_FIXED_FROM", b.name.c_str(), 1);
  setenv("OPENBLAS_CORETYPE", b.wanted.c_str(), 1);
  execv("/proc/self/exe", argv);
  // execv failed: carry on with the slow kernels; the summary says so.
  unsetenv("SMELT_BLAS_CORE_FIXED_FROM");
}

}  // namespace smelt
