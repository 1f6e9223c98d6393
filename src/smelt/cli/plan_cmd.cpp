// `smelt plan`: the parallel layouts of a model on a cluster, ranked by predicted step time, with
// memory per rank against the device's (docs/plan.md); `--explain LAYOUT` breaks one down;
// `--calibrate` measures this machine into a cluster file; `--calibrate-comm` is its MPI child.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "smelt/cli/cli_parse.hpp"
#include "smelt/cli/commands.hpp"
#include "smelt/common/config.hpp"
#include "smelt/common/files.hpp"
#include "smelt/model/config.hpp"
#include "smelt/model/params.hpp"
#include "smelt/plan/calibrate.hpp"
#include "smelt/plan/cluster.hpp"
#include "smelt/plan/cost.hpp"

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace smelt {

namespace {

Status load_model(const std::string& path, const std::vector<std::string>& sets, ModelConfig& m) {
  toml::table root;
  if (Status s = config_load(path, root); !s) return s;
  if (Status s = config_apply_sets(root, sets); !s) return s;
  if (Status s = model_config_read(root, m); !s) return Status::error(fmt::format("{}: {}", path, s.message()));
  return Status::ok();
}

ojson prediction_json(const Prediction& p) {
  const MemoryEstimate& m = p.memory;
  const TimeEstimate& t = p.time;
  ojson j;
  j["layout"] = p.layout.name();
  j["dp"] = p.layout.dp, j["tp"] = p.layout.tp, j["pp"] = p.layout.pp, j["zero"] = p.layout.zero ? 1 : 0;
  j["recompute"] = p.layout.recompute, j["micro_batch"] = p.layout.micro, j["grad_accum"] = p.layout.accum;
  j["fits"] = p.fits;
  if (!p.reason.empty()) j["reason"] = p.reason;
  if (m.total() > 0) {
    j["memory"] = {{"bytes", m.total()}, {"limit_bytes", p.memory_limit}, {"stage", m.stage},
                   {"parameters", m.run.model.param_bytes}, {"gradients", m.run.model.grad_bytes},
                   {"optimizer", m.run.model.optimizer_bytes}, {"activations", m.run.model.activation_bytes},
                   {"bf16", m.run.model.bf16_bytes}, {"gradient_sum", m.run.accum_bytes},
                   {"reduce_scratch", m.run.reduce_bytes}, {"pipeline_sends", m.run.pipeline_bytes},
                   {"ckpt_staging", m.run.staging_bytes}, {"ckpt_writer", m.run.writer_bytes},
                   {"eval_tasks", m.run.eval_bytes}, {"gemm_probe", m.run.gemm_probe_bytes},
                   {"process", m.process_bytes}};
    j["time"] = {{"step_ms", t.step_ms}, {"gemm_ms", t.gemm_ms}, {"attention_ms", t.attention_ms},
                 {"elementwise_ms", t.elementwise_ms}, {"optimizer_ms", t.optimizer_ms}, {"tp_ms", t.tp_ms},
                 {"tp_wait_ms", t.tp_wait_ms}, {"pp_send_ms", t.pp_send_ms}, {"pp_bubble_ms", t.bubble_ms}, {"dp_ms", t.dp_ms},
                 {"dp_exposed_ms", t.dp_exposed_ms}, {"ckpt_ms", t.ckpt_ms},
                 {"oversubscription", t.oversubscription}, {"dominant", t.dominant}};
    j["tokens_per_s"] = p.tokens_per_s;
    j["mfu"] = p.mfu;
  }
  return j;
}

std::string explain(const Prediction& p) {
  const MemoryEstimate& m = p.memory;
  const TimeEstimate& t = p.time;
  auto mib = [](int64_t b) { return fmt::format("{:>10.1f} MiB", b / 1048576.0); };
  std::string s = fmt::format("layout {}: dp {} x tp {} x pp {}, ZeRO-1 {}, recompute {}, {} rows x {} micro-batches\n",
                              p.layout.name(), p.layout.dp, p.layout.tp, p.layout.pp, p.layout.zero ? "on" : "off",
                              p.layout.recompute ? "on" : "off", p.layout.micro, p.layout.accum);
  if (m.total() == 0) return s + "  refused: " + p.reason + "\n";
  s += fmt::format("memory per rank (the largest: stage {}):\n{}  {:<16} {}\n  {:<16} {}  of {} per device{}\n",
                   m.stage, m.run.report(), "process (fixed)", mib(m.process_bytes), "predicted", mib(m.total()),
                   mib(p.memory_limit), p.fits ? "" : " — " + p.reason);
  s += fmt::format(
      "time per step (the busiest rank):\n"
      "  GEMMs {:.1f} ms, attention {:.1f} ms, elementwise {:.1f} ms (compute x{:.2f} for ranks sharing cores)\n"
      "  TP all-reduces {:.1f} ms ({:.1f} ms of it waiting for the slowest rank), pipeline sends {:.1f} ms, 1F1B "
      "idle {:.1f} ms\n"
      "  DP reduction {:.1f} ms ({:.1f} ms not hidden), optimizer {:.1f} ms, checkpoint {:.1f} ms\n"
      "  step {:.1f} ms, {:.0f} tokens/s, MFU {:.1f}%; the largest part: {}\n",
      t.gemm_ms, t.attention_ms, t.elementwise_ms, t.oversubscription, t.tp_ms, t.tp_wait_ms, t.pp_send_ms,
      t.bubble_ms, t.dp_ms, t.dp_exposed_ms, t.optimizer_ms, t.ckpt_ms, t.step_ms, p.tokens_per_s, 100 * p.mfu, t.dominant);
  return s;
}

int calibrate(const std::vector<std::string>& models, const std::vector<std::string>& sets, const std::string& output,
              int max_ranks, int threads, std::vector<int> rows, const std::string& mpirun) {
  CalibrateOptions o;
  for (const std::string& path : models) {
    ModelConfig m;
    if (Status s = load_model(path, sets, m); !s) {
      spdlog::error("{}", s.message());
      return kExitUsage;
    }
    o.models.push_back(m);
  }
  if (!rows.empty()) o.rows = rows;
  o.max_ranks = max_ranks;
  o.threads = threads;
  o.mpirun = mpirun;
  o.self = cli_self_exe();
  o.work_dir = (fs::temp_directory_path() / fmt::format("smelt-calibrate.{}", ::getpid())).string();
  ClusterSpec c;
  Status s = plan_calibrate(o, c);
  if (!s) {  // the scratch stays: the message may name a log in it
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  std::error_code ec;
  fs::remove_all(o.work_dir, ec);
  const std::string text = "# " + c.name + "\n# " + c.source + "\n" + cluster_toml(c);
  if (output.empty()) {
    std::fputs(text.c_str(), stdout);
  } else if (Status w = files_write_atomic(output, text); !w) {
    spdlog::error("{}", w.message());
    return kExitFailure;
  }
  std::fprintf(stderr,
               "calibrated: fp32 %.1f GFLOP/s (1024^3), bf16 %.1f, %zu GEMM shapes, attention %.1f GFLOP/s, "
               "elementwise %.2f GB/s, triad %.2f GB/s, every core busy x%.2f, disk %.0f MB/s, process %.0f MB "
               "(mpirun %.0f MB, with TP/PP groups %.0f MB), "
               "%zu all-reduce curve(s)%s\n",
               c.fp32_gflops, c.bf16_gflops, c.gemm.size(), c.attention_gflops, c.elementwise_gb_s, c.memory_gb_s,
               c.shared_slowdown, c.disk_write_mb_s, c.process_mb, c.mpi_process_mb, c.mp_process_mb, c.allreduce.size(),
               output.empty() ? "" : (" -> " + output).c_str());
  return kExitOk;
}

}  // namespace

int cli_plan(int argc, char** argv) {
  CLI::App app{"smelt plan: which DP x TP x PP x ZeRO-1 x recompute x micro-batch layout fits a cluster and is fastest"};
  app.name("smelt plan");
  std::string model_path, cluster_path, explain_layout, output, comm_out, probe_out, precision = "fp32";
  std::string mpirun = "mpirun --allow-run-as-root --oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none";
  std::vector<std::string> sets, cal_models;
  int64_t global_batch = 0, save_every = 0;
  int seq = 0, top = 10, ranks = 0, max_ranks = 4, threads = 1;
  std::vector<int> micro, rows;
  bool as_json = false, do_calibrate = false, no_save_at_end = false;
  app.add_option("--model", model_path, "a model or run config ([model]); with --calibrate, the models whose GEMM "
                 "shapes to measure (repeat --model)");
  app.add_option("--cluster", cluster_path, "the cluster file (configs/clusters/*.toml, or --calibrate's output)");
  app.add_option("--global-batch", global_batch, "sequences per optimizer step")->check(CLI::PositiveNumber);
  app.add_option("--seq", seq, "tokens per sequence (default: the model's max_seq_len)")->check(CLI::PositiveNumber);
  app.add_option("--ranks", ranks, "ranks to use (default: every device of the cluster)")->check(CLI::PositiveNumber);
  app.add_option("--micro-batch", micro, "rows per micro-batch per rank to consider (default: every divisor)");
  app.add_option("--precision", precision, "fp32 or bf16")->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--save-every", save_every, "periodic checkpoints every N steps (staging memory, the stall)");
  app.add_flag("--no-save-at-end", no_save_at_end, "the runs set ckpt.save_at_end = false: no staging copy for "
               "the end's save (counted by default, as every run saves at its end)");
  app.add_option("--set", sets, "section.key=value overrides of the model config");
  app.add_option("--top", top, "layouts to list (default 10)")->check(CLI::PositiveNumber);
  app.add_flag("--json", as_json, "JSON on stdout");
  app.add_option("--explain", explain_layout, "one layout's breakdown, e.g. dp2-tp1-pp2-z1-rc0-mb4");
  app.add_flag("--calibrate", do_calibrate, "measure this machine and write a cluster file");
  app.add_option("--output", output, "--calibrate: the cluster file to write (default: stdout)");
  app.add_option("--calibrate-model", cal_models, "--calibrate: a model config whose GEMM shapes to measure (repeatable)");
  app.add_option("--max-ranks", max_ranks, "--calibrate: TP splits and all-reduce curves up to this many ranks (default 4)")
      ->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "--calibrate: threads per rank (default 1)")->check(CLI::PositiveNumber);
  app.add_option("--rows", rows, "--calibrate: GEMM rows to measure (micro-batch rows x seq; default 512)");
  app.add_option("--mpirun", mpirun, "--calibrate: the MPI launcher command line ('' : no MPI measurements)");
  app.add_option("--calibrate-comm", comm_out, "(internal) under mpirun: measure the curves into this JSON file");
  app.add_option("--calibrate-probe", probe_out, "(internal) time the probe model's step into this JSON file");
  if (int rc = cli_parse(app, argc, argv, "plan", "info"); rc >= 0) return rc;

  if (!probe_out.empty()) {
    if (Status s = plan_calibrate_probe(probe_out); !s) {
      spdlog::error("{}", s.message());
      return kExitFailure;
    }
    return kExitOk;
  }

  if (!comm_out.empty()) {
    if (Status s = plan_calibrate_comm(comm_out); !s) {
      spdlog::error("{}", s.message());
      return kExitFailure;
    }
    return kExitOk;
  }
  if (do_calibrate) {
    if (!model_path.empty()) cal_models.insert(cal_models.begin(), model_path);
    return calibrate(cal_models, sets, output, max_ranks, threads, rows, mpirun);
  }
  if (model_path.empty() || cluster_path.empty() || global_batch <= 0) {
    std::fprintf(stderr, "smelt plan: --model, --cluster and --global-batch are required (or --calibrate)\n");
    return kExitUsage;
  }
  PlanRequest r;
  if (Status s = load_model(model_path, sets, r.model); !s) {
    spdlog::error("{}", s.message());
    return kExitUsage;
  }
  ClusterSpec c;
  if (Status s = cluster_load(cluster_path, c); !s) {
    spdlog::error("{}", s.message());
    return kExitUsage;
  }
  r.global_batch = global_batch;
  r.seq = seq > 0 ? seq : r.model.max_seq_len;
  r.precision = precision == "bf16" ? Precision::kBf16 : Precision::kFp32;
  r.ranks = ranks;
  r.save_every = save_every;
  r.save_at_end = !no_save_at_end;
  r.micro_batches = micro;
  const int world = ranks > 0 ? ranks : c.devices();
  const std::string head = fmt::format(
      "smelt plan: {} ({:.1f} M parameters, {} layers, d {}), global batch {} x {} tokens, {} ranks of '{}' ({}), {}\n",
      model_path, param_count(r.model) / 1e6, r.model.n_layers, r.model.d_model, global_batch, r.seq, world, c.name,
      cluster_path, precision);

  if (!explain_layout.empty()) {
    Layout l;
    if (Status s = layout_parse(explain_layout, l); !s) {
      spdlog::error("--explain: {}", s.message());
      return kExitUsage;
    }
    const int64_t per_rank = global_batch / l.dp;
    if (l.micro == 0) l.micro = (int)per_rank;
    l.accum = l.micro > 0 ? (int)(per_rank / l.micro) : 0;
    const Prediction p = plan_predict(r, c, l);
    if (as_json) {
      std::printf("%s\n", prediction_json(p).dump(2).c_str());
    } else {
      std::fputs(head.c_str(), stdout);
      std::fputs(explain(p).c_str(), stdout);
    }
    return p.memory.total() > 0 ? kExitOk : kExitFailure;
  }

  const std::vector<Prediction> all = plan_search(r, c);
  size_t fitting = 0;
  for (const Prediction& p : all) fitting += p.fits ? 1 : 0;
  if (as_json) {
    ojson j;
    j["model"] = model_path, j["cluster"] = cluster_path, j["cluster_name"] = c.name;
    j["global_batch"] = global_batch, j["seq"] = r.seq, j["ranks"] = world, j["precision"] = precision;
    j["layouts"] = ojson::array();
    for (const Prediction& p : all) j["layouts"].push_back(prediction_json(p));
    std::printf("%s\n", j.dump(2).c_str());
    return fitting > 0 ? kExitOk : kExitFailure;
  }
  std::string out = head;
  out += fmt::format("{:>3}  {:<24} {:>10} {:>10} {:>10} {:>11} {:>6}  {}\n", "#", "layout", "mem/rank", "limit",
                     "step ms", "tokens/s", "MFU", "largest cost");
  size_t shown = 0;
  for (const Prediction& p : all) {
    if (!p.fits || shown >= (size_t)top) continue;
    shown++;
    out += fmt::format("{:>3}  {:<24} {:>7.2f} GB {:>7.2f} GB {:>10.1f} {:>11.0f} {:>5.1f}%  {}\n", shown,
                       p.layout.name(), p.memory.total() / 1e9, p.memory_limit / 1e9, p.time.step_ms, p.tokens_per_s,
                       100 * p.mfu, p.time.dominant);
  }
  if (fitting > shown) out += fmt::format("     ... {} more that fit (--top N)\n", fitting - shown);
  if (all.size() > fitting) {
    out += fmt::format("rejected ({}):\n", all.size() - fitting);
    size_t listed = 0;
    for (const Prediction& p : all) {
      if (p.fits) continue;
      if (listed++ >= (size_t)top) {
        out += "  ... (--json lists them all)\n";
        break;
      }
      out += fmt::format("  {:<24} {}\n", p.layout.micro > 0 ? p.layout.name()
                                                             : fmt::format("dp{}-tp{}-pp{}", p.layout.dp, p.layout.tp, p.layout.pp),
                         p.reason);
    }
  }
  if (fitting == 0) out += "no layout fits: more devices, recompute, a smaller micro-batch or a smaller model\n";
  std::fputs(out.c_str(), stdout);
  return fitting > 0 ? kExitOk : kExitFailure;
}

}  // namespace smelt
