// The model and tokenizer of generate and eval --tasks (load_model.hpp).
#include "smelt/cli/load_model.hpp"

#include <filesystem>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/ckpt/export_gguf.hpp"
#include "smelt/cli/resolve_checkpoint.hpp"

namespace smelt {

namespace fs = std::filesystem;

Status cli_load_model(const std::string& ckpt, const std::string& gguf, std::string& tok_path, LoadedModel& m) {
  if (!gguf.empty()) {
    GgufModelInfo info;
    if (Status s = gguf_load_model(gguf, m.cfg, m.params, m.tok, &info); !s) return s;
    spdlog::info("{}: {} GGUF, tokenizer.ggml.pre {}", gguf, info.file_type, info.pre);
    m.source = gguf;
  } else {
    if (Status s = cli_resolve_checkpoint(ckpt, m.source); !s) return s;
    if (tok_path.empty()) {
      tok_path = (fs::path(m.source) / "tokenizer.json").string();
      std::error_code ec;
      if (!fs::exists(tok_path, ec))
        return Status::error(fmt::format("{}: the checkpoint carries no tokenizer.json; pass --tokenizer FILE", m.source));
    }
    CkptManifest man;
    if (Status s = ckpt_load_model(m.source, m.cfg, m.params, &man); !s) return s;
    m.step = man.step;
  }
  if (!tok_path.empty()) {
    if (Status s = Tokenizer::load(tok_path, m.tok); !s)
      return Status::error(fmt::format("--tokenizer {}: {}", tok_path, s.message()));
  }
  if ((int64_t)m.tok.vocab_size() > m.cfg.vocab_size)
    return Status::error(fmt::format("{}: tokenizer vocabulary {} is larger than the model's vocab_size {}; is it the "
                                     "tokenizer the model was trained with?", tok_path.empty() ? gguf : tok_path,
                                     m.tok.vocab_size(), m.cfg.vocab_size));
  return Status::ok();
}

void cli_add_kv_cache_option(CLI::App& app, std::string& kv_cache) {
  app.add_option("--kv-cache", kv_cache,
                 "keys and values in the KV cache as f32, f16 or bf16 (default: f16 for --dtype f16, bf16 for bf16, "
                 "else f32; a 16-bit cache is half the bytes attention reads per token)")
      ->check(CLI::IsMember({"f32", "fp32", "f16", "fp16", "bf16"}));
}

}  // namespace smelt
