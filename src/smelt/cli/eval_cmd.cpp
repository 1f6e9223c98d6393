// `smelt eval --checkpoint DIR --data PREFIX [--max-tokens N]`: loss and perplexity of a checkpoint
// on held-out tokens; a line for people on stderr, JSON on stdout (and in --output).
// Not the evaluation itself (train/trainer.hpp evaluate).
#include <cstdio>
#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/cli/cli_parse.hpp"
#include "smelt/cli/commands.hpp"
#include "smelt/common/files.hpp"
#include "smelt/common/log.hpp"
#include "smelt/common/status.hpp"
#include "smelt/model/model.hpp"
#include "smelt/train/train_config.hpp"
#include "smelt/train/trainer.hpp"

namespace smelt {

namespace fs = std::filesystem;

int cli_eval(int argc, char** argv) {
  CLI::App app{"smelt eval: loss and perplexity of a checkpoint on held-out tokens"};
  app.name("smelt eval");
  std::string ckpt, data, output;
  int64_t max_tokens = 1 << 20;
  int threads = 0;
  app.add_option("--checkpoint", ckpt, "a checkpoint step folder, or a run folder (its newest valid checkpoint)")
      ->required();
  app.add_option("--data", data, "held-out token shards: [NAME=]PREFIX[:WEIGHT],...")->required();
  app.add_option("--max-tokens", max_tokens, "evaluate at most this many target tokens (default 1048576)")
      ->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "threads (0 = every core)")->check(CLI::NonNegativeNumber);
  app.add_option("--output", output, "also write the JSON result to this file");
  if (int rc = cli_parse(app, argc, argv, "eval", "warn"); rc >= 0) return rc;
  std::string dir = ckpt;
  if (fs::exists(fs::path(ckpt) / "checkpoints")) {
    std::vector<std::string> warnings;
    if (Status s = ckpt_find_latest(ckpt, dir, &warnings); !s) {
      spdlog::error("{}", s.message());
      return kExitFailure;
    }
    for (const auto& w : warnings) spdlog::warn("{}", w);
  }
  if (Status s = ckpt_verify(dir); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  CkptManifest m;
  ModelConfig mc;
  std::vector<float> params;
  if (Status s = ckpt_load_model(dir, mc, params, &m); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  // The batch shape of the run (its [data] section), the sources from --data.
  TrainConfig tc;
  toml::table root;
  try {
    root = toml::parse(m.config_toml);
  } catch (const toml::parse_error& e) {
    spdlog::error("{}: the stored config does not parse: {}", dir, e.description());
    return kExitFailure;
  }
  LoaderConfig lc;
  if (Status s = loader_config_read(root, lc); !s) {
    spdlog::error("{}: stored [data]: {}", dir, s.message());
    return kExitFailure;
  }
  lc.prefetch_threads = 0;
  lc.stream_tokenizer.clear();
  int B = 1, T = 1;
  train_batch_shape(lc, B, T);
  Model model;
  const int nthreads = threads > 0 ? threads : (int)std::max(1u, std::thread::hardware_concurrency());
  mc.recompute = false;
  if (Status s = model.init(mc, B, T, nthreads, 0); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  std::copy(params.begin(), params.end(), model.params());
  EvalResult r;
  if (Status s = evaluate(model, lc, data, max_tokens, r); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  nlohmann::json j = {{"checkpoint", dir}, {"step", m.step}, {"data", data},        {"tokens", r.tokens},
                      {"loss", r.loss},    {"perplexity", r.perplexity}, {"batches", r.batches}};
  std::fprintf(stderr, "eval %s (step %lld) on %s: loss %.4f, perplexity %.2f over %llu tokens\n", dir.c_str(),
               (long long)m.step, data.c_str(), r.loss, r.perplexity, (unsigned long long)r.tokens);
  std::printf("%s\n", j.dump(2).c_str());
  if (!output.empty())
    if (Status s = files_write_atomic(output, j.dump(2) + "\n"); !s) {
      spdlog::error("{}", s.message());
      return kExitFailure;
    }
  return kExitOk;
}

}  // namespace smelt
