// The end of `smelt pipeline`: what every stage made, read back from the work folder, as a summary
// for people (artifacts, stage times, training speed and MFU, validation loss in nats per token and
// bits per byte beside gzip / zstd / xz on the same text, a chart of the loss curves, the samples,
// what to run next: serve, watch on the dashboard, export) and the same as JSON (WORKDIR/pipeline.json). Not the stages (pipeline_cmd.cpp).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace smelt {

struct PipelineSample {
  std::string prompt, mode, text;  // mode: "greedy" or "sampled"
};

// A training shard: one per language under [tokenize] language_weights, else the one of every document.
struct PipelineShard {
  std::string name, prefix;  // name: the language ("" for the one shard)
  double weight = 1;
};

struct PipelineSummaryInput {
  std::string config_path;
  // artifacts ("" where the run made none); tokens: the trainer's data sources ("PREFIX" or
  // "en=PREFIX-en:W,zh=PREFIX-zh:W"), made of `shards`
  std::string refined, tokenizer, tokens, valid, run, eval, sample;
  std::string tasks;  // the eval stage's `smelt eval --tasks` JSON ("" none)
  std::vector<PipelineShard> shards;
  double seconds = 0;
  nlohmann::ordered_json stages = nlohmann::ordered_json::object();  // name -> {exit_code, seconds}, in run order
  std::vector<PipelineSample> samples;
  std::string sampling;  // how the samples were drawn, in words
  std::string smelt = "smelt";  // how the person types the command (cli_smelt_command: "build/smelt")
};

// The JSON object in path; null when the file is missing or does not parse.
nlohmann::json pipeline_read_json(const std::string& path);

// Reads refined/stats.json, each shard's PREFIX.stats.json, RUN/summary.json, RUN/metrics.jsonl and the eval
// stage's JSON; fills `text` and `j`.
void pipeline_summary(const PipelineSummaryInput& in, std::string& text, nlohmann::json& j);

}  // namespace smelt
