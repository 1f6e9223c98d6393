// `smelt train --config run.toml [--set key=value ...]` with the everyday overrides as plain flags
// (--data, --steps, --threads, --device, --run-dir, --seed, --resume, --trace-steps). Not the loop
// (train/trainer.hpp).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "smelt/cli/cli_parse.hpp"
#include "smelt/cli/commands.hpp"
#include "smelt/common/config.hpp"
#include "smelt/common/log.hpp"
#include "smelt/common/status.hpp"
#include "smelt/common/stop_signals.hpp"
#include "smelt/model/activations.hpp"
#include "smelt/obs/trace.hpp"
#include "smelt/train/init_from.hpp"
#include "smelt/train/train_config.hpp"
#include "smelt/train/trainer.hpp"

namespace smelt {

namespace {

// --init-from (or [train] init_from): the config's [model] and tokenizer become the source's
// before it is read (init_from.hpp).
int apply_init_from(toml::table& root) {
  const std::string from = root["train"]["init_from"].value_or(std::string());
  if (from.empty()) return kExitOk;
  InitSource src;
  if (Status s = init_from_resolve(from, src); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  std::vector<std::string> changed;
  init_from_apply(src, root, &changed);
  spdlog::info("[model] from {}{}", src.step_dir.empty() ? src.hf_dir : src.step_dir,
               changed.empty() ? std::string() : fmt::format(" ({} set from it)", fmt::join(changed, ", ")));
  return kExitOk;
}

}  // namespace

int cli_train(int argc, char** argv) {
  CLI::App app{"smelt train: train the Llama-style decoder on token shards (docs/train.md)"};
  app.name("smelt train");
  std::string config_path, data, run_dir, trace_steps, device, init_from;
  std::vector<std::string> sets;
  int64_t steps = -1, save_every = -1;
  int threads = -1;
  int64_t seed = -1;
  bool resume = false, print_config = false, dry_run = false, json_out = false;
  app.add_option("-c,--config", config_path, "run config (TOML): [model] [data] [train] [optim] [eval] [ckpt]")
      ->check(CLI::ExistingFile);
  app.add_option("--set", sets, "override a config key: section.key=value (repeatable)");
  app.add_option("--data", data, "token shards: [NAME=]PREFIX[:WEIGHT],... (data.sources)");
  app.add_option("--steps", steps, "optimizer steps (train.steps)")->check(CLI::NonNegativeNumber);
  app.add_option("--threads", threads, "threads (train.threads; 0 = every core)")->check(CLI::NonNegativeNumber);
  app.add_option("--device", device, "where the steps run: cpu, or cuda for one NVIDIA GPU (train.device; docs/cuda.md)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--run-dir", run_dir, "run folder: metrics.jsonl, checkpoints/, config.toml (train.run_dir)");
  app.add_option("--seed", seed, "seed of the weight init and the data order (train.seed and data.seed)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--save-every", save_every, "checkpoint every N steps (ckpt.save_every; 0: at the end and on a signal)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--trace-steps", trace_steps,
                 "write a timeline trace of steps A-B (or one step N) to RUN/trace/rank*.json (trace.steps; "
                 "docs/trace.md)");
  app.add_flag("--resume", resume, "continue from the newest valid checkpoint in the run folder");
  app.add_option("--init-from", init_from,
                 "start from these weights: a run folder, a checkpoint step folder or a Hugging Face folder "
                 "(train.init_from; fresh optimizer and schedule; docs/import.md)");
  app.add_flag("--print-config", print_config, "print the resolved configuration and exit");
  app.add_flag("--dry-run", dry_run, "plan the memory, check the data and exit");
  app.add_flag("--json", json_out, "print the summary as JSON on stdout");
  if (int rc = cli_parse(app, argc, argv, "train"); rc >= 0) return rc;
  toml::table root;
  if (Status s = config_load(config_path, root); !s) {
    spdlog::error("{}", s.message());
    return kExitUsage;
  }
  if (!data.empty()) sets.push_back("data.sources=\"" + data + "\"");
  if (steps >= 0) sets.push_back(fmt::format("train.steps={}", steps));
  if (threads >= 0) sets.push_back(fmt::format("train.threads={}", threads));
  if (save_every >= 0) sets.push_back(fmt::format("ckpt.save_every={}", save_every));
  if (!run_dir.empty()) sets.push_back("train.run_dir=\"" + run_dir + "\"");
  if (!device.empty()) sets.push_back("train.device=\"" + device + "\"");
  if (!init_from.empty()) sets.push_back("train.init_from=\"" + init_from + "\"");
  if (!trace_steps.empty()) {
    int64_t first = 0, last = -1;
    Status s = trace_parse_steps(trace_steps, first, last);
    if (s && first == 0)
      s = Status::error(fmt::format("\"{}\": expected a step \"N\" or a range of steps \"A-B\"", trace_steps));
    if (!s) {
      spdlog::error("--trace-steps {}", s.message());
      return kExitUsage;
    }
    sets.push_back(fmt::format("trace.steps=\"{}-{}\"", first, last));
  }
  if (seed >= 0) {
    sets.push_back(fmt::format("train.seed={}", seed));
    sets.push_back(fmt::format("data.seed={}", seed));
  }
  if (Status st = config_apply_sets(root, sets); !st) {
    spdlog::error("{}", st.message());
    return kExitUsage;
  }
  if (int rc = apply_init_from(root); rc != kExitOk) return rc;
  TrainConfig c;
  if (Status s = train_config_read(root, c); !s) {
    spdlog::error("{}", s.message());
    return kExitUsage;
  }
  c.resume = resume;
  if (print_config) {
    std::fputs(train_config_to_string(c).c_str(), stdout);
    return kExitOk;
  }
  if (dry_run) {
    // Model::init prints the plan and refuses what does not fit; nothing is allocated before that.
    int B = 1, T = 1;
    train_batch_shape(c.data, B, T);
    int ranks = 1;  // under mpirun, ZeRO-1 shards the optimizer state over the ranks
    if (const char* v = std::getenv("OMPI_COMM_WORLD_SIZE")) ranks = std::max(1, std::atoi(v));
    // The run's precision and threads, as the trainer takes them.
    const Precision precision = train_precision(c);
    MemoryPlan p = memory_plan(c.model, ModelShard{}, B, T, c.dist.zero == 1 ? ranks : 1, precision, train_threads(c), 1,
                               c.lora.enabled() ? &c.lora : nullptr);
    const int64_t budget = c.train.memory_mb > 0 ? c.train.memory_mb << 20 : memory_physical_bytes();
    std::printf("memory plan for batch %dx%d (%s):\n%s", B, T, precision_name(precision), p.report().c_str());
    if (Status s = memory_plan_check(p, budget); !s) {
      spdlog::error("{}", s.message());
      return kExitFailure;
    }
    std::printf("fits in %.1f GiB\n", budget / 1073741824.0);
    return kExitOk;
  }
  TrainSummary sum;
  Status s;
  {
    // Before any thread starts: SIGINT/SIGTERM then reach only a watcher thread, never a thread
    // inside a oneDNN GEMM (whose JIT code points rsp into the heap, see stop_signals.hpp).
    StopSignals stop(train_request_stop);
    s = train_run(c, sum);
  }
  if (!s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  if (!sum.lead) return kExitOk;  // other ranks: rank 0 reports
  std::fputs(sum.text.c_str(), stderr);
  if (json_out) std::printf("%s\n", sum.json.dump(2).c_str());
  return kExitOk;
}

}  // namespace smelt
