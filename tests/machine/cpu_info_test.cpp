// The machine layer: the OpenBLAS core check (a generic core forced on this CPU is detected and
// fixed by the re-exec, and left alone when asked), the peak FLOP/s arithmetic, and the GEMM
// back-end choice with its per-machine cache (measured once, then read; configured choices obeyed);
// the microarchitecture table of FLOP per cycle, its measured check, and cpuid's family and model
// against the kernel's reading of them; the streaming read probe (every word read, on any thread
// count, and `smelt machine` reporting it).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include "smelt/hw/cpu_info.hpp"
#include "smelt/hw/uarch.hpp"
#include "smelt/machine/gemm_select.hpp"
#include "smelt/machine/mem_probe.hpp"
#include "test_files.hpp"
#include "test_references.hpp"

using namespace smelt;
namespace fs = std::filesystem;

namespace {
// Runs `smelt machine --json` with the given environment prefix; returns its JSON.
nlohmann::json machine_json(const std::string& env) {
  std::string cmd = env + " " + SMELT_BINARY + " machine --json 2>/dev/null";
  int rc = 0;
  const std::string out = smelt::test::run_command(cmd, rc);
  EXPECT_EQ(rc, 0) << cmd;
  return nlohmann::json::parse(out);
}
}  // namespace

TEST(BlasCore, TiersAndTheCoreForACpu) {
  EXPECT_EQ(blas_core_tier("Prescott"), 1);
  EXPECT_EQ(blas_core_tier("Sandybridge"), 2);
  EXPECT_EQ(blas_core_tier("Haswell"), 3);
  EXPECT_EQ(blas_core_tier("Zen"), 3);
  EXPECT_EQ(blas_core_tier("SkylakeX"), 4);
  EXPECT_EQ(blas_core_tier("Cooperlake"), 4);
  EXPECT_EQ(blas_core_tier("SomethingNew"), 0);
  CpuInfo amd;
  amd.vendor = "AuthenticAMD", amd.avx = amd.avx2 = amd.fma = true;
  EXPECT_EQ(blas_core_for(amd), "Zen");
  CpuInfo intel = amd;
  intel.vendor = "GenuineIntel";
  EXPECT_EQ(blas_core_for(intel), "Haswell");
  intel.avx512f = intel.avx512bw = intel.avx512vl = intel.avx512dq = true;
  EXPECT_EQ(blas_core_for(intel), "SkylakeX");
  intel.avx512_bf16 = true;
  EXPECT_EQ(blas_core_for(intel), "Cooperlake");
}

// The issue as a user met it: OpenBLAS running its generic Prescott kernels on a CPU with AVX2 or
// AVX-512. Forced here with OPENBLAS_CORETYPE=Prescott; the binary must notice and re-execute with
// the right core, and say what it fixed.
TEST(BlasCore, AGenericCoreIsDetectedAndFixed) {
  const CpuInfo& cpu = cpu_info();
  if (!(cpu.avx2 && cpu.fma)) GTEST_SKIP() << "this CPU has no AVX2: Prescott is not wrong for it";
  nlohmann::json j = machine_json("OPENBLAS_CORETYPE=Prescott");
  const std::string core = j["openblas"]["core"];
  EXPECT_GE(blas_core_tier(core), blas_core_tier(blas_core_for(cpu))) << core;
  EXPECT_EQ(j["openblas"]["fixed_from"], "Prescott");
  EXPECT_FALSE(j["openblas"]["mismatched"].get<bool>());
  // Asked to keep it, the binary leaves OpenBLAS alone and reports the mismatch.
  nlohmann::json k = machine_json("OPENBLAS_CORETYPE=Prescott SMELT_BLAS_CORE=keep");
  EXPECT_EQ(k["openblas"]["core"], "Prescott");
  EXPECT_TRUE(k["openblas"]["mismatched"].get<bool>());
  EXPECT_EQ(k["openblas"]["fixed_from"], "");
  // A core that already fits is not touched (named explicitly: OpenBLAS's own pick on some CPUs,
  // as on a Xeon of family 6 model 207, is Prescott, which the binary fixes).
  nlohmann::json f = machine_json("OPENBLAS_CORETYPE=" + blas_core_for(cpu));
  EXPECT_FALSE(f["openblas"]["mismatched"].get<bool>());
  EXPECT_EQ(f["openblas"]["fixed_from"], "");
}

