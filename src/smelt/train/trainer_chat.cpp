// The trainer's chat data (trainer_impl.hpp, docs/finetune.md): [data] format = "chat" names chat
// JSONL files; the run renders them with the model's template into RUN/chat/ shards (rank 0 writes,
// the others wait) and trains and evaluates on those. Not the rendering (dataset/chat.hpp) nor the
// shard (dataset/chat_shard.hpp).
#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/common/files.hpp"
#include "smelt/dataset/chat_shard.hpp"
#include "smelt/train/init_from.hpp"
#include "smelt/train/trainer_impl.hpp"

namespace fs = std::filesystem;

namespace smelt::train_detail {

namespace {

// The template the init_from source carries: a checkpoint's state, or a Hugging Face folder's
// tokenizer_config.json when it has a chat_template (as a template path; a base model's has none).
// Neither: state stays null, path empty.
Status init_source_template(const std::string& init_from, json& state, std::string& path) {
  if (init_from.empty()) return Status::ok();
  InitSource src;
  if (Status s = init_from_resolve(init_from, src); !s) return s;
  if (!src.hf_dir.empty()) {
    const std::string tc = (fs::path(src.hf_dir) / "tokenizer_config.json").string();
    std::string text;
    std::error_code ec;
    if (!fs::exists(tc, ec) || !files_read_small(tc, text)) return Status::ok();
    const json j = json::parse(text, nullptr, false);
    if (j.is_object() && j.contains("chat_template") && !j["chat_template"].is_null()) path = tc;
    return Status::ok();
  }
  CkptManifest m;
  if (Status s = ckpt_read_manifest(src.step_dir, m); !s) return s;
  state = m.state;
  return Status::ok();
}

}  // namespace

// Each source of spec (chat JSONL: files, folders or globs) -> RUN/chat/KIND-I; spec rewritten to name them.
Status Trainer::chat_shards(std::string& spec, const char* kind, const ChatRenderer& render, uint64_t max_tokens) {
  std::vector<DataSource> src;
  if (Status s = blend_parse_sources(spec, src); !s) return Status::error(fmt::format("[{}] {}", kind, s.message()));
  std::string out;
  for (size_t i = 0; i < src.size(); i++) {
    const std::string prefix = (fs::path(run_dir_) / "chat" / fmt::format("{}-{}", kind, i)).string();
    if (lead_) {
      std::vector<std::string> files;
      if (Status s = files_expand_inputs({src[i].prefix}, files); !s) return s;
      std::error_code ec;
      fs::create_directories(fs::path(prefix).parent_path(), ec);
      ChatShardStats st;
      if (Status s = chat_shard_build(files, render, *tok_, max_tokens, c_.data.chat_overflow, prefix, st); !s)
        return Status::error(fmt::format("[{}] sources {}: {}", kind, src[i].name, s.message()));
      spdlog::info("{}", st.summary(fmt::format("[{}] {}", kind, src[i].name)));
      for (const auto& e : st.read.examples) spdlog::warn("skipped: {}", e);
      chat_stats_[kind][src[i].name] = st.to_json();
    }
    out += fmt::format("{}{}={}:{}", i ? "," : "", src[i].name, prefix, src[i].weight);
  }
  spec = out;
  return Status::ok();
}

Status Trainer::setup_chat_data() {
  json state;
  std::string path = c_.data.chat_template;
  if (c_.data.format != DataFormat::kChat) {
    // A text run from a model with a template keeps it for `smelt serve` (continued pretraining).
    if (!path.empty() || c_.train.init_from.empty() || !tok_) return Status::ok();
    if (Status s = init_source_template(c_.train.init_from, state, path); !s) return s;
    const bool carried = !path.empty() || state.contains("chat") ||
                         (state.contains("import") && state["import"].value("chat_template", json()).is_string());
    if (!carried) return Status::ok();
    return chat_template_resolve(path, &state, *tok_, chat_);
  }
  if (!tok_)
    return Status::error("[data] format = \"chat\": the conversations are tokenized by the run, which needs a tokenizer "
                         "([train] tokenizer, or the init_from source's)");
  if (path.empty())
    if (Status s = init_source_template(c_.train.init_from, state, path); !s) return s;
  if (Status s = chat_template_resolve(path, state.is_null() ? nullptr : &state, *tok_, chat_); !s) return s;
  spdlog::info("chat data: rendered with {}", chat_.origin);
  ChatRenderer render;
  if (Status s = chat_jinja_renderer(chat_, render); !s) return s;
  // A conversation fills at most a row: T tokens (packed), or the largest bucket's T + 1 (bucketed).
  const uint64_t max_tokens = c_.data.mode == BatchMode::kPacked ? (uint64_t)c_.data.seq_len
                                                                  : (uint64_t)c_.data.buckets.back() + 1;
  if (Status s = chat_shards(c_.data.sources, "data", render, max_tokens); !s) return s;
  if (!c_.eval.data.empty())
    if (Status s = chat_shards(c_.eval.data, "eval", render, max_tokens); !s) return s;
  return comm_->barrier();  // rank 0's shards are written before any rank opens them
}

}  // namespace smelt::train_detail
