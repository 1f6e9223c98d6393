// `smelt machine [--config RUN.toml] [--threads N] [--json]`: what this machine gives the GEMMs —
// CPU model and features, clock, its microarchitecture's FLOP/cycle from the table beside a
// tight loop's measurement (a warning past 15%), fp32 and bf16 peaks, the OpenBLAS core (and
// whether it was fixed at start-up), what bf16 runs on, the streaming read bandwidth (one core and
// --threads: batch-1 decode's bound); with --config, the GEMM back end chosen
// for that model and the rates measured at its shapes (the same measurement and cache `smelt
// train` uses). Text on stderr, JSON on stdout with --json. Not a benchmark of the whole step
// (bench/train).
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "smelt/cli/cli_parse.hpp"
#include "smelt/cli/commands.hpp"
#include "smelt/common/config.hpp"
#include "smelt/dataset/loader.hpp"
#include "smelt/hw/cpu_info.hpp"
#include "smelt/hw/uarch.hpp"
#include "smelt/kernels/kernels.hpp"
#include "smelt/machine/gemm_select.hpp"
#include "smelt/machine/mem_probe.hpp"
#include "smelt/model/config.hpp"

namespace smelt {

int cli_machine(int argc, char** argv) {
  CLI::App app{"smelt machine: the CPU, its peaks, the GEMM back ends and what a model's GEMMs reach"};
  app.name("smelt machine");
  std::string config, gemm = "auto";
  std::vector<std::string> sets;
  int threads = 1;
  bool as_json = false;
  app.add_option("--config", config, "a run config ([model], [data] batch_size and seq_len): measure its model's "
                 "GEMMs (fp32 and bf16) and choose the back end");
  app.add_option("--set", sets, "section.key=value overrides of the config");
  app.add_option("--threads", threads, "threads for the peaks and the measurement (default 1)")->check(CLI::PositiveNumber);
  app.add_option("--gemm", gemm, "auto, openblas, onednn or blis (as [train] gemm)");
  app.add_flag("--json", as_json, "JSON on stdout");
  if (int rc = cli_parse(app, argc, argv, "machine", "warn"); rc >= 0) return rc;

  const CpuInfo& cpu = cpu_info_measured();
  const BlasCore core = blas_core();
  const PeakRate p32 = cpu_peak(cpu, Precision::kFp32, threads), p16 = cpu_peak(cpu, Precision::kBf16, threads);
  const Uarch ua = cpu_uarch(cpu);
  const PeakMeasured pm = cpu_peak_measure(cpu);
  nlohmann::json j;
  j["cpu"] = {{"model", cpu.model}, {"vendor", cpu.vendor}, {"family", cpu.family}, {"model_number", cpu.model_number},
              {"flags", cpu.flags()}, {"mhz", cpu.mhz}, {"mhz_source", cpu.mhz_source}, {"stated_mhz", cpu_info().mhz},
              {"measured_mhz", cpu.measured_mhz}, {"logical_cpus", cpu.logical_cpus}};
  j["peak_gflops"] = {{"threads", threads},
                      {"fp32", p32.gflops}, {"fp32_unit", p32.unit}, {"fp32_flop_per_cycle", p32.flop_per_cycle},
                      {"bf16", p16.gflops}, {"bf16_unit", p16.unit}, {"bf16_flop_per_cycle", p16.flop_per_cycle}};
  // The table's vector figures beside a tight loop's (one core; AMX is not measured).
  std::vector<std::string> warnings;
  for (const auto& w : {peak_check(ua.name + " fp32 FMA", ua.fp32, pm.fp32),
                        peak_check(ua.name + " AVX512-BF16", ua.bf16, pm.bf16)})
    if (!w.empty()) warnings.push_back(w);
  j["uarch"] = {{"name", ua.name}, {"datapath", ua.datapath}, {"from_table", ua.from_table},
                {"fp32_flop_per_cycle", ua.fp32}, {"bf16_flop_per_cycle", ua.bf16},
                {"measured", {{"fp32_flop_per_cycle", pm.fp32}, {"bf16_flop_per_cycle", pm.bf16}, {"mhz", pm.mhz}}},
                {"warnings", warnings}};
  // The streaming read bandwidth (batch-1 decode's bound): one core, and the threads asked for.
  const ReadBandwidth bw1 = read_bandwidth(1);
  const ReadBandwidth bwn = threads > 1 ? read_bandwidth(threads) : bw1;
  j["read_bandwidth"] = {{"one_core_gb_s", bw1.gb_s}, {"threads", threads}, {"gb_s", bwn.gb_s},
                         {"buffer_bytes", bw1.bytes}, {"loads", bw1.isa}};
  j["openblas"] = {{"core", core.name}, {"wanted", core.wanted}, {"fixed_from", core.fixed_from},
                   {"mismatched", core.mismatched}};
  j["bf16"] = {{"native", gemm_bf16_native()}, {"engine", gemm_bf16_isa()}};
  const std::string blis = gemm_blis_library();
  j["blis"] = blis.empty() ? nlohmann::json(nullptr) : nlohmann::json(blis);
  std::string text = fmt::format(
      "cpu        {} ({} logical CPUs)\n"
      "features   {}\n"
      "clock      {:.0f} MHz ({})\n"
      "uarch      {}{}, family {:#x} model {:#x}: {}\n"
      "flop/cycle fp32 {:g} table, {:.1f} measured{}; bf16 {:g} table, {} measured (one core, a tight loop)\n"
      "peak       fp32 {:.1f} GFLOP/s ({}), bf16 {:.1f} GFLOP/s ({}), {} thread{}\n"
      "memory     read {:.1f} GB/s on one core{} (a {} MiB buffer, {} loads, best of 5 passes)\n"
      "openblas   {}\n"
      "blis       {}\n"
      "bf16       {}\n",
      cpu.model, cpu.logical_cpus, cpu.flags(), cpu.mhz, cpu.mhz_source, ua.name,
      ua.from_table ? "" : " (no table entry: the instruction set's default)", cpu.family, cpu.model_number,
      ua.datapath, ua.fp32, pm.fp32, fmt::format(" at {:.0f} MHz", pm.mhz), ua.bf16,
      pm.bf16 > 0 ? fmt::format("{:.1f}", pm.bf16) : std::string("not"), p32.gflops, p32.unit, p16.gflops, p16.unit,
      threads, threads == 1 ? "" : "s", bw1.gb_s,
      threads > 1 ? fmt::format(", {:.1f} GB/s on {} threads", bwn.gb_s, threads) : std::string(), bw1.bytes >> 20,
      bw1.isa, core.note(), blis.empty() ? "not installed (libblis4-serial: a third fp32 back end)" : blis,
      gemm_bf16_isa());
  for (const auto& w : warnings) spdlog::warn("machine: {}", w);
  if (!config.empty()) {
    toml::table root;
    if (Status s = config_load(config, root); !s) {
      spdlog::error("{}", s.message());
      return kExitUsage;
    }
    if (Status st = config_apply_sets(root, sets); !st) {
      spdlog::error("{}", st.message());
      return kExitUsage;
    }
    // The model and the batch shape only: a config whose data are not there yet (a benchmark or
    // pipeline config) still tells the GEMM shapes.
    ModelConfig mc;
    if (Status s = model_config_read(root, mc); !s) {
      spdlog::error("{}: {}", config, s.message());
      return kExitUsage;
    }
    LoaderConfig shape;
    shape.batch_size = root.at_path("data.batch_size").value_or(shape.batch_size);
    shape.seq_len = root.at_path("data.seq_len").value_or(shape.seq_len);
    if (shape.batch_size <= 0 || shape.seq_len <= 0) {
      spdlog::error("{}: [data] batch_size and seq_len must be >= 1", config);
      return kExitUsage;
    }
    int B = 1, T = 1;
    train_batch_shape(shape, B, T);
    T = std::min(T, mc.max_seq_len);
    for (Precision p : {Precision::kFp32, Precision::kBf16}) {
      GemmChoice g;
      if (Status s = gemm_select(gemm, mc, B, T, p, threads, g); !s) {
        spdlog::error("{}", s.message());
        return kExitUsage;
      }
      j["gemm"][precision_name(p)] = {{"engine", g.engine}, {"backend", gemm_backend_name(g.backend)},
                                       {"how", g.how}, {"gflops", g.gflops},
                                       {"fp32_1thread",
                                        {{"openblas", g.openblas_gflops}, {"onednn", g.onednn_gflops}, {"blis", g.blis_gflops}}}};
      text += fmt::format("model      {}\n", g.report());
    }
  }
  std::fputs(text.c_str(), stderr);
  if (as_json) std::printf("%s\n", j.dump(2).c_str());
  return kExitOk;
}

}  // namespace smelt