// With a config (here the demo's, whose [data] has no shards yet): the model's GEMM choice and
// rates in both precisions, as `smelt train` would measure them.
TEST(MachineCmd, MeasuresAConfigsGemms) {
  const std::string cache = ::testing::TempDir() + "smelt_machine_cache_" + std::to_string(getpid());
  std::string cmd = "SMELT_CACHE_DIR=" + cache + " " + SMELT_BINARY + " machine --json --config " +
                    SMELT_SOURCE_DIR + "/configs/demo.toml 2>/dev/null";
  int rc = 0;
  const std::string out = smelt::test::run_command(cmd, rc);
  ASSERT_EQ(rc, 0) << cmd;
  nlohmann::json j = nlohmann::json::parse(out);
  for (const char* prec : {"fp32", "bf16"}) {
    EXPECT_GT(j["gemm"][prec]["gflops"].get<double>(), 0.0) << prec;
    EXPECT_FALSE(j["gemm"][prec]["engine"].get<std::string>().empty()) << prec;
  }
  EXPECT_EQ(j["gemm"]["fp32"]["how"], "measured");
  EXPECT_GT(j["cpu"]["measured_mhz"].get<double>(), 0.0);
  // BLIS: the library and its kernels, and its measured rate beside the other two (null and 0
  // where it is not installed)
  EXPECT_EQ(j["blis"].is_string(), gemm_backend_available(GemmBackend::kBlis)) << j["blis"];
  if (j["blis"].is_string()) {
    EXPECT_NE(j["blis"].get<std::string>().find("kernels"), std::string::npos) << j["blis"];
    EXPECT_GT(j["gemm"]["fp32"]["fp32_1thread"]["blis"].get<double>(), 0.0);
  }
  fs::remove_all(cache);
}

TEST(CpuPeak, InstructionSetTimesClock) {
  CpuInfo c;
  c.mhz = 2000;
  c.avx2 = c.fma = true;
  EXPECT_DOUBLE_EQ(cpu_peak(c, Precision::kFp32, 1).gflops, 32 * 2.0);
  EXPECT_DOUBLE_EQ(cpu_peak(c, Precision::kBf16, 2).gflops, 32 * 2.0 * 2);  // no bf16 units: the fp32 peak
  c.avx512f = true;
  EXPECT_DOUBLE_EQ(cpu_peak(c, Precision::kFp32, 2).gflops, 64 * 2.0 * 2);
  c.avx512_bf16 = true;
  EXPECT_DOUBLE_EQ(cpu_peak(c, Precision::kBf16, 1).gflops, 128 * 2.0);
  c.amx_bf16 = c.amx_tile = true;
  EXPECT_DOUBLE_EQ(cpu_peak(c, Precision::kBf16, 1).gflops, 1024 * 2.0);
  EXPECT_DOUBLE_EQ(cpu_peak(c, Precision::kFp32, 1).gflops, 64 * 2.0);
  EXPECT_GT(cpu_info_measured().mhz, 0.0) << "no clock found for this machine";
  EXPECT_FALSE(cpu_info_measured().mhz_source.empty());
  // The measured clock: a plausible x86 frequency, and never below what the peaks use.
  EXPECT_GT(cpu_info_measured().measured_mhz, 500.0);
  EXPECT_LT(cpu_info_measured().measured_mhz, 7000.0);
  EXPECT_GE(cpu_info_measured().mhz, cpu_info().mhz);
}

namespace {
CpuInfo cpu(const char* vendor, int family, int model, bool avx512, bool bf16, const char* name = "") {
  CpuInfo c;
  c.vendor = vendor, c.family = family, c.model_number = model, c.model = name;
  c.avx = c.avx2 = c.fma = true;
  c.avx512f = c.avx512bw = c.avx512vl = c.avx512dq = avx512;
  c.avx512_bf16 = bf16;
  c.mhz = 1000;
  return c;
}
}  // namespace

