// The one table of `smelt` subcommands: name, entry point, the binary that runs it, summary.
// Not the dispatch itself (cli_main.cpp) nor the two mains (main.cpp: light; full_main.cpp: full).
//
// Two executables are built from it. `smelt` (light) links only the LIGHT commands, with
// --as-needed, so it never loads MPI, OpenBLAS, OpenMP or oneDNN (~40 ms of start-up on a Xeon,
// a tenth of a 10 MB tokenizer encode); for a FULL command it execs `smelt-full`, its sibling
// file, with argv unchanged (same pid, signals, stdin/stdout, exit code). A new command goes here;
// if it needs none of those libraries mark it LIGHT, else FULL.
#pragma once

#include <span>

#define SMELT_COMMANDS(X)                                                                               \
  X("prep", cli_prep, LIGHT, "raw HTML/WARC/JSONL/text -> refined, deduplicated shards")                \
  X("tokenizer", cli_tokenizer, LIGHT,                                                                  \
    "train | encode | decode: byte-level BPE (tokenizer.json, tiktoken files)")                         \
  X("tokenize", cli_tokenize, LIGHT, "refined text -> Megatron .bin/.idx token shards")                 \
  X("dedup", cli_dedup, LIGHT, "run | signatures | buckets | cluster | filter: dedup across tasks")     \
  X("quality", cli_quality, LIGHT, "train | eval: fastText quality classifiers (DCLM's recipe)")        \
  X("trace", cli_trace, LIGHT, "merge | summary: timelines of smelt train --trace-steps")               \
  X("train", cli_train, FULL, "train the Llama-style decoder on token shards")                          \
  X("eval", cli_eval, FULL, "loss, bits per byte, q8_0 KL of a checkpoint on held-out tokens")          \
  X("generate", cli_generate, FULL, "sample text from a checkpoint or GGUF file (KV-cache decoding)")   \
  X("ckpt", cli_ckpt, FULL, "verify | list checkpoints")                                                \
  X("export", cli_export, FULL, "a checkpoint -> Hugging Face safetensors or a GGUF file")              \
  X("import", cli_import, FULL, "a Hugging Face Llama/Mistral/Qwen folder -> a Smelt checkpoint")      \
  X("pipeline", cli_pipeline, FULL, "run every stage of a pipeline config in order")                    \
  X("machine", cli_machine, FULL, "the CPU, its peaks, the GEMM back ends and a model's GEMM rates")    \
  X("plan", cli_plan, FULL, "the parallel layouts of a model on a cluster: memory and step time")      \
  X("serve", cli_serve, FULL, "an OpenAI-compatible HTTP server over a checkpoint or GGUF file")        \
  X("launch", cli_launch, LIGHT, "run a training command; restart it from its last checkpoint on failure")  \
  X("health", cli_health, LIGHT, "a run's vital signs against their bands (exit 1 when one is bad)")    \
  X("dashboard", cli_dashboard, LIGHT, "a live page of training runs' curves, vital signs and events")  \
  X("report", cli_report, LIGHT, "training runs' dashboard as one self-contained HTML file")

namespace smelt {

// File name of the full binary, looked up next to the light one (/proc/self/exe).
inline constexpr const char* kFullBinaryName = "smelt-full";

struct Command {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv);  // argv[0] = the command name; nullptr: runs in smelt-full
};

// Runs argv[1]'s command from `table` and returns its exit code; --help / no command print the
// usage. A command whose `run` is nullptr goes to `elsewhere(argc, argv)` with the whole argv.
int cli_main(std::span<const Command> table, int argc, char** argv, int (*elsewhere)(int, char**));

}  // namespace smelt
