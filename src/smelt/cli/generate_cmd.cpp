// `smelt generate`: a checkpoint (step or run directory) or a GGUF file and a prompt in, sampled text streamed to
// stdout as tokens arrive (KV-cache decoding, model/inference.hpp; each token through the same
// Completion as `smelt serve`'s engine, serve/completion.hpp), a summary on stderr or, with --json,
// one JSON object on stdout; --trace FILE writes the request's timeline (docs/trace.md). Not an
// HTTP server.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/ckpt/export_gguf.hpp"
#include "smelt/cli/cli_parse.hpp"
#include "smelt/cli/commands.hpp"
#include "smelt/cli/load_model.hpp"
#include "smelt/cli/resolve_checkpoint.hpp"
#include "smelt/common/log.hpp"
#include "smelt/kernels/kernels.hpp"
#include "smelt/model/config.hpp"
#include "smelt/model/inference.hpp"
#include "smelt/obs/trace.hpp"
#include "smelt/serve/completion.hpp"
#include "smelt/tokenizer/tokenizer.hpp"

namespace fs = std::filesystem;

namespace smelt {

// A step directory (holds manifest.json) or a run directory (its newest valid checkpoint).
Status cli_resolve_checkpoint(const std::string& dir, std::string& step_dir) {
  if (Status s = ckpt_resolve(dir, step_dir); !s) return Status::error("--checkpoint " + s.message());
  if (step_dir != dir) spdlog::info("newest valid checkpoint: {}", step_dir);
  return Status::ok();
}

namespace {

struct GenerateFlags {
  std::string ckpt, gguf, prompt, tok_path, dtype = "f32", trace_path, kv_cache, lora;
  int max_new = 128, top_k = 0, threads = 1;
  float temperature = 1.0f, top_p = 1.0f, repeat_penalty = 1.0f, frequency_penalty = 0.0f, presence_penalty = 0.0f;
  int repeat_last_n = 64;
  uint64_t seed = 0;
  bool json = false, no_stop = false;
};

void add_generate_flags(CLI::App& app, GenerateFlags& f) {
  auto* ckpt_opt = app.add_option("--checkpoint", f.ckpt, "step directory (RUN/checkpoints/step_N) or run directory "
                                  "(its newest valid checkpoint; a LoRA run's: its base with its adapters); this or "
                                  "--gguf is required");
  app.add_option("--gguf", f.gguf, "a GGUF file (llama, qwen2 or qwen3; F32/BF16/F16/Q8_0, e.g. from smelt export "
                 "--format gguf) instead of --checkpoint; its own tokenizer unless --tokenizer")->excludes(ckpt_opt);
  app.add_option("--lora", f.lora, "a PEFT LoRA adapter folder (adapter_config.json + adapter_model.safetensors, "
                 "e.g. from smelt export --format peft) run unmerged beside the model, as serve --lora");
  app.add_option("--prompt", f.prompt, "text to continue (required; may be \"\" when the tokenizer "
                 "has an end-of-document token, which then starts the sequence)")->required();
  app.add_option("--max-new-tokens", f.max_new, "tokens to generate at most (the model's "
                 "max_seq_len caps prompt + new)")->check(CLI::PositiveNumber);
  app.add_option("--temperature", f.temperature, "softmax temperature; 0 is greedy (default 1)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--top-k", f.top_k, "sample among the k most likely tokens; 0: all")->check(CLI::NonNegativeNumber);
  app.add_option("--top-p", f.top_p, "nucleus: the smallest most-likely set with mass >= p; 1: all")
      ->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--repeat-penalty", f.repeat_penalty, "divide (multiply, when negative) the logits of ids among the "
                 "last --repeat-last-n tokens by this; 1: off (default)")->check(CLI::Range(1.0f, 10.0f));
  app.add_option("--frequency-penalty", f.frequency_penalty, "subtract this times the number of times an id was "
                 "generated so far from its logit (OpenAI's frequency_penalty, -2..2); 0: off (default)")
      ->check(CLI::Range(-2.0f, 2.0f));
  app.add_option("--presence-penalty", f.presence_penalty, "subtract this from the logit of every id generated so far "
                 "(OpenAI's presence_penalty, -2..2); 0: off (default)")
      ->check(CLI::Range(-2.0f, 2.0f));
  app.add_option("--repeat-last-n", f.repeat_last_n, "how many recent tokens (prompt included) the penalty looks at "
                 "(default 64)")->check(CLI::NonNegativeNumber);
  app.add_option("--seed", f.seed, "sampling seed (same seed, checkpoint and flags: same text)");
  app.add_option("--threads", f.threads, "threads (default 1: one-row decoding has ~60 thread barriers per "
                 "token, which a busy machine turns into waits; see docs/generate.md)")->check(CLI::PositiveNumber);
  app.add_option("--tokenizer", f.tok_path, "tokenizer.json (default: the checkpoint's copy, or the GGUF file's)");
  app.add_option("--dtype", f.dtype, "linear layers in f32 (default, exact), bf16 (a bf16 copy of the weights: "
                 "half the bytes per token; AMX/AVX512-BF16 where the CPU has them), f16 (an IEEE half copy, "
                 "inputs rounded to half, fp32 sums: half the bytes) or q8_0 (int8 blocks of 32 with an fp16 "
                 "scale, activations quantized alike, int8 dot products: a quarter of the bytes)")
      ->check(CLI::IsMember({"f32", "fp32", "bf16", "f16", "fp16", "q8_0"}));
  cli_add_kv_cache_option(app, f.kv_cache);
  app.add_flag("--json", f.json, "print one JSON object (text, ids, counts, speed) instead of streaming");
  app.add_flag("--ignore-eos", f.no_stop, "keep going past the end-of-document token");
  app.add_option("--trace", f.trace_path, "write this request's timeline (prefill, each token's decoder step by "
                 "layer, sampling) as Chrome trace-event JSON, for ui.perfetto.dev (docs/trace.md)");
}

// The prompt's ids (an empty prompt starts from the end-of-document token) and f.max_new cut to
// what max_seq_len leaves. An exit code on error, else -1.
int prompt_ids(GenerateFlags& f, const LoadedModel& m, std::vector<int32_t>& ids) {
  std::vector<uint32_t> ids32;
  m.tok.encode(f.prompt, ids32);
  if (ids32.empty()) {
    const std::optional<uint32_t> eod = m.tok.eod_id();
    if (!eod) {
      spdlog::error("--prompt is empty and the tokenizer has no end-of-document token to start from");
      return kExitUsage;
    }
    ids32.push_back(*eod);
  }
  ids.assign(ids32.begin(), ids32.end());
  const int n_prompt = (int)ids.size(), max_seq = m.cfg.max_seq_len;
  if (n_prompt >= max_seq) {
    spdlog::error("the prompt is {} tokens; the model's max_seq_len {} leaves no room to generate", n_prompt, max_seq);
    return kExitFailure;
  }
  if (n_prompt + f.max_new > max_seq) {
    spdlog::warn("--max-new-tokens {} cut to {}: prompt ({} tokens) + new tokens may not exceed "
                 "max_seq_len {}", f.max_new, max_seq - n_prompt, n_prompt, max_seq);
    f.max_new = max_seq - n_prompt;
  }
  return -1;
}

struct Decoded {
  GenResult res;
  std::vector<int32_t> ids;           // res.ids and the end-of-document token that stopped it
  std::string stop = "max_new_tokens";  // or "eos"
  double prefill_s = 0, decode_s = 0;
};

// Prefill, then one decoder step per token, each token taken by the Completion (the engine's
// per-token logic); with print, the text goes to stdout as it becomes final, then a newline.
Status decode(InferenceSession& session, const GenRequest& req, Completion& c, bool print, Decoded& d) {
  using clock = std::chrono::steady_clock;
  std::vector<float> logits(session.config().vocab_size);
  const int n_prompt = (int)req.prompt.size();
  const auto t0 = clock::now();
  {
    TraceSpan span("prefill", "tokens", n_prompt);
    if (Status s = session.prefill(req.prompt.data(), n_prompt, logits.data()); !s) return s;
  }
  const auto t1 = clock::now();
  FinishReason why = FinishReason::kLength;
  for (int i = 0;; i++) {
    TraceSpan token_span("token", "index", i);
    TokenEvent ev;
    {
      TraceSpan span("sample");
      ev.id = c.sample(logits.data());
      span.arg("id", ev.id);
    }
    d.ids.push_back(ev.id);
    const bool done = c.accept(ev, d.res, why);
    if (print && !ev.text.empty()) {
      std::fwrite(ev.text.data(), 1, ev.text.size(), stdout);
      std::fflush(stdout);
    }
    if (done) break;  // the last token's logits are not needed
    if (Status s = session.step(ev.id, logits.data()); !s) return s;
  }
  if (why == FinishReason::kStop) d.stop = "eos";  // no stop strings: only the end of document
  const auto t2 = clock::now();
  if (print) {
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }
  d.prefill_s = std::chrono::duration<double>(t1 - t0).count();
  d.decode_s = std::chrono::duration<double>(t2 - t1).count();
  return Status::ok();
}

// The --json object on stdout, and the summary line on stderr.
void report(const GenerateFlags& f, const LoadedModel& m, int n_prompt, WeightFormat format, KvFormat kv,
            const Decoded& d) {
  const int n_new = (int)d.ids.size();
  const double tps = d.decode_s > 0 ? n_new / d.decode_s : 0.0;
  if (f.json) {
    nlohmann::json j = {{f.gguf.empty() ? "checkpoint" : "gguf", m.source}, {"prompt", f.prompt}, {"text", d.res.text},
                        {"prompt_tokens", n_prompt}, {"new_tokens", n_new}, {"ids", d.ids},
                        {"stop", d.stop}, {"prefill_seconds", d.prefill_s}, {"decode_seconds", d.decode_s},
                        {"tokens_per_second", tps}, {"threads", f.threads},
                        {"dtype", weight_format_name(format)}, {"kv_cache", kv_format_name(kv)},
                        {"sampling", {{"temperature", f.temperature}, {"top_k", f.top_k},
                                      {"top_p", f.top_p}, {"seed", f.seed}, {"repeat_penalty", f.repeat_penalty},
                                      {"repeat_last_n", f.repeat_last_n}, {"frequency_penalty", f.frequency_penalty},
                                      {"presence_penalty", f.presence_penalty}}}};
    if (m.lora) j["lora"] = m.lora_source;
    // (a text cut inside a UTF-8 sequence: its bytes as U+FFFD, as the server writes them)
    std::fputs((j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n").c_str(), stdout);
  }
  std::fputs(fmt::format("[generate] {} prompt tokens ({:.0f} tokens/s prefill), {} new tokens in "
                         "{:.2f} s ({:.1f} tokens/s), stopped by {}\n",
                         n_prompt, d.prefill_s > 0 ? n_prompt / d.prefill_s : 0.0, n_new, d.decode_s, tps, d.stop)
                 .c_str(),
             stderr);
}

}  // namespace

int cli_generate(int argc, char** argv) {
  CLI::App app{"smelt generate: sample text from a checkpoint with KV-cache decoding; the text "
               "streams to stdout, a summary goes to stderr (or one JSON object to stdout with --json)"};
  app.name("smelt generate");
  GenerateFlags f;
  add_generate_flags(app, f);
  if (int rc = cli_parse(app, argc, argv, "generate", "warn"); rc >= 0) return rc;
  GenRequest req;
  req.sampling = SamplingConfig{f.temperature, f.top_k, f.top_p, f.seed, f.frequency_penalty, f.presence_penalty};
  if (Status s = sampling_config_validate(req.sampling); !s) {
    spdlog::error("{}", s.message());
    return kExitUsage;
  }
  if (f.ckpt.empty() && f.gguf.empty()) {
    spdlog::error("give --checkpoint DIR or --gguf FILE");
    return kExitUsage;
  }
  LoadedModel m;
  if (Status s = cli_load_model(f.ckpt, f.gguf, f.tok_path, m, f.lora); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  if (int rc = prompt_ids(f, m, req.prompt); rc >= 0) return rc;
  const int n_prompt = (int)req.prompt.size();
  req.max_tokens = f.max_new;
  req.ignore_eos = f.no_stop;
  req.repeat_penalty = f.repeat_penalty;
  req.repeat_last_n = f.repeat_last_n;

  InferenceSession session;
  Completion completion;
  WeightFormat format = WeightFormat::kF32;
  std::optional<KvFormat> kv;
  Status s = weight_format_parse(f.dtype, format);
  if (s && !f.kv_cache.empty()) s = kv_format_parse(f.kv_cache, kv.emplace());
  if (s) s = session.init(m.cfg, m.params.data(), n_prompt + f.max_new, f.threads, format, kv, m.lora.get());
  if (s) s = completion.init(req, m.tok, m.cfg.vocab_size, f.max_new);
  if (!s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  spdlog::info("{}: {} parameters, KV cache + scratch {:.1f} MiB, {} threads, linear layers {}", m.source,
               m.params.size(), session.bytes() / 1048576.0, f.threads, session.linear_isa());
  if (!f.trace_path.empty()) {
    trace_thread_name("main");
    trace_start();
  }
  Decoded d;
  {
    TraceSpan request("request", "prompt_tokens", n_prompt);
    if (s = decode(session, req, completion, !f.json, d); !s) {
      spdlog::error("{}", s.message());
      return kExitFailure;
    }
  }
  if (!f.trace_path.empty()) {
    trace_stop();
    TraceProcessInfo info;
    info.extra = {{"command", "generate"}, {"prompt_tokens", n_prompt}, {"new_tokens", (int)d.ids.size()},
                  {"stop", d.stop}};
    if (Status ts = trace_write(f.trace_path, info); !ts) spdlog::warn("--trace: {}", ts.message());
  }
  report(f, m, n_prompt, format, session.kv_cache(), d);
  return kExitOk;
}

}  // namespace smelt