// The figures per microarchitecture: where the instruction set alone would say 64 fp32 FLOP/cycle
// for every AVX-512 core, Zen 4 (double-pumped) has 32, as do Zen 5's mobile parts and the
// one-port Xeons; the peaks follow the table.
TEST(CpuPeak, TheMicroarchitectureDecidesTheFlopPerCycle) {
  struct Case {
    CpuInfo c;
    const char* name;
    double fp32, bf16;
  };
  const Case cases[] = {
      {cpu("AuthenticAMD", 0x17, 0x01, false, false), "Zen / Zen+", 16, 0},
      {cpu("AuthenticAMD", 0x17, 0x31, false, false), "Zen 2", 32, 0},
      {cpu("AuthenticAMD", 0x19, 0x01, false, false), "Zen 3", 32, 0},
      {cpu("AuthenticAMD", 0x19, 0x11, true, true), "Zen 4", 32, 64},  // EPYC 9004 (the machine)
      {cpu("AuthenticAMD", 0x19, 0x61, true, true), "Zen 4", 32, 64},  // Ryzen 7000
      {cpu("AuthenticAMD", 0x1A, 0x02, true, true), "Zen 5", 64, 128}, // EPYC 9005
      {cpu("AuthenticAMD", 0x1A, 0x44, true, true), "Zen 5", 64, 128}, // Ryzen 9000
      {cpu("AuthenticAMD", 0x1A, 0x24, true, true), "Zen 5 (mobile)", 32, 64},
      {cpu("GenuineIntel", 6, 0x55, true, false, "Intel(R) Xeon(R) Platinum 8259CL CPU"), "Skylake / Cascade Lake / Cooper Lake server", 64, 0},
      {cpu("GenuineIntel", 6, 0x55, true, false, "Intel(R) Xeon(R) Silver 4214 CPU"), "Skylake / Cascade Lake / Cooper Lake server", 32, 0},
      {cpu("GenuineIntel", 6, 0x55, true, false, "Intel(R) Xeon(R) Gold 5218 CPU"), "Skylake / Cascade Lake / Cooper Lake server", 32, 0},
      {cpu("GenuineIntel", 6, 0x55, true, false, "Intel(R) Xeon(R) Gold 5122 CPU"), "Skylake / Cascade Lake / Cooper Lake server", 64, 0},
      {cpu("GenuineIntel", 6, 0x55, true, true, "Intel(R) Xeon(R) Platinum 8380H CPU"), "Skylake / Cascade Lake / Cooper Lake server", 64, 128},
      {cpu("GenuineIntel", 6, 0x8C, true, false), "Tiger Lake", 32, 0},
      {cpu("GenuineIntel", 6, 0x8F, true, true), "Sapphire Rapids", 64, 128},
      {cpu("GenuineIntel", 6, 0xCF, true, true), "Emerald Rapids", 64, 128},
  };
  for (const Case& k : cases) {
    const Uarch u = cpu_uarch(k.c);
    const std::string what = fmt::format("family {:#x} model {:#x} {}", k.c.family, k.c.model_number, k.c.model);
    EXPECT_EQ(u.name, k.name) << what;
    EXPECT_TRUE(u.from_table) << what;
    EXPECT_EQ(u.fp32, k.fp32) << what;
    EXPECT_EQ(u.bf16, k.bf16) << what;
    EXPECT_DOUBLE_EQ(cpu_peak(k.c, Precision::kFp32, 2).gflops, k.fp32 * 2) << what;  // 1 GHz, 2 cores
    EXPECT_DOUBLE_EQ(cpu_peak(k.c, Precision::kBf16, 1).gflops, k.bf16 > 0 ? k.bf16 : k.fp32) << what;
    EXPECT_NE(cpu_peak(k.c, Precision::kFp32, 1).unit.find(k.name), std::string::npos) << what;
  }
  // A CPU the table does not know keeps the instruction set's default, and says so.
  const Uarch u = cpu_uarch(cpu("HygonGenuine", 0x18, 0x01, false, false));
  EXPECT_FALSE(u.from_table);
  EXPECT_EQ(u.name, "unknown");
  EXPECT_EQ(u.fp32, 32);
}

