// `smelt pipeline CONFIG`: every stage in order — prep, tokenizer train, tokenize (train and held-out
// shards), train, generate — each run as its own `smelt` process on one resolved config file, then a
// summary (artifacts, validation loss before and after, tokens/s, MFU) for people and as JSON.
// Not the stages themselves (their *_cmd.cpp files).
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
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "smelt/cli/cli_parse.hpp"
#include "smelt/cli/commands.hpp"
#include "smelt/common/config.hpp"
#include "smelt/common/files.hpp"
#include "smelt/common/log.hpp"
#include "smelt/common/status.hpp"

extern char** environ;

namespace smelt {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::vector<std::string> kStages = {"prep", "tokenizer", "tokenize", "train", "generate"};

struct PipelineConfig {
  std::vector<std::string> inputs;  // [pipeline] raw input for prep
  std::string workdir = "data/pipeline";
  std::vector<std::string> stages = kStages;
  // [tokenizer]
  int64_t vocab_size = 16384;
  std::string pretokenizer = "llama3";
  std::string special_tokens = "<|endoftext|>";
  int64_t tokenizer_memory_mb = 0;
  // [tokenize]
  double holdout = 0.01;
  // [generate]
  std::string prompt = "The";
  int64_t max_new_tokens = 64;
  double temperature = 0.8;
  int64_t top_k = 40;
  uint64_t seed = 1;
};

Status read_config(const toml::table& root, PipelineConfig& c) {
  std::vector<std::string> errors;
  ConfigSection p(root, "pipeline");
  p.get("inputs", c.inputs);
  p.get("workdir", c.workdir);
  p.get("stages", c.stages);
  for (auto& e : p.finish()) errors.push_back(e);
  ConfigSection t(root, "tokenizer");
  t.get("vocab_size", c.vocab_size);
  t.get("pretokenizer", c.pretokenizer);
  t.get("special_tokens", c.special_tokens);
  t.get("memory_mb", c.tokenizer_memory_mb);
  for (auto& e : t.finish()) errors.push_back(e);
  ConfigSection k(root, "tokenize");
  k.get("holdout", c.holdout);
  for (auto& e : k.finish()) errors.push_back(e);
  ConfigSection g(root, "generate");
  g.get("prompt", c.prompt);
  g.get("max_new_tokens", c.max_new_tokens);
  g.get("temperature", c.temperature);
  g.get("top_k", c.top_k);
  g.get("seed", c.seed);
  for (auto& e : g.finish()) errors.push_back(e);
  for (const auto& s : c.stages)
    if (std::find(kStages.begin(), kStages.end(), s) == kStages.end())
      errors.push_back(fmt::format("[pipeline] stages: \"{}\" is not a stage; allowed: prep, tokenizer, tokenize, "
                                   "train, generate", s));
  if (c.inputs.empty() && std::find(c.stages.begin(), c.stages.end(), "prep") != c.stages.end())
    errors.push_back("[pipeline] inputs is empty: list the raw input files or folders for prep");
  if (!(c.holdout >= 0 && c.holdout < 1))
    errors.push_back(fmt::format("[tokenize] holdout = {}: must be in [0, 1)", c.holdout));
  if (c.vocab_size < 257) errors.push_back(fmt::format("[tokenizer] vocab_size = {}: must be >= 257", c.vocab_size));
  if (!errors.empty()) {
    std::string m = errors[0];
    for (size_t i = 1; i < errors.size(); ++i) m += "\n" + errors[i];
    return Status::error(m);
  }
  return Status::ok();
}

std::string self_exe() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("smelt") : p.string();
}

// Runs `smelt ARGS...`; stdout goes to stdout_path when given. Returns the exit code.
int run_stage(const std::vector<std::string>& args, const std::string& stdout_path = "") {
  std::vector<std::string> full = {self_exe()};
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

json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) return json();
  return json::parse(in, nullptr, false);
}

std::string fmt_bytes(uintmax_t b) {
  if (b >= (1u << 30)) return fmt::format("{:.1f} GB", b / 1073741824.0);
  if (b >= (1u << 20)) return fmt::format("{:.1f} MB", b / 1048576.0);
  return fmt::format("{:.1f} KB", b / 1024.0);
}

