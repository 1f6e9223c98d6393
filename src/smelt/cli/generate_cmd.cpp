// `smelt generate`: a checkpoint (step or run directory) or a GGUF file and a prompt in, sampled text streamed to
// stdout as tokens arrive (KV-cache decoding, model/inference.hpp; sampling, serve/sampling.hpp),
// a summary on stderr or, with --json, one JSON object on stdout; --trace FILE writes the request's
// timeline (docs/trace.md). Not an HTTP server.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/ckpt/export_gguf.hpp"
#include "smelt/cli/cli_parse.hpp"
#include "smelt/cli/commands.hpp"
#include "smelt/cli/resolve_checkpoint.hpp"
#include "smelt/common/log.hpp"
#include "smelt/kernels/kernels.hpp"
#include "smelt/model/config.hpp"
#include "smelt/model/inference.hpp"
#include "smelt/obs/trace.hpp"
#include "smelt/serve/sampling.hpp"
#include "smelt/serve/text_stream.hpp"
#include "smelt/tokenizer/tokenizer.hpp"

namespace fs = std::filesystem;

namespace smelt {

// A step directory (holds manifest.json) or a run directory (its newest valid checkpoint).
Status cli_resolve_checkpoint(const std::string& dir, std::string& step_dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return Status::error(fmt::format("--checkpoint {}: not a directory (want a step directory "
                                     "RUN/checkpoints/step_N or a run directory RUN)", dir));
  if (fs::exists(fs::path(dir) / "manifest.json", ec)) {
    step_dir = dir;
    return Status::ok();
  }
  std::vector<std::string> warnings;
  Status s = ckpt_find_latest(dir, step_dir, &warnings);
  for (const auto& w : warnings) spdlog::warn("{}", w);
  if (!s)
    return Status::error(fmt::format("--checkpoint {}: no manifest.json here and {}", dir, s.message()));
  spdlog::info("newest valid checkpoint: {}", step_dir);
  return Status::ok();
}

int cli_generate(int argc, char** argv) {
  CLI::App app{"smelt generate: sample text from a checkpoint with KV-cache decoding; the text "
               "streams to stdout, a summary goes to stderr (or one JSON object to stdout with --json)"};
  app.name("smelt generate");
  std::string ckpt, gguf, prompt, tok_path, dtype = "f32", trace_path;
  int max_new = 128, top_k = 0, threads = 1;
  float temperature = 1.0f, top_p = 1.0f, repeat_penalty = 1.0f, frequency_penalty = 0.0f, presence_penalty = 0.0f;
  int repeat_last_n = 64;
  uint64_t seed = 0;
  bool json = false, no_stop = false;
  auto* ckpt_opt = app.add_option("--checkpoint", ckpt, "step directory (RUN/checkpoints/step_N) or run directory "
                                  "(its newest valid checkpoint); this or --gguf is required");
  app.add_option("--gguf", gguf, "a GGUF file (llama architecture, F32/F16/Q8_0, e.g. from smelt export --format "
                 "gguf) instead of --checkpoint; its own tokenizer unless --tokenizer")->excludes(ckpt_opt);
  app.add_option("--prompt", prompt, "text to continue (required; may be \"\" when the tokenizer "
                 "has an end-of-document token, which then starts the sequence)")->required();
  app.add_option("--max-new-tokens", max_new, "tokens to generate at most (the model's "
                 "max_seq_len caps prompt + new)")->check(CLI::PositiveNumber);
  app.add_option("--temperature", temperature, "softmax temperature; 0 is greedy (default 1)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--top-k", top_k, "sample among the k most likely tokens; 0: all")->check(CLI::NonNegativeNumber);
  app.add_option("--top-p", top_p, "nucleus: the smallest most-likely set with mass >= p; 1: all")
      ->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--repeat-penalty", repeat_penalty, "divide (multiply, when negative) the logits of ids among the "
                 "last --repeat-last-n tokens by this; 1: off (default)")->check(CLI::Range(1.0f, 10.0f));
  app.add_option("--frequency-penalty", frequency_penalty, "subtract this times the number of times an id was "
                 "generated so far from its logit (OpenAI's frequency_penalty, -2..2); 0: off (default)")
      ->check(CLI::Range(-2.0f, 2.0f));
  app.add_option("--presence-penalty", presence_penalty, "subtract this from the logit of every id generated so far "
                 "(OpenAI's presence_penalty, -2..2); 0: off (default)")
      ->check(CLI::Range(-2.0f, 2.0f));
  app.add_option("--repeat-last-n", repeat_last_n, "how many recent tokens (prompt included) the penalty looks at "
                 "(default 64)")->check(CLI::NonNegativeNumber);
  app.add_option("--seed", seed, "sampling seed (same seed, checkpoint and flags: same text)");
  app.add_option("--threads", threads, "threads (default 1: one-row decoding has ~60 thread barriers per "
                 "token, which a busy machine turns into waits; see docs/generate.md)")->check(CLI::PositiveNumber);
  app.add_option("--tokenizer", tok_path, "tokenizer.json (default: the checkpoint's copy, or the GGUF file's)");
  app.add_option("--dtype", dtype, "linear layers in f32 (default, exact), bf16 (a bf16 copy of the weights: "
                 "half the bytes per token; AMX/AVX512-BF16 where the CPU has them), f16 (an IEEE half copy, "
                 "inputs rounded to half, fp32 sums: half the bytes) or q8_0 (int8 blocks of 32 with an fp16 "
                 "scale, activations quantized alike, int8 dot products: a quarter of the bytes)")
      ->check(CLI::IsMember({"f32", "fp32", "bf16", "f16", "fp16", "q8_0"}));
  app.add_flag("--json", json, "print one JSON object (text, ids, counts, speed) instead of streaming");
  app.add_flag("--ignore-eos", no_stop, "keep going past the end-of-document token");
  app.add_option("--trace", trace_path, "write this request's timeline (prefill, each token's decoder step by "
                 "layer, sampling) as Chrome trace-event JSON, for ui.perfetto.dev (docs/trace.md)");
  if (int rc = cli_parse(app, argc, argv, "generate", "warn"); rc >= 0) return rc;
  SamplingConfig sc{temperature, top_k, top_p, seed, frequency_penalty, presence_penalty};
  if (Status s = sampling_config_validate(sc); !s) {
    spdlog::error("{}", s.message());
    return kExitUsage;
  }

