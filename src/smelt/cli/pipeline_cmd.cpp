// `smelt pipeline CONFIG`: every stage in order — prep, tokenizer train, tokenize (train and held-out
// shards), train, eval (bits per byte beside gzip / zstd / xz), generate (greedy and sampled
// continuations of each prompt) — each run as its own `smelt` process on one resolved config file,
// then the summary (pipeline_summary.hpp). Not the stages themselves (their *_cmd.cpp files) nor the
// config's pipeline sections (pipeline_config.hpp).
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "smelt/cli/cli_parse.hpp"
#include "smelt/cli/commands.hpp"
#include "smelt/cli/pipeline_config.hpp"
#include "smelt/cli/pipeline_summary.hpp"
#include "smelt/common/config.hpp"
#include "smelt/common/files.hpp"
#include "smelt/common/log.hpp"
#include "smelt/common/status.hpp"

extern char** environ;

namespace smelt {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Runs `smelt ARGS...`; stdout goes to stdout_path when given. Returns the exit code.
int run_stage(const std::vector<std::string>& args, const std::string& stdout_path = "") {
  std::vector<std::string> full = {cli_self_exe()};
  full.insert(full.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : full) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::string shown;
  for (size_t i = 1; i < full.size(); i++) shown += (i > 1 ? " " : "") + full[i];
  spdlog::info("$ smelt {}", shown);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (!stdout_path.empty())
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    spdlog::error("cannot start {}: {}", argv[0], std::strerror(rc));
    return kExitFailure;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return kExitFailure;
}


}  // namespace

