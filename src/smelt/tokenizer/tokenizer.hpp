// A byte-level BPE tokenizer: vocabulary, merges, special tokens and the pre-tokenizer, loaded
// from Hugging Face tokenizer.json or tiktoken rank files and saved as tokenizer.json.
// encode/decode are const and thread-safe. Not the trainer (bpe_train.hpp).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "smelt/common/status.hpp"
#include "smelt/tokenizer/pretokenizer.hpp"

namespace smelt {

class TokenMap;

struct SpecialToken {
  std::string text;     // as it appears in text, e.g. "<|endoftext|>"
  uint32_t id = 0;
  bool special = true;  // HF "special" flag (false: an added, non-special token)
};

// The model in raw bytes: what the trainer produces and what files load into.
struct BpeModel {
  std::vector<std::string> vocab;                      // id -> token bytes (raw bytes, not the byte-level alphabet)
  std::vector<std::pair<uint32_t, uint32_t>> merges;   // in priority order; a merge of ids a,b yields vocab id of a+b
  std::vector<SpecialToken> specials;
  std::string pretokenizer = "gpt2";                   // Pretokenizer::create name or regex
  nlohmann::json info = nlohmann::json::object();      // provenance (training corpus hash, settings, counts), saved with the file
  // A pre-token that is itself in the vocabulary is one token, before any merge (HF "ignore_merges",
  // as Llama-3 sets it; tiktoken always does this).
  bool ignore_merges = false;
  // tiktoken order: a pair's priority is the rank (id) of the merged token, not its merge's index.
  // Set by tiktoken loads; the two orders differ only where one token has several merges.
  bool rank_priority = false;
};

class Tokenizer {
 public:
  Tokenizer();
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // Loads a Hugging Face tokenizer.json (byte-level BPE family) or a tiktoken rank file (lines of
  // "base64 rank"), told apart by content. For tiktoken files the split pattern is
  // `tiktoken_pattern` ("cl100k", "o200k", "gpt2") or, when empty, guessed from the file name.
  static Status load(const std::string& path, Tokenizer& out, const std::string& tiktoken_pattern = "");
  static Status from_model(BpeModel model, Tokenizer& out);

  // Appends the ids of text. allow_special: special and added tokens written literally in the text
  // become their ids (as Hugging Face does, and tiktoken with allowed_special="all"); otherwise
  // they are encoded as ordinary text.
  void encode(std::string_view text, std::vector<uint32_t>& out, bool allow_special = true) const;
  // Appends the bytes of ids (concatenated token bytes; may split a UTF-8 character at the ends).
  void decode(const uint32_t* ids, size_t n, std::string& out) const;

  uint32_t vocab_size() const;                                  // largest id + 1
  std::optional<uint32_t> token_to_id(std::string_view token) const;  // vocab or special token
  // The end-of-document token: "<|endoftext|>", "<|end_of_text|>", "</s>" or "<|im_end|>"... if present.
  std::optional<uint32_t> eod_id() const;
  const BpeModel& model() const;
  uint64_t content_hash() const;                                // of vocab, merges, specials, pattern

  // tokenizer.json, written atomically; a non-empty model().info goes to PATH + ".info.json" (HF's
  // loader rejects unknown top-level keys).
  Status save_hf(const std::string& path) const;
  const Pretokenizer& pretokenizer() const;
  // The text of a model as tokenizer.json (what save_hf writes).
  std::string to_hf_json() const;

 public:
  struct Impl;  // tokenizer_impl.hpp; public only so the tokenizer's own files can name it

 private:
  friend Status tokenizer_from_model(BpeModel model, const std::vector<uint32_t>* merged, Tokenizer& out, TokenMap* tokens);
  std::unique_ptr<Impl> impl_;
};

}  // namespace smelt
