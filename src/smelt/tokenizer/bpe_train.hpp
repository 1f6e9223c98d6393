// Byte-level BPE training (Sennrich et al. 2016; GPT-2's byte-level variant, laid out as Hugging
// Face's BpeTrainer does): parallel pre-token counting under a memory budget, then an incremental
// merge loop. Produces a BpeModel; not the tokenizer.json writer (tokenizer.hpp) nor the encoder.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "smelt/common/status.hpp"
#include "smelt/tokenizer/pretokenizer.hpp"
#include "smelt/tokenizer/tokenizer.hpp"

namespace smelt {

// Distinct pre-tokens (byte strings) with 64-bit counts, in one open-addressing table over a
// string arena, so its memory is known to the byte (memory_bytes) and a budget can be enforced.
class PretokenTable {
 public:
  // Returns true when word was not in the table.
  bool add(std::string_view word, int64_t count);
  bool add_hashed(uint64_t hash, std::string_view word, int64_t count);
  // Adds every entry of other (other is left untouched); returns how many were new.
  uint64_t merge_from(const PretokenTable& other);
  // Removes entries with count < threshold; returns how many; adds their counts to *occurrences.
  uint64_t prune_below(int64_t threshold, uint64_t* occurrences);
  void clear();  // also frees the memory
  size_t size() const { return size_; }
  // slots + arena bytes in use: a function of the content alone (not of insertion order), so
  // budget decisions are the same for any thread count.
  uint64_t memory_bytes() const;
  int64_t count_of(std::string_view word) const;  // 0 when absent
  template <class F>
  void for_each(F&& f) const {  // f(std::string_view word, int64_t count), in slot order
    for (const Slot& s : slots_)
      if (s.count > 0) f(std::string_view(arena_.data() + (s.offlen >> 24), s.offlen & 0xFFFFFF), s.count);
  }
  template <class F>
  void for_each_hashed(F&& f) const {  // f(uint64_t hash, std::string_view word, int64_t count)
    for (const Slot& s : slots_)
      if (s.count > 0) f(s.hash, std::string_view(arena_.data() + (s.offlen >> 24), s.offlen & 0xFFFFFF), s.count);
  }
  static constexpr size_t kMaxWordBytes = (1u << 24) - 1;  // longer pieces are not counted

 private:
  struct Slot {
    uint64_t hash = 0;
    uint64_t offlen = 0;  // arena offset << 24 | length
    int64_t count = 0;    // 0: empty slot
  };
  void grow();
  std::vector<Slot> slots_;
  std::string arena_;
  size_t size_ = 0;
};

// Settings of a training run; every field is recorded in the output's info.
struct BpeTrainConfig {
  std::vector<std::string> inputs;      // files (already expanded, in the order given)
  uint32_t vocab_size = 32000;          // total, special tokens and the 256 bytes included
  std::vector<std::string> special_tokens = {"<|endoftext|>"};
  std::string pretokenizer = "gpt2";
  int threads = 1;
  int64_t min_frequency = 0;            // a pair seen fewer times is never merged (HF's min_frequency)
  uint64_t memory_bytes = 1024ull << 20; // budget for the pre-token table (counting phase)
  std::string text_field = "text";      // JSONL field holding the text
};

// What a run saw and did; written into BpeModel::info.
struct BpeTrainStats {
  uint64_t files = 0, documents = 0, bytes = 0;       // input documents and their text bytes
  uint64_t pieces = 0;                                 // pre-token occurrences counted
  uint64_t pieces_too_long = 0;                        // pieces over kMaxWordBytes, not counted
  uint64_t distinct_seen = 0;                          // distinct pre-tokens inserted (before pruning; counts a re-seen pruned word again)
  uint64_t distinct_kept = 0, distinct_pruned = 0;     // at the end
  uint64_t pruned_occurrences = 0;                     // pre-token occurrences dropped by pruning
  uint64_t prunes = 0;                                 // pruning passes
  int64_t prune_threshold = 0;                         // last threshold used (0: never pruned)
  uint64_t peak_table_bytes = 0;                       // largest pre-token table (global, after a round)
  uint64_t rounds = 0;
  uint64_t merges = 0;
  uint64_t read_issues = 0;                            // skipped or repaired input records
  std::string corpus_hash;                             // "xxh3:<16 hex>" of every document's bytes, each followed by 0xFF
  double count_seconds = 0, merge_seconds = 0;
};

// ---- the merge loop (usable on its own: tests, other counters) ----

struct BpeMergeOptions {
  uint32_t vocab_size = 32000;
  std::vector<std::string> special_tokens;
  int64_t min_frequency = 0;
};

// The id of byte b before specials are counted: its rank in Hugging Face's byte-level alphabet
// order (the GPT-2 bytes_to_unicode characters sorted by code point: '!'..'~', '¡'..'¬', '®'..'ÿ',
// then the remaining bytes in byte order). Ids are num_specials + bpe_byte_rank(b).
uint32_t bpe_byte_rank(uint8_t b);

// Words with counts -> model (vocab: specials, 256 bytes, merged tokens; merges in order).
// Incremental: pair counts and pair->word lists are updated locally per merge, and a max-heap with
// lazy invalidation picks the next pair (highest count, ties: smallest (id_a, id_b), as HF does).
void bpe_merge(const PretokenTable& words, const BpeMergeOptions& opt, BpeModel& model);
// The naive reference: recounts every pair over every word before each merge. The oracle for tests.
void bpe_merge_ref(const PretokenTable& words, const BpeMergeOptions& opt, BpeModel& model);

// ---- counting ----

// Splits a text into pieces (a Pretokenizer's split, or a test's own splitter). Must be thread-safe.
using BpeSplitFn = std::function<void(std::string_view, std::vector<std::string_view>&)>;

// Counts the pre-tokens of every document of the inputs (DocReader: text, JSONL(.zst|.gz), ...)
// with cfg.threads threads and the cfg.memory_bytes budget (see bpe_train.cpp for the pruning rule).
// The table's content depends only on the inputs, the splitter and the budget, not on threads.
// progress: called from the calling thread now and then with (documents, bytes read on disk).
Status bpe_count_inputs(const BpeTrainConfig& cfg, const BpeSplitFn& split, PretokenTable& table,
                        BpeTrainStats& stats,
                        const std::function<void(uint64_t, uint64_t)>& progress = {});

// Same, over in-memory documents (tests); no corpus hash work beyond the documents given.
void bpe_count_docs(const std::vector<std::string>& docs, const BpeTrainConfig& cfg,
                    const BpeSplitFn& split, PretokenTable& table, BpeTrainStats& stats);

// The whole stage: count, merge, fill model (vocab, merges, specials, pretokenizer name, info).
Status bpe_train(const BpeTrainConfig& cfg, const Pretokenizer& pretok, BpeModel& model,
                 BpeTrainStats& stats, const std::function<void(uint64_t, uint64_t)>& progress = {});

// The info object saved with the tokenizer: corpus hash, settings, counts.
nlohmann::json bpe_train_info(const BpeTrainConfig& cfg, const BpeTrainStats& stats);

}  // namespace smelt