// The check warns past 15% either way and names both figures.
TEST(CpuPeak, TheCheckWarnsWhenTableAndMeasurementDisagree) {
  EXPECT_EQ(peak_check("Zen 5 fp32 FMA", 64, 65.6), "");
  EXPECT_EQ(peak_check("x", 64, 55), "");
  EXPECT_EQ(peak_check("x", 64, 0), "") << "nothing measured";
  const std::string w = peak_check("Zen 4 fp32 FMA", 64, 31.8);  // the machine under the old figure
  EXPECT_NE(w.find("Zen 4 fp32 FMA"), std::string::npos) << w;
  EXPECT_NE(w.find("64 FLOP/cycle"), std::string::npos) << w;
  EXPECT_NE(w.find("31.8"), std::string::npos) << w;
  EXPECT_NE(peak_check("x", 32, 40), "");
}

// This machine: cpuid's family and model as the kernel reads them (/proc/cpuinfo), and the
// measured figures `smelt machine` prints beside the table's. The measurement is a timed loop on a
// shared machine, so only its plausibility is asserted here (one FMA unit of the narrowest width
// at least, never above twice the table); bench/RESULTS.md "machine" records the agreement.
TEST(CpuPeak, ThisMachinesFamilyModelAndMeasuredFigures) {
  std::ifstream in("/proc/cpuinfo");
  int family = -1, model = -1;
  for (std::string line; std::getline(in, line) && (family < 0 || model < 0);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    if (key == "cpu family" && family < 0) family = std::atoi(line.c_str() + colon + 1);
    if (key == "model" && model < 0) model = std::atoi(line.c_str() + colon + 1);
  }
  EXPECT_EQ(cpu_info().family, family);
  EXPECT_EQ(cpu_info().model_number, model);
  const nlohmann::json j = machine_json("");
  const Uarch u = cpu_uarch(cpu_info());
  EXPECT_EQ(j["uarch"]["name"], u.name);
  EXPECT_EQ(j["uarch"]["fp32_flop_per_cycle"].get<double>(), u.fp32);
  EXPECT_EQ(j["peak_gflops"]["fp32_flop_per_cycle"].get<double>(), u.fp32);
  const double measured = j["uarch"]["measured"]["fp32_flop_per_cycle"].get<double>();
  EXPECT_GE(measured, cpu_info().avx512f ? 8.0 : 4.0);
  EXPECT_LE(measured, 2 * u.fp32);
  if (cpu_info().avx512_bf16) {
    const double bf = j["uarch"]["measured"]["bf16_flop_per_cycle"].get<double>();
    EXPECT_GE(bf, 16.0);
    EXPECT_LE(bf, 2 * u.bf16);
  }
  EXPECT_TRUE(j["uarch"]["warnings"].is_array());
}

// The probe reads every word of its buffer whatever the thread count (the checksum is the xor of
// all of them, computed here word by word), in whole pages, at a plausible rate (a timed loop on a
// shared machine: only its range is asserted; bench/RESULTS.md records the figures).
TEST(MemProbe, ReadsTheWholeBufferOnAnyThreadCount) {
  const int64_t bytes = (int64_t(64) << 20) + 12345;  // not whole pages: rounded down
  uint64_t want = 0;
  for (int64_t i = 0; i < bytes / 4096 * 4096 / 8; i++) want ^= mem_probe_word(i);
  for (int threads : {1, 2, 3}) {
    const ReadBandwidth r = read_bandwidth(threads, bytes, 2);
    EXPECT_EQ(r.bytes, bytes / 4096 * 4096);
    EXPECT_EQ(r.threads, threads);
    EXPECT_EQ(r.checksum, want) << threads << " threads: some of the buffer was not read (or read twice)";
    EXPECT_GT(r.gb_s, 0.2) << threads;
    EXPECT_LT(r.gb_s, 2000.0) << threads;
    EXPECT_STREQ(r.isa, cpu_info().avx512f ? "avx512" : cpu_info().avx2 ? "avx2" : "portable");
  }
  EXPECT_EQ(read_bandwidth(1, 4096, 1).bytes, int64_t(64) << 20) << "a small buffer would measure a cache";
  const nlohmann::json j = machine_json("")["read_bandwidth"];
  EXPECT_GT(j["one_core_gb_s"].get<double>(), 0.2);
  EXPECT_EQ(j["buffer_bytes"].get<int64_t>(), int64_t(1) << 30);
  EXPECT_EQ(j["threads"].get<int>(), 1);
}

