// Continued pretraining (docs/import.md): `smelt train --init-from SOURCE` ([train] init_from)
// starts a run from existing weights with a fresh optimizer and a fresh schedule. SOURCE is a run
// folder (its newest valid checkpoint), a checkpoint step folder, or a Hugging Face folder
// (config.json + safetensors, read by ckpt/import_hf.hpp). The model's config and tokenizer come
// from SOURCE; the run's shards must have been made with that tokenizer. Not the import command
// (cli/import_cmd.cpp) and not --resume (which continues a run, optimizer and data position
// included, and wins over --init-from when the run folder already holds a checkpoint).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "smelt/common/status.hpp"
#include "smelt/model/config.hpp"
#include "smelt/model/params.hpp"
#include "smelt/tokenizer/tokenizer.hpp"

namespace smelt {

struct InitSource {
  std::string given;           // as the config names it
  std::string step_dir;        // a Smelt checkpoint ("" for a Hugging Face folder)
  std::string hf_dir;          // a Hugging Face folder ("" for a checkpoint)
  ModelConfig model;           // its [model] (recompute off)
  std::string tokenizer_path;  // its tokenizer.json ("" when it has none)
};

// What SOURCE is, its model config and tokenizer; errors name SOURCE and what was expected.
Status init_from_resolve(const std::string& source, InitSource& out);

// A run config (TOML, before it is read) continued from SOURCE: its [model] becomes SOURCE's,
// keeping the run's recompute and max_seq_len when the run sets them (memory and the RoPE table's
// size, not the function); [train] tokenizer defaults to SOURCE's. `changed` lists the [model] keys
// the run had set otherwise (for the log).
void init_from_apply(const InitSource& src, toml::table& root, std::vector<std::string>* changed = nullptr);

// Fills a model shard's parameters (layout: param_layout(cfg, shard)) from SOURCE, box by box.
Status init_from_load(const InitSource& src, const ModelConfig& cfg, const ParamLayout& layout, float* params);
// The same, each tensor (t.size() floats) handed to `put` as it is read: a frozen base held in a
// compact dtype (Model::set_base_tensor) never holds the whole model in fp32.
using InitPut = std::function<void(const ParamTensor&, const float*)>;
Status init_from_load_each(const InitSource& src, const ModelConfig& cfg, const ParamLayout& layout, const InitPut& put);

// Each data source (PREFIX of "[NAME=]PREFIX[:WEIGHT],...") whose PREFIX.stats.json records the
// tokenizer it was made with must name tok's content hash; a shard made with another tokenizer is
// refused, naming the shard and both hashes. Shards without stats are reported in `unchecked`.
Status init_from_check_data(const std::string& sources, const Tokenizer& tok, std::vector<std::string>* unchecked);

}  // namespace smelt
