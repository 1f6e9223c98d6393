// The [data] section's struct (docs/loader.md), shared by the loader and the planner that the
// loader drives (blend.hpp), with the batch mode. Not the reader (loader.cpp) nor the planning.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <toml++/toml.h>

#include "smelt/common/enum_names.hpp"
#include "smelt/common/status.hpp"

namespace smelt {

enum class BatchMode { kPacked, kBucketed };  // [data] mode
inline constexpr EnumName<BatchMode> kBatchModeNames[] = {{BatchMode::kPacked, "packed"},
                                                          {BatchMode::kBucketed, "bucketed"}};
inline std::span<const EnumName<BatchMode>> enum_names(BatchMode) { return kBatchModeNames; }

enum class DataFormat { kText, kChat };  // [data] format: token shards, or chat JSONL (docs/finetune.md)
inline constexpr EnumName<DataFormat> kDataFormatNames[] = {{DataFormat::kText, "text"}, {DataFormat::kChat, "chat"}};
inline std::span<const EnumName<DataFormat>> enum_names(DataFormat) { return kDataFormatNames; }

enum class ChatOverflow { kCut, kDrop };  // [data] chat_overflow: a conversation longer than a row
inline constexpr EnumName<ChatOverflow> kChatOverflowNames[] = {{ChatOverflow::kCut, "cut"}, {ChatOverflow::kDrop, "drop"}};
inline std::span<const EnumName<ChatOverflow>> enum_names(ChatOverflow) { return kChatOverflowNames; }

// The [data] section. Every key, with its default; docs/loader.md explains each.
struct LoaderConfig {
  std::string sources;              // "[NAME=]PREFIX[:WEIGHT],..." (the trainer's --data)
  BatchMode mode = BatchMode::kPacked;
  int seq_len = 512;                // packed: T
  int batch_size = 4;               // packed: GLOBAL rows per step (split over ranks)
  bool doc_mask = false;            // keep attention and positions inside a document
  std::vector<int> buckets = {128, 256, 512, 1024, 2048};  // bucketed: row lengths, ascending
  uint64_t max_tokens_per_batch = 16384;                    // bucketed: rows = this / bucket
  uint64_t seed = 1234;
  bool shuffle = true;              // false: documents in file order (each epoch)
  uint64_t span_tokens = 0;         // packed: shuffle spans of this many tokens of a document, not whole documents (0)
  bool append_eod = true;           // insert EOD after every document (false when the shards have it)
  int64_t eod_id = -1;              // -1: the tokenizer's (the trainer sets it) or none
  int prefetch_threads = 2;         // 0: build each batch on the caller's thread
  int prefetch_depth = 4;           // batches in flight
  int latency_window = 1000;        // fetch latencies kept for P50/P95/P99
  double inject_slow_ms = 0;        // fault injection (tests): each batch takes this much longer to build
  // Chat (supervised fine-tuning): sources name chat JSONL files, rendered with the model's
  // template into shards whose trained tokens carry kChatTrainedBit (dataset/chat_shard.hpp);
  // rows hold whole conversations; only the flagged tokens are targets.
  DataFormat format = DataFormat::kText;
  std::string chat_template;        // "": the model's own (or Smelt's); else a .jinja or tokenizer_config.json
  ChatOverflow chat_overflow = ChatOverflow::kCut;
  // Streaming mode (StreamLoader): refined .jsonl(.zst) read and tokenized on the fly.
  std::string stream_tokenizer;     // tokenizer file; non-empty = streaming mode
  int stream_threads = 1;           // tokenizer threads
  // Not from TOML: set by the trainer.
  int rank = 0, ranks = 1;
  std::vector<std::pair<std::string, uint64_t>> exclude;  // quarantined (source name, document)
};

// Reads [data] from root into c (keys absent keep their defaults) and validates. Errors name the
// key, the value and what is allowed; unknown keys are errors.
Status loader_config_read(const toml::table& root, LoaderConfig& c, toml::table* resolved = nullptr);
// Each key's limits (the field table in loader.cpp) and the rules between keys; all errors, one a line.
Status loader_config_validate(const LoaderConfig& c);
struct SectionDoc;
SectionDoc loader_config_doc();  // [data]'s field table (docs check)

}  // namespace smelt
