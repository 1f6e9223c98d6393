// The `smelt` binary: one subcommand per pipeline stage. Each subcommand lives in its own file.
#include <cstdio>
#include <cstring>
#include <string>

#include "smelt/cli/commands.hpp"
#include "smelt/common/status.hpp"

int main(int argc, char** argv) {
  const char* usage =
      "usage: smelt <command> [options]\n"
      "commands:\n"
      "  prep      raw HTML/WARC/JSONL/text -> refined, deduplicated shards\n"
      "  tokenizer train | encode | decode: byte-level BPE (tokenizer.json, tiktoken files)\n"
      "  tokenize  refined text -> Megatron .bin/.idx token shards\n"
      "  train     train the Llama-style decoder on token shards\n"
      "  eval      loss and perplexity of a checkpoint on held-out tokens\n"
      "  generate  sample text from a checkpoint (KV-cache decoding)\n"
      "  ckpt      verify | list checkpoints\n"
      "  export    a checkpoint -> Hugging Face Llama safetensors + config.json\n"
      "  pipeline  run every stage of a pipeline config in order\n"
      "run 'smelt <command> --help' for its options\n";
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::fputs(usage, argc < 2 ? stderr : stdout);
    return argc < 2 ? smelt::kExitUsage : smelt::kExitOk;
  }
  std::string cmd = argv[1];
  if (cmd == "prep") return smelt::cli_prep(argc - 1, argv + 1);
  if (cmd == "tokenizer") return smelt::cli_tokenizer(argc - 1, argv + 1);
  if (cmd == "tokenize") return smelt::cli_tokenize(argc - 1, argv + 1);
  if (cmd == "train") return smelt::cli_train(argc - 1, argv + 1);
  if (cmd == "eval") return smelt::cli_eval(argc - 1, argv + 1);
  if (cmd == "generate") return smelt::cli_generate(argc - 1, argv + 1);
  if (cmd == "ckpt") return smelt::cli_ckpt(argc - 1, argv + 1);
  if (cmd == "export") return smelt::cli_export(argc - 1, argv + 1);
  if (cmd == "pipeline") return smelt::cli_pipeline(argc - 1, argv + 1);
  std::fprintf(stderr, "smelt: unknown command '%s'\n%s", cmd.c_str(), usage);
  return smelt::kExitUsage;
}
