// Chat JSONL -> an int32 token shard with the trained tokens flagged (chat_shard.hpp).
#include "smelt/dataset/chat_shard.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "smelt/common/files.hpp"

namespace smelt {

nlohmann::json ChatShardStats::to_json() const {
  return {{"lines", read.lines},
          {"records", read.records},
          {"skipped", read.skipped},
          {"skipped_by_reason", read.skipped_by_reason},
          {"skipped_examples", read.examples},
          {"conversations", conversations},
          {"tokens", tokens},
          {"trained_tokens", trained_tokens},
          {"cut", cut},
          {"dropped", dropped},
          {"untrained", untrained}};
}

std::string ChatShardStats::summary(std::string_view name) const {
  std::string s = fmt::format("chat data {}: {} conversations, {} tokens ({} trained) from {} lines; {} cut, {} "
                              "dropped as too long, {} with no trained token left; {} skipped",
                              name, conversations, tokens, trained_tokens, read.lines, cut, dropped, untrained,
                              read.skipped);
  for (const auto& [reason, n] : read.skipped_by_reason) s += fmt::format(" ({} {})", n, reason);
  return s;
}

namespace {

// One conversation's ids with the trained ones flagged, after the length rule; false: left out.
bool conversation_ids(const ChatRendered& r, const Tokenizer& tok, uint64_t max_tokens, ChatOverflow overflow,
                      std::vector<uint32_t>& ids, std::vector<uint8_t>& mask, ChatShardStats& st) {
  ids.clear(), mask.clear();
  chat_tokenize(tok, r, ids, mask);
  if (ids.size() > max_tokens) {
    if (overflow == ChatOverflow::kDrop) {
      st.dropped++;
      return false;
    }
    st.cut++;
    ids.resize(max_tokens), mask.resize(max_tokens);
  }
  uint64_t trained = 0;
  for (size_t k = 0; k < ids.size(); k++)
    if (mask[k]) ids[k] |= kChatTrainedBit, trained++;
  if (trained == 0) {
    st.untrained++;
    return false;
  }
  st.tokens += ids.size();
  st.trained_tokens += trained;
  return true;
}

}  // namespace

Status chat_shard_build(const std::vector<std::string>& files, const ChatRenderer& render, const Tokenizer& tok,
                        uint64_t max_tokens, ChatOverflow overflow, const std::string& prefix, ChatShardStats& out) {
  out = ChatShardStats{};
  if (tok.vocab_size() >= kChatTrainedBit)
    return Status::error(fmt::format("chat data: a vocabulary of {} tokens does not leave the flag bit free",
                                     tok.vocab_size()));
  IndexedWriter w;
  if (Status s = w.open(prefix, IndexedDType::kInt32); !s) return s;
  std::vector<uint32_t> ids;
  std::vector<uint8_t> mask;
  ChatRendered r;
  Status written = Status::ok();  // a write error ends the build (a template error only skips the record)
  for (const auto& f : files) {
    Status s = chat_read_file(f, [&](const std::vector<ChatTurn>& turns, int64_t) {
      if (Status e = chat_render(render, turns, r); !e) return e;
      if (!written || !conversation_ids(r, tok, max_tokens, overflow, ids, mask, out)) return Status::ok();
      out.conversations++;
      written = w.add_document(ids);
      return Status::ok();
    }, out.read);
    if (s && !written) s = written;
    if (!s) {
      w.abort();
      return s;
    }
  }
  if (out.conversations == 0) {
    w.abort();
    return Status::error(fmt::format("no conversation to train on: {}{}", out.summary(fmt::format("{}", fmt::join(files, ", "))),
                                     out.read.examples.empty() ? "" : "; first: " + out.read.examples[0]));
  }
  if (Status s = w.finish(); !s) return s;
  nlohmann::json stats = out.to_json();
  stats["kind"] = "chat";
  stats["tokenizer"] = {{"content_hash", fmt::format("{:016x}", tok.content_hash())}};
  return files_write_atomic(prefix + ".stats.json", stats.dump(2) + "\n");
}

uint64_t chat_shard_trained_tokens(const IndexedDataset& ds) {
  uint64_t n = 0;
  for (uint64_t i = 0; i < ds.sequences(); i++) {
    const TokenView v = ds.sequence(i);
    for (size_t k = 0; k < v.size(); k++) n += (v.at(k) & kChatTrainedBit) != 0;
  }
  return n;
}

}  // namespace smelt
