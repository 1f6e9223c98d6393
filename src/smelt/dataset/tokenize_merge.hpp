// `smelt tokenize merge`: the outputs of `smelt tokenize --task I --tasks N` (or any tokenize
// outputs, --concat) into one PREFIX.bin/.idx/.docs/.stats.json. The tasks of one split are put
// back in input order, file by file (each task's stats say how many sequences each of its files
// gave), so the merged .bin, .idx and .docs are byte-identical to those of a one-task run over the
// same inputs and the loader reads the same batches from them. Not here: tokenizing (tokenize.hpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "smelt/common/status.hpp"
#include "smelt/stage/stage.hpp"

namespace smelt {

struct TokenizeMergeConfig {
  // The parts: prefixes, or their files (PREFIX.bin/.idx/.docs/.stats.json, as a shell glob gives
  // them), each part named once.
  std::vector<std::string> parts;
  std::string output;      // PREFIX of the merged shard
  bool concat = false;     // the parts in the order given, whatever split they come from
  bool overwrite = false;  // replace an existing output
};

struct TokenizeMergeSummary : StageSummary {
  uint64_t parts = 0, documents = 0, tokens = 0;
};

// Refuses, naming the part and what differs: a part that is incomplete or damaged, parts of other
// tokenizers or settings (dtype, end-of-document, text field, held-out side, languages), and without
// --concat a set that is not every task of one split. Writes through temporaries; the .idx last.
Status tokenize_merge(const TokenizeMergeConfig& c, TokenizeMergeSummary& out);

}  // namespace smelt
