// The machine layer: the OpenBLAS core check (a generic core forced on this CPU is detected and
// fixed by the re-exec, and left alone when asked), the peak FLOP/s arithmetic, and the GEMM
// back-end choice with its per-machine cache (measured once, then read; configured choices obeyed).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include "smelt/hw/cpu_info.hpp"
#include "smelt/machine/gemm_select.hpp"
#include "test_files.hpp"

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
  EXPECT_GT(a.gflops, 0.0);
  EXPECT_EQ(a.backend, a.onednn_gflops > a.openblas_gflops ? GemmBackend::kOneDnn : GemmBackend::kOpenBlas);
  EXPECT_EQ(gemm_backend(), a.backend);
  EXPECT_TRUE(fs::exists(dir / "gemm-rates.json"));
  ASSERT_TRUE(gemm_select("auto", c, 2, 64, Precision::kFp32, 1, b).is_ok());
  EXPECT_EQ(b.how, "cached");
  EXPECT_EQ(b.backend, a.backend);
  EXPECT_EQ(b.openblas_gflops, a.openblas_gflops);
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