int cli_pipeline(int argc, char** argv) {
  CLI::App app{"smelt pipeline: prep -> tokenizer train -> tokenize -> train -> generate, from one config"};
  app.name("smelt pipeline");
  std::string config_path, from;
  std::vector<std::string> sets;
  int threads = 0;
  app.add_option("config", config_path, "pipeline config (TOML): [pipeline] [prep.*] [tokenizer] [tokenize] [model] "
                                        "[data] [train] [optim] [eval] [ckpt] [generate]")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("--set", sets, "override a config key: section.key=value (repeatable)");
  app.add_option("--from", from, "start at this stage (the earlier ones' outputs must exist)")
      ->check(CLI::IsMember(kPipelineStages));
  app.add_option("--threads", threads, "threads for every stage (0: every core)")->check(CLI::NonNegativeNumber);
  if (int rc = cli_parse(app, argc, argv, "pipeline"); rc >= 0) return rc;
  toml::table root;
  if (Status s = config_load(config_path, root); !s) {
    spdlog::error("{}", s.message());
    return kExitUsage;
  }
  if (Status st = config_apply_sets(root, sets); !st) {
    spdlog::error("{}", st.message());
    return kExitUsage;
  }
  PipelineConfig c;
  if (Status s = pipeline_config_read(root, c); !s) {
    spdlog::error("{}", s.message());
    return kExitUsage;
  }
  const fs::path w = c.workdir;
  std::error_code ec;
  fs::create_directories(w, ec);
  if (ec) {
    spdlog::error("{}: cannot create the work folder: {}", c.workdir, ec.message());
    return kExitFailure;
  }
  // Every stage reads the same resolved file (the --set overrides included).
  const std::string cfg = (w / "pipeline.toml").string();
  if (Status s = files_write_atomic(cfg, config_to_string(root)); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  const std::string refined = (w / "refined").string(), parts = (w / "refined" / "part-*.jsonl.zst").string();
  const std::string tokenizer = (w / "tokenizer.json").string(), tokens = (w / "tokens").string();
  const std::string cloze = (w / "tasks" / "heldout-cloze").string();
  const std::string valid = (w / "valid").string(), run = (w / "run").string(), sample = (w / "sample.txt").string();
  const std::string th = std::to_string(threads);
  // The training shards and the trainer's data sources made of them.
  std::vector<PipelineShard> shards;
  std::string sources;
  if (c.language_weights.empty()) shards.push_back({"", tokens, 1.0});
  for (const auto& [lang, weight] : c.language_weights) shards.push_back({lang, tokens + "-" + lang, weight});
  for (const PipelineShard& sh : shards)
    sources += sh.name.empty() ? sh.prefix
                               : fmt::format("{}{}={}:{:g}", sources.empty() ? "" : ",", sh.name, sh.prefix, sh.weight);

  auto wanted = [&](const std::string& s) {
    if (std::find(c.stages.begin(), c.stages.end(), s) == c.stages.end()) return false;
    if (from.empty()) return true;
    return std::find(kPipelineStages.begin(), kPipelineStages.end(), s) >= std::find(kPipelineStages.begin(), kPipelineStages.end(), from);
  };
  nlohmann::ordered_json stages = nlohmann::ordered_json::object();
  const auto t_all = std::chrono::steady_clock::now();
  int n = 0, total = 0;
  for (const auto& s : kPipelineStages) total += wanted(s);
  // A run per shard, one held out, and the cloze task made of the held-out documents.
  if (wanted("tokenize")) total += (int)shards.size() - 1 + 2 * (c.holdout > 0);
  if (wanted("eval")) total += c.holdout > 0 ? 1 : -1;  // the tasks beside the held-out loss; nothing held out: no eval
  auto stage = [&](const std::string& name, const std::vector<std::string>& args, const std::string& out = "") {
    spdlog::info("stage {}/{}: {}", ++n, total, name);
    const auto t0 = std::chrono::steady_clock::now();
    int rc = run_stage(args, out);
    double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    stages[name] = {{"exit_code", rc}, {"seconds", sec}};
    if (rc != 0) spdlog::error("stage {} failed (exit {}); fix it and rerun with --from {}", name, rc, name);
    return rc;
  };

  if (wanted("prep")) {
    // A pipeline run refines from scratch (--from skips stages whose outputs are good).
    std::vector<std::string> a = {"prep", "--config", cfg, "--output", refined, "--threads", th, "--overwrite",
                                  "--input"};
    a.insert(a.end(), c.inputs.begin(), c.inputs.end());
    if (int rc = stage("prep", a); rc) return rc;
  }
  if (wanted("tokenizer")) {
    std::vector<std::string> a = {"tokenizer", "train", "--input", parts, "--output", tokenizer,
                                  "--vocab-size", std::to_string(c.vocab_size), "--pretokenizer", c.pretokenizer,
                                  "--special-tokens", c.special_tokens, "--threads", th};
    if (c.tokenizer_memory_mb > 0) a.insert(a.end(), {"--memory-mb", std::to_string(c.tokenizer_memory_mb)});
    if (int rc = stage("tokenizer", a); rc) return rc;
  }
  if (wanted("tokenize")) {
    // Each training shard (its language's documents only, under language_weights), then the
    // held-out documents of every language in one shard: the bits per byte are of the held-out
    // text as it is, whatever the training mix.
    auto tokenize = [&](const std::string& name, const std::string& out, const std::string& side,
                        const std::string& lang) {
      std::vector<std::string> a = {"tokenize", "--tokenizer", tokenizer, "--input", parts, "--output", out,
                                    "--append-eod", "--threads", th, "--overwrite"};
      if (c.holdout > 0) a.insert(a.end(), {"--holdout", fmt::format("{}", c.holdout), "--side", side});
      if (!lang.empty()) a.insert(a.end(), {"--languages", lang});
      return stage(name, a);
    };
    for (const PipelineShard& sh : shards)
      if (int rc = tokenize(sh.name.empty() ? "tokenize" : "tokenize_" + sh.name, sh.prefix, "rest", sh.name); rc)
        return rc;
    if (c.holdout > 0) {
      if (int rc = tokenize("tokenize_holdout", valid, "holdout", ""); rc) return rc;
      // A multiple-choice task from the held-out documents (docs/eval.md): scored during training
      // and on the final checkpoint, beside its chance level. Too little held-out text for one
      // (a small crawl): the run goes on without it.
      std::error_code ec;
      for (const char* ext : {".toml", ".jsonl"}) fs::remove(cloze + ext, ec);
      spdlog::info("stage {}/{}: cloze_task", ++n, total);
      const auto t0 = std::chrono::steady_clock::now();
      const int rc = run_stage({"eval", "--make-cloze", valid, "--tokenizer", tokenizer, "--task-out", cloze, "--items",
                                "500", "--seed", std::to_string(c.seed)}, "");
      stages["cloze_task"] = {{"exit_code", rc},
                              {"seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()}};
      if (rc) spdlog::warn("no cloze task from the held-out text (its message is above): the run has no downstream task");
    }
  }
  const bool has_tasks = c.holdout > 0 && fs::exists(cloze + ".toml");
  if (wanted("train")) {
    std::vector<std::string> a = {"train", "--config", cfg, "--data", sources, "--run-dir", run,
                                  "--threads", th, "--set", "train.tokenizer=\"" + tokenizer + "\"",
                                  "--set", "data.append_eod=false"};
    if (c.holdout > 0) a.insert(a.end(), {"--set", "eval.data=\"" + valid + "\""});
    if (has_tasks) a.insert(a.end(), {"--set", "eval.tasks=[\"" + cloze + ".toml\"]"});  // [eval] task_limit: the config's
    if (int rc = stage("train", a); rc) return rc;
  }
  const std::string eval_json = (w / "eval.json").string(), tasks_json = (w / "tasks.json").string();
  if (wanted("eval") && c.holdout > 0) {
    // The final model on the held-out text, and what gzip / zstd / xz make of the same bytes.
    std::vector<std::string> a = {"eval", "--checkpoint", run, "--data", valid, "--max-tokens",
                                  std::to_string(c.eval_tokens), "--compressors", "--output", eval_json,
                                  "--threads", th};
    if (int rc = stage("eval", a, "/dev/null"); rc) return rc;
    std::error_code ec;
    fs::remove(tasks_json, ec);
    a = {"eval", "--checkpoint", run, "--tasks", cloze + ".toml", "--output", tasks_json, "--threads", th};
    if (has_tasks)
      if (int rc = stage("eval_tasks", a, "/dev/null"); rc) return rc;
  }
  std::vector<PipelineSample> samples;
  if (wanted("generate")) {
    spdlog::info("stage {}/{}: generate", ++n, total);
    const auto t0 = std::chrono::steady_clock::now();
    std::string all;
    int rc = 0;
    for (size_t i = 0; i < c.prompts.size() && rc == 0; i++)
      for (const char* mode : {"greedy", "sampled"}) {
        const bool greedy = std::string(mode) == "greedy";
        const std::string out = (w / fmt::format(".sample-{}-{}.json", i, mode)).string();
        std::vector<std::string> a = {"generate", "--checkpoint", run, "--prompt", c.prompts[i],
                                      "--max-new-tokens", std::to_string(c.max_new_tokens),
                                      "--temperature", greedy ? std::string("0") : fmt::format("{}", c.temperature),
                                      "--top-k", std::to_string(c.top_k), "--seed", std::to_string(c.seed),
                                      "--repeat-penalty", fmt::format("{}", c.repeat_penalty),
                                      "--frequency-penalty", fmt::format("{}", c.frequency_penalty),
                                      "--presence-penalty", fmt::format("{}", c.presence_penalty), "--json"};
        if (threads > 0) a.insert(a.end(), {"--threads", th});  // generate picks its own default otherwise
        if ((rc = run_stage(a, out)) != 0) break;
        json g = pipeline_read_json(out);
        std::error_code ec;
        fs::remove(out, ec);
        PipelineSample smp{c.prompts[i], mode, g.is_object() ? g.value("text", std::string()) : std::string()};
        all += fmt::format("=== {} ({}) ===\n{}{}\n\n", smp.prompt, smp.mode, smp.prompt, smp.text);
        samples.push_back(std::move(smp));
      }
    stages["generate"] = {{"exit_code", rc},
                          {"seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()}};
    if (rc != 0) {
      spdlog::error("stage generate failed (exit {}); fix it and rerun with --from generate", rc);
      return rc;
    }
    if (Status s = files_write_atomic(sample, all); !s) {
      spdlog::error("{}", s.message());
      return kExitFailure;
    }
  }
  PipelineSummaryInput in;
  in.config_path = config_path;
  in.refined = refined, in.tokenizer = tokenizer, in.tokens = sources, in.shards = shards;
  in.valid = c.holdout > 0 ? valid : "";
  in.run = run, in.eval = fs::exists(eval_json) ? eval_json : "", in.sample = sample;
  in.tasks = fs::exists(tasks_json) ? tasks_json : "";
  in.smelt = cli_smelt_command();
  in.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_all).count();
  in.stages = stages;
  in.samples = samples;
  std::string penalties;
  if (c.repeat_penalty != 1.0)
    penalties += fmt::format(", repeat penalty {} over the last 64 tokens", c.repeat_penalty);
  if (c.frequency_penalty != 0.0) penalties += fmt::format(", frequency penalty {}", c.frequency_penalty);
  if (c.presence_penalty != 0.0) penalties += fmt::format(", presence penalty {}", c.presence_penalty);
  in.sampling = fmt::format("greedy = temperature 0; sampled = temperature {}, top-k {}, seed {}{}", c.temperature,
                            c.top_k, c.seed, penalties.empty() ? "" : "; both with" + penalties.substr(1));
  std::string text;
  json j;
  pipeline_summary(in, text, j);
  if (Status s = files_write_atomic((w / "pipeline.json").string(), j.dump(2, ' ', false, json::error_handler_t::replace) + "\n"); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  text += fmt::format("  summary JSON   {}\n", (w / "pipeline.json").string());
  std::fputs(text.c_str(), stderr);
  return kExitOk;
}

}  // namespace smelt
