// The tokenize stage: refined JSONL(.zst) or text -> PREFIX.bin + PREFIX.idx (Megatron MMIDIDX),
// PREFIX.docs (sequence -> document id) and PREFIX.stats.json. One reader thread, N encoder
// threads and an ordered writer (this thread), as in refine/prep; one sequence per document, in
// input order, so the output does not depend on the thread count. Resumable from checkpoints.
// Not here: loading a tokenizer file or flags (cli/tokenize_cmd.cpp), the file formats (indexed.hpp,
// lineage.hpp).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "smelt/common/status.hpp"
#include "smelt/stage/stage.hpp"

namespace smelt {

struct TokenizeConfig {
  std::vector<std::string> inputs;  // files, folders, globs
  std::string output;               // PREFIX: writes PREFIX.bin, .idx, .docs, .stats.json
  bool append_eod = false;          // end every sequence with the tokenizer's end-of-document id
  int threads = 0;                  // encoder threads; 0 = all cores
  std::string text_field = "text";  // JSONL field holding the text
  // Held-out split by page: a document is held out when hash(page_key(url, id)) (common/page_key.hpp) falls below
  // `holdout` (a fraction in [0,1)); `take_holdout` false keeps the rest, true keeps only the
  // held-out ones.
  // Two runs with the same fraction and opposite sides give disjoint train and eval shards that do
  // not depend on file order, thread count or resumes.
  double holdout = 0.0;
  bool take_holdout = false;
  // Only documents whose language (a refined document's quality.lang; "unknown" without one) is
  // one of these; empty: every document. One shard per language is what a blend weights
  // ([data] sources "en=PREFIX-en:1,zh=PREFIX-zh:1").
  std::vector<std::string> languages;
  // This task's share of the inputs: files i of the expanded inputs with i % tasks == task. With
  // tasks > 1 the output prefix is PREFIX-TTTTT (task, five digits) and its stats list where each
  // file's sequences are, so `smelt tokenize merge` can put the tasks back in input order.
  int task = 0, tasks = 1;
  bool overwrite = false;           // replace an earlier, different run's output at PREFIX
  uint64_t checkpoint_bytes = 64ull << 20;  // persist a resume point after this many .bin bytes
  double log_interval_s = 10;       // plain progress lines when stderr is not a terminal
};

// What the stage needs of a tokenizer. encode must be thread-safe and append to its vector.
struct TokenEncoder {
  std::function<void(std::string_view text, std::vector<uint32_t>& ids)> encode;
  uint32_t vocab_size = 0;            // decides the dtype (indexed_dtype_for_vocab)
  std::optional<uint32_t> eod_id;     // required with append_eod
  // Starts every document (a model whose tokenizer adds one: Llama 3's <|begin_of_text|>,
  // tokenizer_config.json's add_bos_token; the CLI's --bos TOKEN). Unset: none.
  std::optional<uint32_t> bos_id;
  uint64_t content_hash = 0;          // part of the resume fingerprint and the stats
  std::string path;                   // the tokenizer file, for the stats
};

struct TokenizeSummary : StageSummary {
  uint64_t documents = 0, tokens = 0;
};

// Runs the stage. A stop request (stage_request_stop, stage/stage.hpp: the CLI's SIGINT/SIGTERM)
// ends it at a clean point; rerunning the same command resumes from the last checkpoint, and the
// final .bin/.idx/.docs are byte-identical to those of an uninterrupted run.
Status tokenize_run(const TokenizeConfig& c, const TokenEncoder& enc, TokenizeSummary& out);

// PREFIX.stats.json and PREFIX.tokenize-state.json.
std::string tokenize_stats_path(const std::string& prefix);
std::string tokenize_state_path(const std::string& prefix);

}  // namespace smelt
