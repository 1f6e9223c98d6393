// Chat records -> a token shard for supervised fine-tuning (docs/finetune.md): each conversation
// rendered by the model's template (chat.hpp) is one document of an int32 MMIDIDX shard whose
// trained tokens (the assistant's replies and their end-of-turn marker) carry kChatTrainedBit. The
// loader strips the bit and makes only flagged tokens targets ([data] format = "chat"). Plus
// PREFIX.stats.json: the tokenizer's hash, records read, skipped (by reason, with file and line), cut and dropped.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "smelt/common/status.hpp"
#include "smelt/dataset/chat.hpp"
#include "smelt/dataset/indexed.hpp"
#include "smelt/dataset/loader_config.hpp"

namespace smelt {

inline constexpr uint32_t kChatTrainedBit = 1u << 30;  // token ids stay below it (vocabularies < 2^30)

struct ChatShardStats {
  ChatReadStats read;              // lines, records, skipped by reason with examples
  int64_t conversations = 0;       // written
  uint64_t tokens = 0, trained_tokens = 0;
  int64_t cut = 0;                 // longer than max_tokens, cut to it
  int64_t dropped = 0;             // longer than max_tokens with chat_overflow = "drop"
  int64_t untrained = 0;           // no trained token (all cut away): left out
  nlohmann::json to_json() const;
  std::string summary(std::string_view name) const;  // one line for the log
};

// Renders and tokenizes every record of `files` (in order) into PREFIX.bin/.idx (int32) and
// PREFIX.stats.json. A conversation of more than max_tokens tokens is cut to its first max_tokens
// (kCut) or left out (kDrop), and counted. Fails when no conversation remains.
Status chat_shard_build(const std::vector<std::string>& files, const ChatRenderer& render, const Tokenizer& tok,
                        uint64_t max_tokens, ChatOverflow overflow, const std::string& prefix, ChatShardStats& out);

// Tokens of a chat shard that are targets (carry the bit).
uint64_t chat_shard_trained_tokens(const IndexedDataset& ds);

}  // namespace smelt