  if (ckpt.empty() && gguf.empty()) {
    spdlog::error("give --checkpoint DIR or --gguf FILE");
    return kExitUsage;
  }
  std::string step_dir;
  Tokenizer tok;
  ModelConfig cfg;
  std::vector<float> params;
  if (!gguf.empty()) {
    GgufModelInfo info;
    if (Status s = gguf_load_model(gguf, cfg, params, tok, &info); !s) {
      spdlog::error("{}", s.message());
      return kExitFailure;
    }
    spdlog::info("{}: {} GGUF, tokenizer.ggml.pre {}", gguf, info.file_type, info.pre);
    step_dir = gguf;
  } else {
    if (Status s = cli_resolve_checkpoint(ckpt, step_dir); !s) {
      spdlog::error("{}", s.message());
      return kExitFailure;
    }
    if (tok_path.empty()) {
      tok_path = (fs::path(step_dir) / "tokenizer.json").string();
      std::error_code ec;
      if (!fs::exists(tok_path, ec)) {
        spdlog::error("{}: the checkpoint carries no tokenizer.json; pass --tokenizer FILE", step_dir);
        return kExitFailure;
      }
    }
    if (Status s = ckpt_load_model(step_dir, cfg, params); !s) {
      spdlog::error("{}", s.message());
      return kExitFailure;
    }
  }
  if (!tok_path.empty()) {
    if (Status s = Tokenizer::load(tok_path, tok); !s) {
      spdlog::error("--tokenizer {}: {}", tok_path, s.message());
      return kExitFailure;
    }
  }
  const int V = cfg.vocab_size;
  if ((int64_t)tok.vocab_size() > V) {
    spdlog::error("{}: tokenizer vocabulary {} is larger than the model's vocab_size {}; is it the "
                  "tokenizer the model was trained with?", tok_path.empty() ? gguf : tok_path, tok.vocab_size(), V);
    return kExitFailure;
  }

  std::vector<uint32_t> ids32;
  tok.encode(prompt, ids32);
  const std::optional<uint32_t> eod = tok.eod_id();
  if (ids32.empty()) {
    if (!eod) {
      spdlog::error("--prompt is empty and the tokenizer has no end-of-document token to start from");
      return kExitUsage;
    }
    ids32.push_back(*eod);
  }
  std::vector<int32_t> ids(ids32.begin(), ids32.end());
  const int n_prompt = (int)ids.size();
  if (n_prompt >= cfg.max_seq_len) {
    spdlog::error("the prompt is {} tokens; the model's max_seq_len {} leaves no room to generate",
                  n_prompt, cfg.max_seq_len);
    return kExitFailure;
  }
  if (n_prompt + max_new > cfg.max_seq_len) {
    spdlog::warn("--max-new-tokens {} cut to {}: prompt ({} tokens) + new tokens may not exceed "
                 "max_seq_len {}", max_new, cfg.max_seq_len - n_prompt, n_prompt, cfg.max_seq_len);
    max_new = cfg.max_seq_len - n_prompt;
  }

