// `smelt tokenize`: flags into TokenizeConfig, the tokenizer file into a TokenEncoder, then the
// stage; prints the summary and maps failures to exit codes (2 usage or missing input, 1 failure).
// Not the stage itself (dataset/tokenize).
#include <cstdio>
#include <string_view>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "smelt/cli/cli_parse.hpp"
#include "smelt/cli/commands.hpp"
#include "smelt/cli/stage_run.hpp"
#include "smelt/common/files.hpp"
#include "smelt/common/log.hpp"
#include "smelt/dataset/tokenize.hpp"
#include "smelt/dataset/tokenize_merge.hpp"
#include "smelt/tokenizer/tokenizer.hpp"

namespace smelt {

namespace {

// `smelt tokenize merge -o PREFIX PART...` (argv[0] = "merge")
int cli_tokenize_merge(int argc, char** argv) {
  CLI::App app{"smelt tokenize merge: the outputs of `smelt tokenize --task I --tasks N` into one shard, in input "
               "order (byte-identical to a one-task run over the same inputs), or any outputs in the order given "
               "(--concat)"};
  app.name("smelt tokenize merge");
  TokenizeMergeConfig c;
  app.add_option("PARTS", c.parts, "the parts: prefixes, or their files (PREFIX-*.idx as a shell glob gives them)")
      ->required();
  app.add_option("-o,--output", c.output, "output prefix: writes PREFIX.bin, .idx, .docs, .stats.json (required)")
      ->required();
  app.add_flag("--concat", c.concat, "the parts in the order given, from any runs with one tokenizer and settings");
  app.add_flag("--overwrite", c.overwrite, "replace an existing output at PREFIX");
  if (int rc = cli_parse(app, argc, argv, "tokenize"); rc >= 0) return rc;
  return cli_run_stage<TokenizeMergeSummary>([&](TokenizeMergeSummary& summary) { return tokenize_merge(c, summary); });
}

}  // namespace

int cli_tokenize(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "merge") return cli_tokenize_merge(argc - 1, argv + 1);
  CLI::App app{"smelt tokenize: refined JSONL(.zst) or text -> PREFIX.bin + PREFIX.idx (Megatron-LM MMIDIDX), "
               "PREFIX.docs (sequence -> document id) and PREFIX.stats.json"};
  app.name("smelt tokenize");
  TokenizeConfig c;
  std::string tokenizer_path, bos_token;
  double checkpoint_mb = 64;
  app.add_option("--tokenizer", tokenizer_path, "tokenizer.json (Hugging Face) or a tiktoken file (required)")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("-i,--input", c.inputs, "refined JSONL(.zst) or text files, folders or globs (required)")->required();
  app.add_option("-o,--output", c.output, "output prefix: writes PREFIX.bin, .idx, .docs, .stats.json (required)")
      ->required();
  app.add_flag("--append-eod", c.append_eod, "end every document with the tokenizer's end-of-document token");
  app.add_option("--bos", bos_token,
                 "start every document with this special token (a model whose tokenizer adds one, e.g. Llama 3's "
                 "<|begin_of_text|>: the import's add_bos_token)");
  app.add_option("-t,--threads", c.threads, "encoder threads (default: all cores)")->check(CLI::NonNegativeNumber);
  std::string side = "rest";
  app.add_option("--holdout", c.holdout,
                 "hold out this fraction of documents, chosen by a hash of their page (host and path of the URL, the id "
                 "without one): every crawl of a page lands on the same side (default 0)")
      ->check(CLI::Range(0.0, 0.999));
  app.add_option("--side", side, "with --holdout: 'rest' writes the other documents, 'holdout' only the held-out ones")
      ->check(CLI::IsMember({"rest", "holdout"}));
  app.add_option("--languages", c.languages,
                 "only documents in these languages (refined quality.lang, e.g. en,zh; \"unknown\" without one): one "
                 "shard per language for a weighted blend (default: every document)")
      ->delimiter(',');
  app.add_option("--text-field", c.text_field, "JSONL field holding the text (default: text)");
  app.add_flag("--overwrite", c.overwrite, "replace an earlier, different run's output at PREFIX");
  app.add_option("--task", c.task, "this task's index, 0-based (with --tasks): writes PREFIX-TTTTT")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--tasks", c.tasks,
                 "split the inputs into this many tasks (file i to task i % N); `smelt tokenize merge` joins them")
      ->check(CLI::PositiveNumber);
  app.add_option("--checkpoint-mb", checkpoint_mb, "persist a resume point after this many MB of tokens (default 64)")
      ->check(CLI::PositiveNumber);
  if (int rc = cli_parse(app, argc, argv, "tokenize"); rc >= 0) return rc;
  if (c.task >= c.tasks) {
    spdlog::error("smelt tokenize: --task {} with --tasks {}: expected a task below the task count", c.task, c.tasks);
    return kExitUsage;
  }
  c.take_holdout = side == "holdout";
  c.checkpoint_bytes = std::max<uint64_t>(1, static_cast<uint64_t>(checkpoint_mb * (1 << 20)));

  std::vector<std::string> files;
  if (Status s = files_expand_inputs(c.inputs, files); !s) {
    spdlog::error("{}", s.message());
    return kExitUsage;
  }
  Tokenizer tok;
  if (Status s = Tokenizer::load(tokenizer_path, tok); !s) {
    spdlog::error("{}", s.message());
    return kExitUsage;
  }
  if (c.append_eod && !tok.eod_id()) {
    spdlog::error("{}: the tokenizer has no end-of-document token; drop --append-eod or use one that has it",
                  tokenizer_path);
    return kExitUsage;
  }
  TokenEncoder enc;
  // special-token text inside a document is ordinary text: a page cannot forge an end-of-document
  enc.encode = [&tok](std::string_view text, std::vector<uint32_t>& ids) { tok.encode(text, ids, false); };
  enc.vocab_size = tok.vocab_size();
  enc.eod_id = tok.eod_id();
  if (!bos_token.empty()) {
    enc.bos_id = tok.token_to_id(bos_token);
    if (!enc.bos_id) {
      spdlog::error("--bos {}: not a token of {}", bos_token, tokenizer_path);
      return kExitUsage;
    }
  }
  enc.content_hash = tok.content_hash();
  enc.path = tokenizer_path;

  return cli_run_stage<TokenizeSummary>([&](TokenizeSummary& summary) { return tokenize_run(c, enc, summary); });
}

}  // namespace smelt
