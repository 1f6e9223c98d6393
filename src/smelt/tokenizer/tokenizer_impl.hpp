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
};

// Builds the tables of impl from impl.model (validates ids, the pre-tokenizer and merges).
Status tokenizer_build(Tokenizer::Impl& impl);

}  // namespace smelt