  InferenceSession session;
  Sampler sampler;
  WeightFormat format = WeightFormat::kF32;
  Status s = weight_format_parse(dtype, format);
  if (s) s = session.init(cfg, params.data(), n_prompt + max_new, threads, format);
  if (s) s = sampler.init(sc, V);
  if (!s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  spdlog::info("{}: {} parameters, KV cache + scratch {:.1f} MiB, {} threads, linear layers {}", step_dir,
               params.size(), session.bytes() / 1048576.0, threads, session.linear_isa());

  using clock = std::chrono::steady_clock;
  std::vector<float> logits(V);
  // Ids the tokenizer cannot decode (a model vocabulary padded beyond the tokenizer's) are never sampled.
  auto mask = [&] {
    for (int i = (int)tok.vocab_size(); i < V; i++) logits[i] = -std::numeric_limits<float>::infinity();
  };
  if (!trace_path.empty()) {
    trace_thread_name("main");
    trace_start();
  }
  std::optional<TraceSpan> request(std::in_place, "request", "prompt_tokens", n_prompt);
  const auto t0 = clock::now();
  {
    TraceSpan span("prefill", "tokens", n_prompt);
    s = session.prefill(ids.data(), n_prompt, logits.data());
  }
  if (!s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  const auto t1 = clock::now();
  TextStream stream(tok);
  std::vector<int32_t> out_ids;
  std::string stop = "max_new_tokens";
  for (int i = 0; i < max_new; i++) {
    TraceSpan token_span("token", "index", i);
    mask();
    if (repeat_penalty != 1.0f) {
      std::vector<int32_t> hist(ids.begin(), ids.end());
      hist.insert(hist.end(), out_ids.begin(), out_ids.end());
      apply_repeat_penalty(logits.data(), V, hist.data(), (int)hist.size(), repeat_penalty, repeat_last_n);
    }
    int32_t next = 0;
    {
      TraceSpan span("sample");
      next = sampler.sample(logits.data());
      span.arg("id", next);
    }
    out_ids.push_back(next);
    if (eod && (uint32_t)next == *eod && !no_stop) {
      stop = "eos";
      break;
    }
    std::string piece = stream.push((uint32_t)next);
    if (!json && !piece.empty()) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    if (i + 1 == max_new) break;  // the last token's logits are not needed
    if (s = session.step(next, logits.data()); !s) {
      spdlog::error("{}", s.message());
      return kExitFailure;
    }
  }
  std::string tail = stream.finish();
  const auto t2 = clock::now();
  if (!json) {
    std::fwrite(tail.data(), 1, tail.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }
  request.reset();
  if (!trace_path.empty()) {
    trace_stop();
    TraceProcessInfo info;
    info.extra = {{"command", "generate"}, {"prompt_tokens", n_prompt}, {"new_tokens", (int)out_ids.size()},
                  {"stop", stop}};
    if (Status ts = trace_write(trace_path, info); !ts) spdlog::warn("--trace: {}", ts.message());
  }
  const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
  const double decode_s = std::chrono::duration<double>(t2 - t1).count();
  const int n_new = (int)out_ids.size();
  const double tps = decode_s > 0 ? n_new / decode_s : 0.0;
  if (json) {
    nlohmann::json j = {{gguf.empty() ? "checkpoint" : "gguf", step_dir}, {"prompt", prompt}, {"text", stream.text()},
                        {"prompt_tokens", n_prompt}, {"new_tokens", n_new}, {"ids", out_ids},
                        {"stop", stop}, {"prefill_seconds", prefill_s}, {"decode_seconds", decode_s},
                        {"tokens_per_second", tps}, {"threads", threads},
                        {"dtype", weight_format_name(format)},
                        {"sampling", {{"temperature", temperature}, {"top_k", top_k},
                                      {"top_p", top_p}, {"seed", seed}, {"repeat_penalty", repeat_penalty},
                                      {"repeat_last_n", repeat_last_n}, {"frequency_penalty", frequency_penalty},
                                      {"presence_penalty", presence_penalty}}}};
    std::fputs((j.dump() + "\n").c_str(), stdout);
  }
  std::fputs(fmt::format("[generate] {} prompt tokens ({:.0f} tokens/s prefill), {} new tokens in "
                         "{:.2f} s ({:.1f} tokens/s), stopped by {}\n",
                         n_prompt, prefill_s > 0 ? n_prompt / prefill_s : 0.0, n_new, decode_s, tps, stop)
                 .c_str(),
             stderr);
  return kExitOk;
}

}  // namespace smelt
