// The model and tokenizer of generate, serve and eval --tasks (load_model.hpp).
#include "smelt/cli/load_model.hpp"

#include <filesystem>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/ckpt/export_gguf.hpp"
#include "smelt/ckpt/export_weights.hpp"
#include "smelt/ckpt/peft.hpp"
#include "smelt/cli/resolve_checkpoint.hpp"

namespace smelt {

namespace fs = std::filesystem;

Status cli_load_checkpoint(const std::string& step_dir, ModelConfig& cfg, std::vector<float>& params,
                           std::shared_ptr<const LoraAdapters>& lora, int64_t* step) {
  lora.reset();
  CkptManifest man;
  if (Status s = ckpt_read_manifest(step_dir, man); !s) return s;
  if (step) *step = man.step;
  if (!man.state.contains("lora")) return ckpt_load_model(step_dir, cfg, params);
  ExportWeights w;  // the adapters, and the base checked to be their model
  if (Status s = w.open(ExportSource(step_dir, true)); !s) return s;
  cfg = w.config();
  if (Status s = w.read_base(params); !s) return s;
  lora = std::make_shared<const LoraAdapters>(w.lora());
  spdlog::info("{}: a LoRA run's adapters (rank {}, alpha {}, targets {}), unmerged beside the base {}", step_dir,
               w.lora().config.rank, w.lora().config.alpha, fmt::join(w.lora().config.targets, "/"), w.base());
  return Status::ok();
}

Status cli_add_lora(const std::string& dir, const std::string& model, const ModelConfig& c,
                    std::shared_ptr<const LoraAdapters>& lora) {
  if (lora)
    return Status::error(fmt::format("--lora {}: {} is a LoRA run's checkpoint and runs its own adapters; give its "
                                     "base as --checkpoint to run these", dir, model));
  auto a = std::make_shared<LoraAdapters>();
  if (Status s = peft_load(dir, c, *a); !s) return Status::error(fmt::format("--lora {}: {}", dir, s.message()));
  spdlog::info("--lora {}: rank {}, alpha {}, targets {} ({} parameters), unmerged beside the model", dir,
               a->config.rank, a->config.alpha, fmt::join(a->config.targets, "/"), a->layout.params.total);
  lora = std::move(a);
  return Status::ok();
}

Status cli_load_model(const std::string& ckpt, const std::string& gguf, std::string& tok_path, LoadedModel& m,
                      const std::string& lora_dir) {
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
    if (Status s = cli_load_checkpoint(m.source, m.cfg, m.params, m.lora, &m.step); !s) return s;
    if (m.lora) m.lora_source = m.source;
  }
  if (!lora_dir.empty()) {
    if (Status s = cli_add_lora(lora_dir, m.source, m.cfg, m.lora); !s) return s;
    m.lora_source = lora_dir;
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
