// `smelt tokenizer train`: flags into BpeTrainConfig, the training stage, then tokenizer.json (and
// its .info.json provenance) through Tokenizer::save_hf. Not the trainer itself (tokenizer/bpe_train).
#include <cstdio>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "smelt/cli/cli_parse.hpp"
#include "smelt/cli/commands.hpp"
#include "smelt/common/files.hpp"
#include "smelt/common/log.hpp"
#include "smelt/common/progress.hpp"
#include "smelt/tokenizer/bpe_train.hpp"
#include "smelt/tokenizer/tokenizer.hpp"

namespace smelt {

int cli_tokenizer_train(int argc, char** argv) {
  CLI::App app{"smelt tokenizer train: byte-level BPE from refined shards (.jsonl.zst) or text -> tokenizer.json "
               "(Hugging Face format) + tokenizer.json.info.json (corpus hash, settings, counts)"};
  app.name("smelt tokenizer train");
  std::vector<std::string> inputs;
  std::string output, specials = "<|endoftext|>", pretok_name = "gpt2", text_field = "text";
  uint32_t vocab_size = 32000;
  int threads = 0;
  int64_t min_frequency = 0;
  uint64_t memory_mb = 1024;
  app.add_option("-i,--input", inputs, "input files, folders or globs: JSONL(.zst|.gz) shards, text (required)")
      ->required();
  app.add_option("-o,--output", output, "tokenizer.json to write (required)")->required();
  app.add_option("--vocab-size", vocab_size, "vocabulary size, special tokens and the 256 bytes included")
      ->check(CLI::PositiveNumber);
  app.add_option("--special-tokens", specials, "comma-separated special tokens, given the first ids ('' for none)");
  app.add_option("--pretokenizer", pretok_name, "gpt2, llama3, qwen2, cl100k, o200k, or a regex");
  app.add_option("-t,--threads", threads, "counting threads (default: all cores)")->check(CLI::NonNegativeNumber);
  app.add_option("--min-frequency", min_frequency, "never merge a pair seen fewer times")->check(CLI::NonNegativeNumber);
  app.add_option("--memory-mb", memory_mb, "budget for the pre-token table; rare pre-tokens are pruned beyond it")
      ->check(CLI::PositiveNumber);
  app.add_option("--text-field", text_field, "JSONL field holding the text");
  if (int rc = cli_parse(app, argc, argv, "tokenizer train"); rc >= 0) return rc;

  BpeTrainConfig cfg;
  if (Status s = files_expand_inputs(inputs, cfg.inputs); !s) {
    spdlog::error("{}", s.message());
    return kExitUsage;
  }
  cfg.vocab_size = vocab_size;
  cfg.special_tokens.clear();
  for (size_t p = 0; p <= specials.size() && !specials.empty();) {
    size_t e = specials.find(',', p);
    if (e == std::string::npos) e = specials.size();
    if (e > p) cfg.special_tokens.push_back(specials.substr(p, e - p));
    p = e + 1;
  }
  cfg.pretokenizer = pretok_name;
  cfg.threads = threads > 0 ? threads : std::max(1u, std::thread::hardware_concurrency());
  cfg.min_frequency = min_frequency;
  cfg.memory_bytes = memory_mb << 20;
  cfg.text_field = text_field;
  if (cfg.vocab_size < cfg.special_tokens.size() + 256) {
    spdlog::error("--vocab-size {} is below the {} ids the special tokens and the 256 bytes take", cfg.vocab_size,
                  cfg.special_tokens.size() + 256);
    return kExitUsage;
  }
  Status err;
  auto pretok = Pretokenizer::create(pretok_name, err);
  if (!pretok) {
    spdlog::error("--pretokenizer {}: {}", pretok_name, err.message());
    return kExitUsage;
  }

  uint64_t total = 0;
  for (const auto& f : cfg.inputs) {
    std::error_code ec;
    total += std::filesystem::file_size(f, ec);
  }
  spdlog::info("{} input files, {:.1f} MB on disk; vocab {}, pre-tokenizer {}, {} threads, {} MB table budget",
               cfg.inputs.size(), total / 1048576.0, cfg.vocab_size, pretok_name, cfg.threads, memory_mb);
  Progress progress("count", total);
  BpeModel model;
  BpeTrainStats st;
  Status s = bpe_train(cfg, *pretok, model, st, [&](uint64_t docs, uint64_t bytes) { progress.tick(docs, bytes); });
  progress.finish();
  if (!s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  Tokenizer tok;
  if (Status s2 = Tokenizer::from_model(std::move(model), tok); !s2) {
    spdlog::error("the trained model does not load: {}", s2.message());
    return kExitFailure;
  }
  if (Status s2 = tok.save_hf(output); !s2) {
    spdlog::error("{}: {}", output, s2.message());
    return kExitFailure;
  }
  std::fputs(fmt::format("[tokenizer train] {}: vocab {} ({} merges, {} special); {} documents, {:.1f} MB text, "
                         "{} pre-tokens, {} distinct kept, {} pruned ({} prunes, last threshold {}); corpus {}; "
                         "count {:.1f} s, merge {:.1f} s\n",
                         output, tok.vocab_size(), st.merges, cfg.special_tokens.size(), st.documents,
                         st.bytes / 1048576.0, st.pieces, st.distinct_kept, st.distinct_pruned, st.prunes,
                         st.prune_threshold, st.corpus_hash, st.count_seconds, st.merge_seconds)
                 .c_str(),
             stderr);
  return kExitOk;
}

}  // namespace smelt
