// `smelt eval --checkpoint DIR --data PREFIX [--max-tokens N] [--compressors] [--dtype D --kl-vs R]`:
// loss (nats per token, perplexity, bits per byte of the text) of a checkpoint on held-out tokens,
// with --compressors what gzip / zstd / xz make of the same text, and with --kl-vs how far one
// weight format's next-token distributions are from another's (q8_0 against f32); lines for
// people on stderr, JSON on stdout (and in --output). With --tasks, downstream tasks instead
// (eval_tasks_cmd.cpp). Not the evaluation itself (train/evaluate.hpp, eval/run.hpp).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/cli/cli_parse.hpp"
#include "smelt/cli/commands.hpp"
#include "smelt/cli/eval_tasks.hpp"
#include "smelt/common/files.hpp"
#include "smelt/common/log.hpp"
#include "smelt/common/status.hpp"
#include "smelt/dataset/loader.hpp"
#include "smelt/model/model.hpp"
#include "smelt/tokenizer/tokenizer.hpp"
#include "smelt/train/compressors.hpp"
#include "smelt/train/evaluate.hpp"
#include "smelt/train/train_config.hpp"

namespace smelt {

namespace fs = std::filesystem;

namespace {
// The result on stdout, and in --output when given (written atomically).
int emit(const nlohmann::json& j, const std::string& output) {
  std::printf("%s\n", j.dump(2).c_str());
  if (!output.empty())
    if (Status s = files_write_atomic(output, j.dump(2) + "\n"); !s) {
      spdlog::error("{}", s.message());
      return kExitFailure;
    }
  return kExitOk;
}

// --kl-vs: KL(p_ref || p_test) per target token and greedy agreement, both formats on the decoder.
int eval_kl(const std::string& dir, int64_t step, const ModelConfig& mc, const std::vector<float>& params,
            const std::string& test_name, const std::string& ref_name, const LoaderConfig& lc, const std::string& data,
            int64_t max_tokens, int threads, const Tokenizer* tok, const std::string& output) {
  WeightFormat test, ref;
  if (Status s = weight_format_parse(test_name == "fp32" ? "f32" : test_name, test); !s) {
    spdlog::error("--dtype: {}", s.message());
    return kExitUsage;
  }
  if (Status s = weight_format_parse(ref_name, ref); !s) {
    spdlog::error("--kl-vs: {}", s.message());
    return kExitUsage;
  }
  KlResult r;
  EvalText text;
  if (tok) text = EvalText::from(*tok);
  if (Status s = evaluate_kl(mc, params.data(), test, ref, lc, data, max_tokens, threads, r, tok ? &text : nullptr); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  auto or_null = [](double v) { return v >= 0 ? nlohmann::json(v) : nlohmann::json(nullptr); };
  nlohmann::json j = {{"checkpoint", dir}, {"step", step}, {"data", data}, {"tokens", r.tokens},
                      {"dtype", weight_format_name(test)}, {"kl_vs", weight_format_name(ref)},
                      {"mean_kl", r.mean_kl}, {"max_kl", r.max_kl}, {"greedy_agreement", r.greedy_agreement},
                      {"loss", r.loss}, {"ref_loss", r.ref_loss}, {"bits_per_byte", or_null(r.bits_per_byte)},
                      {"ref_bits_per_byte", or_null(r.ref_bits_per_byte)}, {"bytes", r.bytes},
                      {"seconds", r.seconds}, {"threads", threads}};
  std::fprintf(stderr, "eval %s (step %lld) on %s, %s against %s over %llu tokens: mean KL %.6f nats (max %.4f), "
               "greedy agreement %.2f%%, loss %.4f vs %.4f nats per token\n",
               dir.c_str(), (long long)step, data.c_str(), weight_format_name(test), weight_format_name(ref),
               (unsigned long long)r.tokens, r.mean_kl, r.max_kl, 100.0 * r.greedy_agreement, r.loss, r.ref_loss);
  return emit(j, output);
}
}  // namespace

int cli_eval(int argc, char** argv) {
  CLI::App app{"smelt eval: loss (nats per token, bits per byte) of a checkpoint on held-out tokens (--data), or "
               "its scores on downstream tasks (--tasks)"};
  app.name("smelt eval");
  std::string ckpt, data, output, tok_path, dtype = "run", kl_vs;
  bool compressors = false;
  int64_t max_tokens = 1 << 20;
  int threads = 0;
  EvalTasksFlags tf;
  auto* ckpt_opt = app.add_option("--checkpoint", ckpt, "a checkpoint step folder, or a run folder (its newest valid "
                                  "checkpoint); this or --gguf (with --tasks)");
  app.add_option("--gguf", tf.gguf, "--tasks: a GGUF file (with its own tokenizer) instead of --checkpoint")->excludes(ckpt_opt);
  auto* data_opt = app.add_option("--data", data, "held-out token shards: [NAME=]PREFIX[:WEIGHT],...");
  auto* tasks_opt = app.add_option("--tasks", tf.tasks, "task files (NAME.toml / NAME.jsonl) or folders of them "
                                   "(docs/eval.md): score the model on them instead of --data")->excludes(data_opt);
  app.add_option("--limit", tf.limit, "--tasks: the first N items of each task (0: all)")->check(CLI::NonNegativeNumber);
  app.add_option("--fewshot", tf.fewshot, "--tasks: examples before each item (default: each task's num_fewshot)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", tf.seed, "--tasks: seed of the few-shot draw and the bootstrap (default 1234)");
  app.add_option("--samples", tf.samples, "--tasks: write every item's record (token ids, log-likelihoods, "
                 "prediction) to this JSONL file");
  EvalClozeFlags cf;
  auto* cloze_opt = app.add_option("--make-cloze", cf.from, "write a cloze task (docs/eval.md) made from these text "
                                   "files, .jsonl files (\"text\") or token shards (with --tokenizer) to --task-out")
                        ->excludes(data_opt)->excludes(tasks_opt);
  std::string harness;
  auto* harness_opt = app.add_option("--from-harness", harness, "write a task made from an lm-evaluation-harness "
                                     "--log_samples JSONL file (its prompts as they are) to --task-out")
                          ->excludes(data_opt)->excludes(tasks_opt)->excludes(cloze_opt);
  app.add_option("--task-out", cf.out, "--make-cloze, --from-harness: the task's path without extension (STEM.jsonl, "
                 "STEM.toml)");
  app.add_option("--items", cf.items, "--make-cloze: items at most (default 500)")->check(CLI::PositiveNumber);
  app.add_flag("--no-prefix-reuse", tf.no_prefix_reuse, "--tasks: read every (context, choice) pair whole instead of "
               "the context once per item (the baseline of bench/eval)");
  app.add_option("--max-tokens", max_tokens, "evaluate at most this many target tokens (default 1048576)")
      ->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "threads (0 = every core)")->check(CLI::NonNegativeNumber);
  app.add_option("--output", output, "also write the JSON result to this file");
  app.add_option("--tokenizer", tok_path, "tokenizer.json for bits per byte (default: the checkpoint's copy)");
  app.add_option("--dtype", dtype, "linear layers in f32, bf16, f16 or q8_0 (default: the run's [train] precision; "
                 "q8_0 runs the decoder and implies --kl-vs f32; with --tasks the default is f32)")
      ->check(CLI::IsMember({"run", "f32", "bf16", "f16", "q8_0"}));
  app.add_option("--kl-vs", kl_vs, "compare --dtype's next-token distributions with this format's on the same "
                 "rows: mean KL divergence, greedy agreement, both losses (through the decoder)")
      ->check(CLI::IsMember({"f32", "bf16", "q8_0"}));
  app.add_flag("--compressors", compressors, "also compress the evaluated text with gzip -9, zstd -19 and xz -9e "
                                             "and report their bits per byte");
  if (int rc = cli_parse(app, argc, argv, "eval", "warn"); rc >= 0) return rc;
  if (!harness_opt->empty()) {
    if (cf.out.empty()) {
      spdlog::error("--from-harness needs --task-out STEM");
      return kExitUsage;
    }
    return cli_eval_from_harness(harness, cf.out);
  }
  if (!cloze_opt->empty()) {
    if (cf.out.empty()) {
      spdlog::error("--make-cloze needs --task-out STEM");
      return kExitUsage;
    }
    cf.tokenizer = tok_path;
    cf.seed = tf.seed;
    return cli_eval_make_cloze(cf);
  }
  if (!tasks_opt->empty()) {
    if (ckpt.empty() && tf.gguf.empty()) {
      spdlog::error("--tasks needs a model: --checkpoint DIR or --gguf FILE");
      return kExitUsage;
    }
    tf.checkpoint = ckpt;
    tf.tokenizer = tok_path;
    tf.output = output;
    tf.threads = threads;
    tf.dtype = dtype == "run" ? "f32" : dtype;
    return cli_eval_tasks(tf);
  }
  if (ckpt.empty() || data.empty() || !tf.gguf.empty()) {
    spdlog::error("smelt eval needs --checkpoint DIR and --data PREFIX (or --tasks FILE_OR_DIR for downstream tasks)");
    return kExitUsage;
  }
  if (dtype == "f16") {
    spdlog::error("--dtype f16: only with --tasks (held-out loss runs in f32, bf16 or q8_0)");
    return kExitUsage;
  }
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
  // A checkpoint no run wrote (`smelt import`'s) stores no sources: --data's stand in.
  if (root["data"]["sources"].value_or(std::string()).empty()) {
    if (!root["data"].is_table()) root.insert_or_assign("data", toml::table{});
    root["data"].as_table()->insert_or_assign("sources", data);
  }
  // The text view of the tokens: the checkpoint's tokenizer, or --tokenizer.
  std::unique_ptr<Tokenizer> tok;
  if (tok_path.empty() && fs::exists(fs::path(dir) / "tokenizer.json")) tok_path = (fs::path(dir) / "tokenizer.json").string();
  if (!tok_path.empty()) {
    tok = std::make_unique<Tokenizer>();
    if (Status s = Tokenizer::load(tok_path, *tok); !s) {
      spdlog::error("{}", s.message());
      return kExitFailure;
    }
  } else if (compressors) {
    spdlog::error("--compressors needs the text: {} holds no tokenizer.json; give --tokenizer", dir);
    return kExitUsage;
  }
  // A run that took its end-of-document id from its tokenizer stores eod_id = -1: the tokenizer's.
  if (root["data"]["eod_id"].value_or((int64_t)-1) < 0 && tok && tok->eod_id() && root["data"].is_table())
    root["data"].as_table()->insert_or_assign("eod_id", (int64_t)*tok->eod_id());
  LoaderConfig lc;
  if (Status s = loader_config_read(root, lc); !s) {
    spdlog::error("{}: stored [data]: {}", dir, s.message());
    return kExitFailure;
  }
  lc.prefetch_threads = 0;
  lc.stream_tokenizer.clear();
  int B = 1, T = 1;
  train_batch_shape(lc, B, T);
  std::string precision_key = "fp32";
  if (auto p = root["train"]["precision"].value<std::string>()) precision_key = *p;
  const bool bf16 = dtype == "bf16" || (dtype == "run" && precision_key == "bf16");
  const int nthreads0 = threads > 0 ? threads : (int)std::max(1u, std::thread::hardware_concurrency());
  if (dtype == "q8_0" && kl_vs.empty()) kl_vs = "f32";
  if (!kl_vs.empty()) return eval_kl(dir, m.step, mc, params, dtype == "run" ? (bf16 ? "bf16" : "f32") : dtype, kl_vs, lc, data,
                                     max_tokens, nthreads0, tok.get(), output);
  Model model;
  const int nthreads = threads > 0 ? threads : (int)std::max(1u, std::thread::hardware_concurrency());
  mc.recompute = false;
  if (bf16) model.set_precision(Precision::kBf16);  // (before init: the plan holds the bf16 copies)
  if (Status s = model.init(mc, B, T, nthreads, 0); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  std::copy(params.begin(), params.end(), model.params());
  EvalResult r;
  EvalText text;
  if (tok) text = EvalText::from(*tok);
  std::vector<int32_t> targets;
  if (Status s = evaluate(model, lc, data, max_tokens, r, tok ? &text : nullptr, compressors ? &targets : nullptr); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  nlohmann::json j = {{"checkpoint", dir},     {"step", m.step},
                      {"data", data},          {"tokens", r.tokens},
                      {"loss", r.loss},        {"perplexity", r.perplexity},
                      {"batches", r.batches},  {"precision", precision_name(model.precision())},
                      {"seconds", r.seconds},  {"tokens_per_s", r.seconds > 0 ? r.tokens / r.seconds : 0.0}};
  j["bytes"] = tok ? nlohmann::json(r.bytes) : nlohmann::json(nullptr);
  j["bits_per_byte"] = r.bits_per_byte >= 0 ? nlohmann::json(r.bits_per_byte) : nlohmann::json(nullptr);
  std::string bpb = r.bits_per_byte >= 0 ? fmt::format(", {:.4f} bits per byte of {} bytes", r.bits_per_byte, r.bytes)
                                         : std::string(" (no tokenizer: no bits per byte)");
  std::fprintf(stderr, "eval %s (step %lld) on %s: loss %.4f nats per token, perplexity %.2f over %llu tokens%s\n",
               dir.c_str(), (long long)m.step, data.c_str(), r.loss, r.perplexity, (unsigned long long)r.tokens,
               bpb.c_str());
  if (compressors) {
    const std::string t = eval_text(*tok, targets);
    nlohmann::json cs = nlohmann::json::array();
    std::string tmp = output.empty() ? std::string(fs::temp_directory_path()) : fs::absolute(output).parent_path().string();
    for (const auto& c : compressors_measure(t, tmp)) {
      nlohmann::json e = {{"name", c.name}, {"label", c.label}, {"command", c.command}, {"bytes_in", c.bytes_in}};
      if (c.error.empty()) {
        e["bytes_out"] = c.bytes_out;
        e["bits_per_byte"] = c.bits_per_byte;
        std::fprintf(stderr, "  %-9s %.4f bits per byte (%llu -> %llu bytes)\n", c.label.c_str(), c.bits_per_byte,
                     (unsigned long long)c.bytes_in, (unsigned long long)c.bytes_out);
      } else {
        e["error"] = c.error;
        std::fprintf(stderr, "  %-9s did not run: %s\n", c.label.c_str(), c.error.c_str());
      }
      cs.push_back(e);
    }
    j["compressors"] = cs;
  }
  return emit(j, output);
}

}  // namespace smelt
