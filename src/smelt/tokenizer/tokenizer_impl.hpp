// Tokenizer's private state, shared by tokenizer.cpp (encode/decode) and tokenizer_io.cpp (files).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "smelt/tokenizer/bpe_encode.hpp"
#include "smelt/tokenizer/pretokenizer.hpp"
#include "smelt/tokenizer/tokenizer.hpp"

namespace smelt {

struct Tokenizer::Impl {
  BpeModel model;
  std::unique_ptr<Pretokenizer> pre;
  BpeTables bpe;
  std::vector<SpecialToken> specials_by_length;  // longest first, for literal matching
  bool special_first_byte[256] = {};
  std::vector<std::string> id_text;              // id -> decoded bytes (vocab, then special texts)
  uint32_t vocab_size = 0;
  uint64_t hash = 0;
  uint64_t serial = 0;                           // unique per built tokenizer (keys the piece caches)
};

// Builds the tables of impl from impl.model (validates ids, the pre-tokenizer and merges).
// merged: the id each merge yields, when the caller knows it (else looked up); tokens: the map of
// impl.model.vocab, when the caller has built it (it is moved from).
Status tokenizer_build(Tokenizer::Impl& impl, const std::vector<uint32_t>* merged = nullptr, TokenMap* tokens = nullptr);
Status tokenizer_from_model(BpeModel model, const std::vector<uint32_t>* merged, Tokenizer& out, TokenMap* tokens = nullptr);

}  // namespace smelt
