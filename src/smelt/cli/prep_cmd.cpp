// `smelt prep`: flags and config file into PrepConfig, then the stage; prints the summary and
// maps failures to exit codes (2 usage or missing input, 1 failure). Not the stage itself (refine/prep).
#include <cstdio>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "smelt/cli/cli_parse.hpp"
#include "smelt/cli/commands.hpp"
#include "smelt/cli/full_exec.hpp"
#include "smelt/cli/prep_reference.hpp"
#include "smelt/cli/stage_run.hpp"
#include "smelt/common/config.hpp"
#include "smelt/common/files.hpp"
#include "smelt/common/log.hpp"
#include "smelt/refine/prep.hpp"

namespace smelt {

namespace {
PrepReferenceFactory g_reference_factory = nullptr;
}  // namespace

void set_prep_reference_factory(PrepReferenceFactory f) { g_reference_factory = f; }
PrepReferenceFactory prep_reference_factory() { return g_reference_factory; }

int cli_prep(int argc, char** argv) {
  CLI::App app{"smelt prep: raw HTML / WARC / JSONL / text (plain, .gz, .zst) -> refined, deduplicated "
               "JSONL.zst parts and stats.json"};
  app.name("smelt prep");
  std::vector<std::string> inputs, sets;
  std::string output, config_path, only, labels;
  int threads = -1, task = -1, tasks = -1;
  int64_t keep_rejected = -1, seed = -1;
  bool overwrite = false;
  bool print_config = false;
  app.add_option("-i,--input", inputs, "input files, folders or globs (required)");
  app.add_option("-o,--output", output, "output folder (required)");
  app.add_flag("--print-config", print_config, "print the resolved configuration (defaults + file + overrides) and exit");
  app.add_option("-c,--config", config_path, "TOML file with a [prep] section")->check(CLI::ExistingFile);
  app.add_option("-t,--threads", threads, "worker threads (default: all cores)")->check(CLI::NonNegativeNumber);
  app.add_option("--task", task, "this task's index, 0-based (with --tasks)")->check(CLI::NonNegativeNumber);
  app.add_option("--tasks", tasks, "split the inputs into this many tasks")->check(CLI::PositiveNumber);
  app.add_option("--only", only,
                 "run one stage alone: 'extract' (extraction only) or 'score' (a score pass: the histograms a "
                 "real pass reads its thresholds from, no output parts)")
      ->check(CLI::IsMember({"extract", "score"}));
  app.add_option("--keep-rejected", keep_rejected, "keep N examples per drop reason in DIR/rejected/")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", seed, "sampling seed")->check(CLI::NonNegativeNumber);
  app.add_option("--labels", labels,
                 "a labelled crawl's labels (JSON lines: url or id, kind, keep): the summary and stats.json "
                 "tally the drop decision per kind");
  app.add_option("--set", sets, "override a config key: section.key=value (repeatable)");
  app.add_flag("--overwrite", overwrite, "replace an earlier, different run in the output folder");
  if (int rc = cli_parse(app, argc, argv, "prep"); rc >= 0) return rc;

  toml::table root;
  if (Status s = config_load(config_path, root); !s) {
    spdlog::error("{}", s.message());
    return kExitUsage;
  }
  // flags are overrides too, so the resolved config records them
  if (threads >= 0) sets.push_back(fmt::format("prep.threads={}", threads));
  if (task >= 0) sets.push_back(fmt::format("prep.task={}", task));
  if (tasks >= 0) sets.push_back(fmt::format("prep.tasks={}", tasks));
  if (keep_rejected >= 0) sets.push_back(fmt::format("prep.keep_rejected={}", keep_rejected));
  if (seed >= 0) sets.push_back(fmt::format("prep.seed={}", seed));
  if (!labels.empty()) sets.push_back("prep.labels=" + nlohmann::json(labels).dump());  // a TOML basic string
  if (only == "extract") sets.push_back("prep.only_extract=true");
  if (only == "score") sets.push_back("prep.only_score=true");
  if (Status st = config_apply_sets(root, sets); !st) {
    spdlog::error("{}", st.message());
    return kExitUsage;
  }
  PrepConfig c;
  if (Status s = prep_config_read(root, c); !s) {
    spdlog::error("{}{}", config_path.empty() ? "" : config_path + ": ", s.message());
    return kExitUsage;
  }
  if (print_config) {
    std::fputs((config_to_string(prep_config_to_toml(c)) + "\n").c_str(), stdout);
    return kExitOk;
  }
  c.inputs = inputs;
  c.output = output;
  c.overwrite = overwrite;
  if (Status s = prep_config_validate(c); !s) {
    spdlog::error("{}", s.message());
    return kExitUsage;
  }
  std::vector<std::string> files;
  if (Status s = files_expand_inputs(c.inputs, files); !s) {
    spdlog::error("{}", s.message());
    return kExitUsage;
  }

  // the reference model of [prep.perplexity], loaded before any output; the light binary has no
  // decoder and hands the whole command to smelt-full
  std::unique_ptr<ReferenceScorer> ref;
  if (!c.perplexity.checkpoint.empty() && !c.only_extract) {
    PrepReferenceFactory make = prep_reference_factory();
    // cli_main runs a command with (argc - 1, argv + 1): argv - 1 is the whole command line again
    if (!make) return exec_full_binary(argc + 1, argv - 1);
    PerplexityConfig p = c.perplexity;
    if (p.contexts == 0) p.contexts = c.threads > 0 ? c.threads : static_cast<int>(std::thread::hardware_concurrency());
    if (Status s = make(p, ref); !s) {
      spdlog::error("[prep.perplexity] {}", s.message());
      return kExitFailure;
    }
  }
  return cli_run_stage<PrepSummary>([&](PrepSummary& summary) { return prep_run(c, summary, ref.get()); });
}

}  // namespace smelt