TEST(GemmSelect, MeasuresOnceThenReadsTheCacheAndObeysTheConfig) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("smelt_gemm_cache_" + std::to_string(getpid()));
  fs::remove_all(dir);
  setenv("SMELT_CACHE_DIR", dir.c_str(), 1);
  ModelConfig c;  // the small default model
  GemmChoice a, b, d;
  ASSERT_TRUE(gemm_select("auto", c, 2, 64, Precision::kFp32, 1, a).is_ok());
  EXPECT_EQ(a.how, "measured");
  EXPECT_GT(a.openblas_gflops, 0.0);
  EXPECT_GT(a.onednn_gflops, 0.0);
  // BLIS is measured beside the others where it is installed (scripts/install-deps installs it)
  if (test::references_required())
    EXPECT_TRUE(gemm_backend_available(GemmBackend::kBlis)) << "apt-get install libblis4-serial (scripts/install-deps)";
  EXPECT_EQ(a.blis_gflops > 0.0, gemm_backend_available(GemmBackend::kBlis));
  EXPECT_GT(a.gflops, 0.0);
  const double fastest = std::max({a.openblas_gflops, a.onednn_gflops, a.blis_gflops});
  EXPECT_EQ(a.backend, fastest == a.openblas_gflops ? GemmBackend::kOpenBlas
                       : fastest == a.onednn_gflops ? GemmBackend::kOneDnn
                                                    : GemmBackend::kBlis);
  EXPECT_EQ(gemm_backend(), a.backend);
  EXPECT_EQ(a.blis_gflops > 0.0, a.report().find("blis") != std::string::npos) << a.report();
  EXPECT_TRUE(fs::exists(dir / "gemm-rates.json"));
  ASSERT_TRUE(gemm_select("auto", c, 2, 64, Precision::kFp32, 1, b).is_ok());
  EXPECT_EQ(b.how, "cached");
  EXPECT_EQ(b.backend, a.backend);
  EXPECT_EQ(b.openblas_gflops, a.openblas_gflops);
  EXPECT_EQ(b.blis_gflops, a.blis_gflops);
  if (gemm_backend_available(GemmBackend::kBlis)) {
    ASSERT_TRUE(gemm_select("blis", c, 2, 64, Precision::kFp32, 1, d).is_ok());
    EXPECT_EQ(d.how, "configured");
    EXPECT_EQ(gemm_backend(), GemmBackend::kBlis);
    EXPECT_EQ(d.engine, "blis");
    EXPECT_GT(d.gflops, 0.0);
  }
  ASSERT_TRUE(gemm_select("openblas", c, 2, 64, Precision::kBf16, 1, d).is_ok());
  EXPECT_EQ(d.how, "configured");
  EXPECT_EQ(gemm_backend(), GemmBackend::kOpenBlas);
  EXPECT_GT(d.gflops, 0.0);
  EXPECT_NE(d.report().find("bf16"), std::string::npos);
  Status bad = gemm_select("mkl", c, 2, 64, Precision::kFp32, 1, d);
  EXPECT_FALSE(bad.is_ok());
  EXPECT_NE(bad.message().find("\"mkl\""), std::string::npos) << bad.message();
  unsetenv("SMELT_CACHE_DIR");
  fs::remove_all(dir);
}

