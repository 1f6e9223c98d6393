// `smelt serve`: a checkpoint (step or run directory) or a GGUF file behind an OpenAI-compatible
// HTTP server (docs/serve.md). The socket is bound first so /health answers 503 while the model
// loads; "listening on http://HOST:PORT" goes to stdout once requests are served. SIGTERM/SIGINT
// stop it gracefully, on HttpSignalWatch's thread (common/http_listener.hpp).
// Not the routes (serve/http_server.hpp) nor the scheduler (serve/engine.hpp).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/ckpt/export_gguf.hpp"
#include "smelt/cli/cli_parse.hpp"
#include "smelt/cli/command_table.hpp"
#include "smelt/cli/load_model.hpp"
#include "smelt/cli/resolve_checkpoint.hpp"
#include "smelt/common/log.hpp"
#include "smelt/model/config.hpp"
#include "smelt/serve/engine.hpp"
#include "smelt/serve/http_server.hpp"
#include "smelt/tokenizer/tokenizer.hpp"

namespace fs = std::filesystem;

namespace smelt {

namespace {

// The key: the file's first line, surrounding whitespace dropped.
Status read_api_key(const std::string& path, std::string& key) {
  std::ifstream f(path);
  if (!f) return Status::error(fmt::format("--api-key-file {}: cannot read it", path));
  std::getline(f, key);
  const auto b = key.find_first_not_of(" \t\r\n"), e = key.find_last_not_of(" \t\r\n");
  key = b == std::string::npos ? "" : key.substr(b, e - b + 1);
  if (key.empty()) return Status::error(fmt::format("--api-key-file {}: the first line is empty (want the key)", path));
  return Status::ok();
}

// The run's name: RUN for RUN or RUN/checkpoints/step_N.
std::string run_name(const std::string& given, const std::string& step_dir) {
  fs::path p = fs::absolute(given).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  if (fs::path(step_dir) == fs::path(given) && p.parent_path().filename() == "checkpoints")
    p = p.parent_path().parent_path();
  return p.filename().string();
}

struct Loaded {
  ModelConfig cfg;
  std::vector<float> params;
  Tokenizer tok;
  std::shared_ptr<const LoraAdapters> lora;  // a LoRA run's checkpoint: its adapters (params: its base)
  std::string name;
  bool own_template = false;  // chat: the checkpoint's own template (else the tokenizer's format)
  ChatTemplate chat;
};

Status load_checkpoint(const std::string& dir, const std::string& tok_path_in, Loaded& out) {
  std::string step_dir;
  if (Status s = cli_resolve_checkpoint(dir, step_dir); !s) return s;
  std::string tok_path = tok_path_in.empty() ? (fs::path(step_dir) / "tokenizer.json").string() : tok_path_in;
  std::error_code ec;
  if (!fs::exists(tok_path, ec))
    return Status::error(fmt::format("{}: the checkpoint carries no tokenizer.json; pass --tokenizer FILE", step_dir));
  if (Status s = Tokenizer::load(tok_path, out.tok); !s) return Status::error(fmt::format("--tokenizer {}: {}", tok_path, s.message()));
  if (Status s = cli_load_checkpoint(step_dir, out.cfg, out.params, out.lora); !s) return s;
  if ((int64_t)out.tok.vocab_size() > out.cfg.vocab_size)
    return Status::error(fmt::format("{}: tokenizer vocabulary {} is larger than the model's vocab_size {}; is it the "
                                     "tokenizer the model was trained with?", tok_path, out.tok.vocab_size(), out.cfg.vocab_size));
  out.name = run_name(dir, step_dir);
  spdlog::info("checkpoint {}", step_dir);
  CkptManifest m;
  if (Status s = ckpt_read_manifest(step_dir, m); !s) return s;
  if (Status s = chat_template_from_state(m.state, out.chat, out.own_template); !s)
    return Status::error(fmt::format("{}: {}", step_dir, s.message()));
  if (out.own_template) spdlog::info("chat: {} (Jinja)", out.chat.origin);
  return Status::ok();
}

Status load_gguf(const std::string& path, Loaded& out) {
  GgufModelInfo info;
  if (Status s = gguf_load_model(path, out.cfg, out.params, out.tok, &info); !s) return s;
  out.name = info.name.empty() ? fs::path(path).stem().string() : info.name;
  spdlog::info("{}: {} ({} matrices), pre-tokenizer {}", path, info.name, info.file_type, info.pre);
  // tokenizer.chat_template, as llama.cpp's server uses it (with the file's EOS token as a stop)
  if (Status s = chat_template_from_state({{"import", info.tokens}}, out.chat, out.own_template); !s)
    return Status::error(fmt::format("{}: tokenizer.chat_template: {}", path, s.message()));
  if (out.own_template) spdlog::info("chat: the file's tokenizer.chat_template (Jinja)");
  return Status::ok();
}

struct ServeFlags {
  std::string ckpt, gguf, tok_path, host = "127.0.0.1", api_key_file, dtype = "f32", model_name, lora, kv_cache;
  int port = 8000, threads = 1, http_threads = 0;
  EngineConfig ec;
  size_t max_body = 1 << 20;
  double grace = 10;
};

void add_serve_flags(CLI::App& app, ServeFlags& f) {
  auto* src = app.add_option_group("model", "what to serve (one of)");
  src->add_option("--checkpoint", f.ckpt, "step directory (RUN/checkpoints/step_N) or run directory (its newest valid "
                  "checkpoint; a LoRA run's: its base with its adapters unmerged)");
  src->add_option("--gguf", f.gguf, "a GGUF file (llama, qwen2 or qwen3; F32, BF16, F16 or Q8_0 tensors)");
  src->require_option(1);
  app.add_option("--lora", f.lora, "a PEFT LoRA adapter folder (adapter_config.json + adapter_model.safetensors, "
                 "e.g. smelt export --format peft) for this model, run unmerged beside its weights in fp32");
  app.add_option("--tokenizer", f.tok_path, "tokenizer.json (default: the checkpoint's copy; a GGUF file carries its own)");
  app.add_option("--host", f.host, "address to bind (default 127.0.0.1: this machine only; 0.0.0.0 for every interface)");
  app.add_option("--port", f.port, "TCP port (default 8000; 0: any free port, printed)")->check(CLI::Range(0, 65535));
  app.add_option("--threads", f.threads, "model threads (default 1)")->check(CLI::PositiveNumber);
  app.add_option("--slots", f.ec.slots, "sequences decoded together at most (default 4)")->check(CLI::PositiveNumber);
  app.add_option("--max-queue", f.ec.max_queue, "requests waiting for a slot at most; beyond, 429 (default 16)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--ctx", f.ec.ctx, "tokens per sequence, prompt + completion (default: the model's max_seq_len)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--prefill-chunk", f.ec.prefill_chunk, "prompt tokens per step over all prefilling sequences "
                 "(default 32: a long prompt does not stall the others' streams)")->check(CLI::PositiveNumber);
  app.add_option("--dtype", f.dtype, "linear layers in f32 (default, exact), bf16, f16 (half weights, inputs rounded to half) or q8_0 (int8 blocks)");
  cli_add_kv_cache_option(app, f.kv_cache);
  app.add_option("--model-name", f.model_name, "the name clients use in 'model' (default: the run directory's name, or "
                 "the GGUF file's general.name)");
  app.add_option("--api-key-file", f.api_key_file, "file whose first line is the key every route but /health then wants "
                 "as 'Authorization: Bearer KEY'");
  app.add_option("--max-body-bytes", f.max_body, "larger request bodies get 413 (default 1 MiB)")->check(CLI::PositiveNumber);
  app.add_option("--http-threads", f.http_threads, "connection threads (default slots + max-queue + 4: one per "
                 "connection, streams hold theirs)")->check(CLI::NonNegativeNumber);
  app.add_option("--shutdown-grace", f.grace, "seconds SIGTERM lets requests in flight finish before ending them "
                 "(default 10)")->check(CLI::NonNegativeNumber);
}

// The engine's settings (f.ec) completed and the HTTP server's made from the flags. An exit code
// on a usage error, else -1.
int serve_settings(ServeFlags& f, HttpConfig& hc) {
  f.ec.threads = f.threads;
  if (Status s = weight_format_parse(f.dtype, f.ec.format); !s) {
    spdlog::error("--dtype: {}", s.message());
    return kExitUsage;
  }
  if (!f.kv_cache.empty()) {
    KvFormat kv;
    if (Status s = kv_format_parse(f.kv_cache, kv); !s) {
      spdlog::error("--kv-cache: {}", s.message());
      return kExitUsage;
    }
    f.ec.kv_cache = kv;
  }
  if (!f.gguf.empty() && !f.tok_path.empty()) {
    spdlog::error("--tokenizer goes with --checkpoint; a GGUF file carries its own tokenizer");
    return kExitUsage;
  }
  hc.host = f.host;
  hc.port = f.port;
  hc.max_body_bytes = f.max_body;
  hc.threads = f.http_threads > 0 ? f.http_threads : f.ec.slots + f.ec.max_queue + 4;
  if (!f.api_key_file.empty()) {
    if (Status s = read_api_key(f.api_key_file, hc.api_key); !s) {
      spdlog::error("{}", s.message());
      return kExitUsage;
    }
  }
  return -1;
}

}  // namespace

int cli_serve(int argc, char** argv) {
  CLI::App app{"smelt serve: an OpenAI-compatible HTTP server over a checkpoint or a GGUF file, with continuous "
               "batching (docs/serve.md)"};
  app.name("smelt serve");
  ServeFlags f;
  add_serve_flags(app, f);
  if (int rc = cli_parse(app, argc, argv, "serve"); rc >= 0) return rc;
  HttpConfig hc;
  if (int rc = serve_settings(f, hc); rc >= 0) return rc;
  // SIGINT/SIGTERM blocked in every thread started from here (HTTP, engine, OpenMP) and taken by
  // StopSignals' own watcher, so no compute thread ever runs a handler (common/stop_signals.hpp).
  HttpSignalWatch signals;
  if (Status s = signals.open(); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  HttpServer server(hc);
  if (Status s = server.bind(); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  server.start();
  spdlog::info("bound {}:{}; /health answers 503 until the model is loaded", f.host, server.port());
  signals.watch([&] {
    spdlog::info("signal: stopping (new requests get 503; requests in flight have {} s)", f.grace);
    server.shutdown(f.grace);
  });
  auto quit = [&](int rc) {
    server.shutdown(0);
    server.join();
    signals.end();
    return rc;
  };

  Loaded m;
  Status s = f.gguf.empty() ? load_checkpoint(f.ckpt, f.tok_path, m) : load_gguf(f.gguf, m);
  if (!s) {
    spdlog::error("{}", s.message());
    return quit(kExitFailure);
  }
  if (!f.model_name.empty()) m.name = f.model_name;
  if (!f.lora.empty())
    if (Status e = cli_add_lora(f.lora, f.gguf.empty() ? f.ckpt : f.gguf, m.cfg, m.lora); !e) {
      spdlog::error("{}", e.message());
      return quit(kExitFailure);
    }
  f.ec.lora = m.lora;
  if (server.stopping()) return quit(kExitOk);  // a signal came while loading
  Engine engine;
  if (Status e = engine.start(m.cfg, std::move(m.params), m.tok, f.ec); !e) {
    spdlog::error("{}", e.message());
    return quit(kExitFailure);
  }
  if (!server.ready(&engine, m.name, m.own_template ? &m.chat : nullptr)) {  // a signal came while the engine started
    engine.shutdown(0);
    return quit(kExitOk);
  }
  spdlog::info("model '{}': {}", m.name, engine.describe());
  std::fprintf(stdout, "listening on http://%s:%d\n", f.host.c_str(), server.port());
  std::fflush(stdout);

  const bool by_shutdown = server.join();
  engine.shutdown(0);  // already done by a graceful stop; here for a listener that failed
  signals.end();
  if (!by_shutdown) {
    spdlog::error("the HTTP listener stopped with an error");
    return kExitFailure;
  }
  spdlog::info("stopped");
  return kExitOk;
}

}  // namespace smelt
