// --init-from: the source's config and tokenizer, its weights into a shard, the shards' tokenizer
// check (init_from.hpp).
#include "smelt/train/init_from.hpp"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <toml++/toml.h>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/ckpt/import_hf.hpp"
#include "smelt/common/files.hpp"
#include "smelt/dataset/blend.hpp"

namespace fs = std::filesystem;

namespace smelt {

namespace {

// The context an init_from of a Hugging Face folder reads (as smelt import's default); the run's
// own [model] max_seq_len replaces it when set.
constexpr int kInitFromMaxSeqLen = 4096;

Status resolve_checkpoint(const std::string& source, InitSource& out) {
  std::error_code ec;
  if (Status s = ckpt_resolve(source, out.step_dir); !s)
    return Status::error(fmt::format("[train] init_from: not a Hugging Face folder (no config.json) and {}",
                                     s.message()));
  CkptManifest m;
  if (Status s = ckpt_read_manifest(out.step_dir, m); !s) return s;
  if (Status s = ckpt_model_config(out.step_dir, m, out.model); !s) return s;
  const fs::path tok = fs::path(out.step_dir) / "tokenizer.json";
  if (fs::exists(tok, ec)) out.tokenizer_path = tok.string();
  return Status::ok();
}

// A Hugging Face folder: import_hf's reading of config.json (the families, every refusal) and of
// the weights; its tokenizer.json beside them.
Status resolve_hf(const std::string& source, InitSource& out) {
  HfModelInfo info;
  if (Status s = import_hf_config(source, kInitFromMaxSeqLen, info); !s)
    return Status::error(fmt::format("[train] init_from {}: {}", source, s.message()));
  out.model = info.config;
  std::error_code ec;
  const fs::path tok = fs::path(source) / "tokenizer.json";
  if (fs::exists(tok, ec)) out.tokenizer_path = tok.string();
  spdlog::info("[train] init_from {}: {} ({} parameters)", source, info.architecture, param_count(out.model));
  return Status::ok();
}

// Where each tensor of `layout` goes: `at(t)` gives the place for its t.size() floats (its own
// place in the parameters, or a buffer), `done(t, that place)` runs once it holds them.
struct InitDest {
  std::function<float*(const ParamTensor&)> at;
  InitPut done;
};

// Each rank reads its boxes a tensor at a time: the rows of its box straight into place, or, for a
// box of some columns (a row-parallel projection's), the box's rows in a buffer the columns are
// taken from. Memory besides the model: at most one tensor (two when the place is a buffer).
Status load_hf(const InitSource& src, const ModelConfig& cfg, const ParamLayout& layout, const InitDest& dest) {
  HfWeights weights;
  if (Status s = weights.open(src.hf_dir, cfg); !s)
    return Status::error(fmt::format("[train] init_from {}: {}", src.given, s.message()));
  const ParamLayout whole = param_layout(cfg);
  std::vector<float> rows;
  for (const ParamTensor& t : layout.tensors) {
    const ParamTensor& w = whole.tensors[t.full_index];
    float* to = dest.at(t);
    Status s = Status::ok();
    if (t.cols == w.cols) {
      s = weights.read_rows(w, t.row0, t.rows, to);
    } else {
      rows.resize((size_t)(t.rows * w.cols));
      s = weights.read_rows(w, t.row0, t.rows, rows.data());
      for (int64_t r = 0; s && r < t.rows; r++) std::copy_n(rows.data() + r * w.cols + t.col0, t.cols, to + r * t.cols);
    }
    if (!s) return Status::error(fmt::format("[train] init_from {}: {}", src.given, s.message()));
    if (dest.done) dest.done(t, to);
  }
  return Status::ok();
}

Status load(const InitSource& src, const ModelConfig& cfg, const ParamLayout& layout, const InitDest& dest) {
  if (!src.hf_dir.empty()) return load_hf(src, cfg, layout, dest);
  CkptManifest m;
  if (Status s = ckpt_read_manifest(src.step_dir, m); !s) return s;
  for (const ParamTensor& t : layout.tensors) {
    float* to = dest.at(t);
    if (Status s = ckpt_read_box(src.step_dir, m, t.name, t.full_rows, t.full_cols,
                                 CkptBox{t.row0, t.col0, t.rows, t.cols}, to);
        !s)
      return Status::error(fmt::format("[train] init_from {}: {}", src.given, s.message()));
    if (dest.done) dest.done(t, to);
  }
  return Status::ok();
}

}  // namespace

Status init_from_resolve(const std::string& source, InitSource& out) {
  out = InitSource{};
  out.given = source;
  std::error_code ec;
  if (!fs::is_directory(source, ec))
    return Status::error(fmt::format("[train] init_from {}: not a directory (want a run folder, a checkpoint step "
                                     "folder or a Hugging Face folder)", source));
  Status s = Status::ok();
  if (fs::exists(fs::path(source) / "config.json", ec)) {
    out.hf_dir = source;
    s = resolve_hf(source, out);
  } else {
    s = resolve_checkpoint(source, out);
  }
  if (!s) return s;
  out.model.recompute = false;
  return Status::ok();
}

void init_from_apply(const InitSource& src, toml::table& root, std::vector<std::string>* changed) {
  ModelConfig next = src.model;
  const toml::node_view<toml::node> run = root["model"];
  next.recompute = run["recompute"].value_or(false);
  next.max_seq_len = (int)run["max_seq_len"].value_or((int64_t)next.max_seq_len);
  toml::table model = model_config_to_toml(next);
  if (changed && run.is_table()) {
    auto text = [](const toml::node* n) {
      if (!n) return std::string();
      toml::table t;
      t.insert_or_assign("v", *n);
      std::ostringstream os;
      os << t;
      return os.str();
    };
    for (const auto& [k, v] : *run.as_table())
      if (text(&v) != text(model.get(k))) changed->push_back(std::string(k.str()));
  }
  root.insert_or_assign("model", std::move(model));
  if (!root["train"].is_table()) root.insert_or_assign("train", toml::table{});
  toml::table& train = *root["train"].as_table();
  if (train["tokenizer"].value_or(std::string()).empty() && !src.tokenizer_path.empty())
    train.insert_or_assign("tokenizer", src.tokenizer_path);
}

Status init_from_load_each(const InitSource& src, const ModelConfig& cfg, const ParamLayout& layout, const InitPut& put) {
  std::vector<float> buf;
  return load(src, cfg, layout, {[&buf](const ParamTensor& t) {
                                   buf.resize((size_t)t.size());
                                   return buf.data();
                                 },
                                 put});
}

Status init_from_load(const InitSource& src, const ModelConfig& cfg, const ParamLayout& layout, float* params) {
  return load(src, cfg, layout, {[params](const ParamTensor& t) { return params + t.offset; }, nullptr});
}

Status init_from_check_data(const std::string& sources, const Tokenizer& tok, std::vector<std::string>* unchecked) {
  std::vector<DataSource> src;
  if (Status s = blend_parse_sources(sources, src); !s) return s;
  const std::string want = fmt::format("{:016x}", tok.content_hash());
  for (const DataSource& d : src) {
    const std::string path = d.prefix + ".stats.json";
    std::string text;
    std::error_code ec;
    if (!fs::exists(path, ec) || !files_read_small(path, text)) {
      if (unchecked) unchecked->push_back(d.prefix);
      continue;
    }
    std::string have;
    try {
      have = nlohmann::json::parse(text).at("tokenizer").value("content_hash", "");
    } catch (const std::exception& e) {
      return Status::error(fmt::format("{}: {}", path, e.what()));
    }
    if (have.empty()) {
      if (unchecked) unchecked->push_back(d.prefix);
    } else if (have != want) {
      return Status::error(fmt::format("[train] init_from: data source {} was tokenized with tokenizer {} ({}), not "
                                       "with the model's ({}): re-tokenize it with the model's tokenizer.json", d.name,
                                       have, path, want));
    }
  }
  return Status::ok();
}

}  // namespace smelt