// bf16 under "auto": each linear layer product on the faster engine at 1 thread (oneDNN or the
// packed kernel), measured once and then read from the cache with the same choice; a configured
// back end leaves every product on oneDNN. On a CPU without AVX512-BF16 nothing is chosen.
TEST(GemmSelect, Bf16EnginesChosenPerProductThenCached) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("smelt_gemm_bf16_" + std::to_string(getpid()));
  fs::remove_all(dir);
  setenv("SMELT_CACHE_DIR", dir.c_str(), 1);
  ModelConfig c;
  const LinearProduct products[] = {LinearProduct::kForward, LinearProduct::kDinp, LinearProduct::kDweight};
  auto table = [&] {
    std::vector<Bf16Engine> t;
    for (const auto& [in, out] : {std::pair{c.d_model, c.qkv_size()}, std::pair{c.d_model, c.vocab_size}})
      for (LinearProduct p : products) t.push_back(gemm_bf16_engine(in, out, p));
    return t;
  };
  GemmChoice a, b, d;
  ASSERT_TRUE(gemm_select("auto", c, 2, 64, Precision::kBf16, 1, a).is_ok());
  if (!gemm_bf16_native() || !gemm_bf16_packed_available()) {
    EXPECT_EQ(a.bf16_products, 0);
    for (Bf16Engine e : table()) EXPECT_EQ(e, Bf16Engine::kOneDnn);
  } else {
    EXPECT_EQ(a.how, "measured");
    EXPECT_EQ(a.bf16_products, 15);  // 5 layer kinds x 3 products
    EXPECT_GT(a.bf16_onednn_gflops, 0.0);
    EXPECT_GT(a.bf16_packed_gflops, 0.0);
    // each product on the faster engine, at least as fast as oneDNN alone; at 2 x 64 = 128 rows
    // (under kBf16PackedMinRows) no forward or dinp goes to the packed kernel
    EXPECT_GE(a.bf16_chosen_gflops, a.bf16_onednn_gflops * (1 - 1e-9));
    const std::vector<Bf16Engine> t = table();
    for (size_t i = 0; i < t.size(); i++)
      if (i % 3 != 2) EXPECT_EQ(t[i], Bf16Engine::kOneDnn) << "product " << i;
    EXPECT_EQ(a.bf16_packed > 0, a.engine.find("packed") != std::string::npos) << a.engine;
    EXPECT_NE(a.report().find("packed"), std::string::npos) << a.report();
    const std::vector<Bf16Engine> first = table();
    ASSERT_TRUE(gemm_select("auto", c, 2, 64, Precision::kBf16, 2, b).is_ok());
    EXPECT_EQ(b.how, "cached");
    EXPECT_EQ(b.bf16_packed, a.bf16_packed);
    EXPECT_EQ(b.bf16_chosen_gflops, a.bf16_chosen_gflops);
    EXPECT_EQ(table(), first) << "a second run (another thread count) must choose the same engines";
  }
  ASSERT_TRUE(gemm_select("onednn", c, 2, 64, Precision::kBf16, 1, d).is_ok());
  EXPECT_EQ(d.bf16_products, 0);
  for (Bf16Engine e : table()) EXPECT_EQ(e, Bf16Engine::kOneDnn);
  unsetenv("SMELT_CACHE_DIR");
  fs::remove_all(dir);
}

// The end-of-run measurement: on the run's back end and precision, a fresh rate, and the choice's
// rate raised to it when the start's read lower (never lowered).
TEST(GemmSelect, MeasuresAgainAndKeepsTheBest) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("smelt_gemm_again_" + std::to_string(getpid()));
  fs::remove_all(dir);
  setenv("SMELT_CACHE_DIR", dir.c_str(), 1);
  ModelConfig c;
  GemmChoice g;
  ASSERT_TRUE(gemm_select("openblas", c, 2, 64, Precision::kFp32, 1, g).is_ok());
  const double start = g.gflops;
  ASSERT_GT(start, 0.0);
  g.gflops = 1e-3;  // a start-up measurement read far too low
  const double again = gemm_measure_again(c, 2, 64, g);
  EXPECT_GT(again, 0.0);
  EXPECT_GE(g.gflops, again);
  EXPECT_GE(g.gflops, start);  // the cache's best of the runs, which the start wrote
  g.gflops = 1e9;             // higher than any measurement: kept
  gemm_measure_again(c, 2, 64, g);
  EXPECT_EQ(g.gflops, 1e9);
  EXPECT_EQ(gemm_backend(), GemmBackend::kOpenBlas);
  unsetenv("SMELT_CACHE_DIR");
  fs::remove_all(dir);
}