uintmax_t size_of(const fs::path& p) {
  std::error_code ec;
  if (fs::is_regular_file(p, ec)) return fs::file_size(p, ec);
  uintmax_t n = 0;
  if (fs::is_directory(p, ec))
    for (auto& e : fs::recursive_directory_iterator(p, ec))
      if (e.is_regular_file(ec)) n += e.file_size(ec);
  return n;
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
      ->check(CLI::IsMember(kStages));
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
  if (Status s = read_config(root, c); !s) {
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
  const std::string valid = (w / "valid").string(), run = (w / "run").string(), sample = (w / "sample.txt").string();
  const std::string th = std::to_string(threads);

  auto wanted = [&](const std::string& s) {
    if (std::find(c.stages.begin(), c.stages.end(), s) == c.stages.end()) return false;
    if (from.empty()) return true;
    return std::find(kStages.begin(), kStages.end(), s) >= std::find(kStages.begin(), kStages.end(), from);
  };
  json stages = json::object();
  const auto t_all = std::chrono::steady_clock::now();
  int n = 0, total = 0;
  for (const auto& s : kStages) total += wanted(s);
  if (wanted("tokenize") && c.holdout > 0) total++;  // the held-out shards are a second run
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
    for (const auto& side : {std::string("rest"), std::string("holdout")}) {
      if (side == "holdout" && c.holdout <= 0) break;
      const std::string out = side == "rest" ? tokens : valid;
      std::vector<std::string> a = {"tokenize", "--tokenizer", tokenizer, "--input", parts, "--output", out,
                                    "--append-eod", "--threads", th, "--overwrite"};
      if (c.holdout > 0) a.insert(a.end(), {"--holdout", fmt::format("{}", c.holdout), "--side", side});
      if (int rc = stage(side == "rest" ? "tokenize" : "tokenize_holdout", a); rc) return rc;
    }
  }
  if (wanted("train")) {
    std::vector<std::string> a = {"train", "--config", cfg, "--data", tokens, "--run-dir", run,
                                  "--threads", th, "--set", "train.tokenizer=\"" + tokenizer + "\"",
                                  "--set", "data.append_eod=false"};
    if (c.holdout > 0) a.insert(a.end(), {"--set", "eval.data=\"" + valid + "\""});
    if (int rc = stage("train", a); rc) return rc;
  }
  if (wanted("generate")) {
    std::vector<std::string> a = {"generate", "--checkpoint", run, "--prompt", c.prompt,
                                  "--max-new-tokens", std::to_string(c.max_new_tokens),
                                  "--temperature", fmt::format("{}", c.temperature),
                                  "--top-k", std::to_string(c.top_k), "--seed", std::to_string(c.seed)};
    if (threads > 0) a.insert(a.end(), {"--threads", th});  // generate picks its own default otherwise
    if (int rc = stage("generate", a, sample); rc) return rc;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_all).count();

  // The summary.
  json prep = read_json(refined + "/stats.json"), tok = read_json(tokens + ".stats.json");
  json tr = read_json(run + "/summary.json");
  json j;
  j["stage"] = "pipeline";
  j["config"] = cfg;
  j["seconds"] = seconds;
  j["stages"] = stages;
  j["artifacts"] = {{"refined", refined}, {"tokenizer", tokenizer}, {"tokens", tokens},
                    {"valid", c.holdout > 0 ? valid : ""}, {"run", run}, {"sample", sample}};
  j["prep"] = prep.is_object() ? json{{"docs_in", prep.value("/docs/in"_json_pointer, json())},
                                      {"docs_out", prep.value("/docs/out"_json_pointer, json())}}
                               : json();
  j["tokens"] = tok.is_object() ? tok.value("tokens", json()) : json();
  j["train"] = tr.is_object() ? tr : json();
  std::string text = fmt::format("\npipeline {} done in {:.1f} min\n", config_path, seconds / 60);
  for (auto& [k, v] : stages.items()) text += fmt::format("  {:<17} {:7.1f} s\n", k, v["seconds"].get<double>());
  text += fmt::format("  refined text   {} ({})\n", refined, fmt_bytes(size_of(refined)));
  text += fmt::format("  tokenizer      {}\n", tokenizer);
  if (tok.is_object())
    text += fmt::format("  token shards   {}.bin/.idx ({} tokens){}\n", tokens, tok.value("tokens", 0ull),
                        c.holdout > 0 ? fmt::format(", held out: {}.bin/.idx", valid) : std::string());
  if (tr.is_object()) {
    const json& tm = tr["timing"];
    text += fmt::format("  model          {} ({} parameters), checkpoint {}\n", run, tr.value("parameters", 0ll),
                        tr.value("checkpoint", std::string()));
    if (!tr["eval_first"].is_null())
      text += fmt::format("  validation     loss {:.3f} -> {:.3f} (perplexity {:.0f} -> {:.0f})\n",
                          tr["eval_first"].get<double>(), tr["eval_last"].get<double>(),
                          std::exp(tr["eval_first"].get<double>()), std::exp(tr["eval_last"].get<double>()));
    text += fmt::format("  training       {} steps, {:.0f} tokens/s ({}), MFU {:.1f}% of the model's GEMMs at "
                        "{:.1f} GFLOP/s, {:.1f}% of the CPU's peak {:.1f} GFLOP/s\n",
                        tr.value("steps", 0ll), tm.value("tokens_per_s", 0.0), tm.value("precision", std::string("fp32")),
                        100 * tm.value("mfu", 0.0), tm.value("gemm_gflops", 0.0), 100 * tm.value("mfu_peak", 0.0),
                        tm.value("peak_gflops", 0.0));
  }
  if (fs::exists(sample)) {
    std::ifstream in(sample);
    std::string s((std::istreambuf_iterator<char>(in)), {});
    j["sample_text"] = s;
    text += fmt::format("  sample         \"{}\" ->\n{}\n", c.prompt, s);
  }
  if (Status s = files_write_atomic((w / "pipeline.json").string(), j.dump(2) + "\n"); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  text += fmt::format("  summary JSON   {}\n", (w / "pipeline.json").string());
  std::fputs(text.c_str(), stderr);
  return kExitOk;
}

}  // namespace smelt
