// The BPE merge loop (incremental, and the naive recount-per-merge reference) and the training
// stage that ties counting (pretoken_count.cpp) to it. Not the tokenizer.json writer (tokenizer.cpp).
//
// Layout, as Hugging Face's BpeTrainer with the byte-level alphabet: special tokens get ids
// 0..S-1, the 256 bytes S..S+255 in byte-level character order (bpe_byte_rank), merged tokens
// follow in merge order. The next merge is the pair with the highest count; ties go to the
// smallest (id_a, id_b), as HF's Merge ordering does, so on the same pre-tokens the merges equal
// HF's. A merge whose token already exists (the same bytes reached by another pair) reuses its id.
#include "smelt/tokenizer/bpe_train.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <map>
#include <queue>
#include <unordered_map>

#include "smelt/common/hash.hpp"

namespace smelt {

uint32_t bpe_byte_rank(uint8_t b) {
  static const auto table = [] {
    std::array<uint32_t, 256> r{};
    uint32_t n = 0;
    auto printable = [](int c) { return (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE); };
    for (int c = 0; c < 256; ++c)
      if (printable(c)) r[c] = n++;
    for (int c = 0; c < 256; ++c)
      if (!printable(c)) r[c] = n++;
    return r;
  }();
  return table[b];
}

namespace {

// Vocabulary under construction: id -> bytes and bytes -> id (specials included, as HF does).
struct VocabBuilder {
  BpeModel& model;
  std::unordered_map<std::string, uint32_t> ids;

  VocabBuilder(BpeModel& m, const std::vector<std::string>& specials) : model(m) {
    model.vocab.clear();
    model.merges.clear();
    model.specials.clear();
    for (const auto& s : specials) {
      if (ids.count(s)) continue;
      uint32_t id = static_cast<uint32_t>(model.vocab.size());
      model.specials.push_back(SpecialToken{s, id, true});
      model.vocab.push_back(s);
      ids.emplace(s, id);
    }
    std::vector<std::string> bytes(256);
    for (int c = 0; c < 256; ++c) bytes[bpe_byte_rank(static_cast<uint8_t>(c))] = std::string(1, static_cast<char>(c));
    for (auto& b : bytes) {
      ids.emplace(b, static_cast<uint32_t>(model.vocab.size()));
      model.vocab.push_back(std::move(b));
    }
  }
  uint32_t byte_id(uint8_t b) const { return static_cast<uint32_t>(model.specials.size()) + bpe_byte_rank(b); }
  // Records the merge (a, b) and returns the id of its token.
  uint32_t merge(uint32_t a, uint32_t b) {
    std::string tok = model.vocab[a] + model.vocab[b];
    model.merges.emplace_back(a, b);
    auto [it, fresh] = ids.emplace(tok, static_cast<uint32_t>(model.vocab.size()));
    if (fresh) model.vocab.push_back(std::move(tok));
    return it->second;
  }
};

// Open-addressing map from a pair (a << 32 | b) to a dense pair index.
class PairIndex {
 public:
  static constexpr uint64_t kEmpty = ~0ull;
  explicit PairIndex(size_t expect) {
    size_t cap = 1024;
    while (cap < expect * 2) cap *= 2;
    keys_.assign(cap, kEmpty);
    vals_.assign(cap, 0);
  }
  // Index of key, inserting next_index when absent (then *fresh = true).
  uint32_t find_or_insert(uint64_t key, uint32_t next_index, bool* fresh) {
    if ((size_ + 1) * 2 > keys_.size()) grow();
    size_t mask = keys_.size() - 1;
    for (size_t i = hash_mix(key) & mask;; i = (i + 1) & mask) {
      if (keys_[i] == key) { *fresh = false; return vals_[i]; }
      if (keys_[i] == kEmpty) {
        keys_[i] = key;
        vals_[i] = next_index;
        ++size_;
        *fresh = true;
        return next_index;
      }
    }
  }

 private:
  void grow() {
    std::vector<uint64_t> ok = std::move(keys_);
    std::vector<uint32_t> ov = std::move(vals_);
    keys_.assign(ok.size() * 2, kEmpty);
    vals_.assign(ok.size() * 2, 0);
    size_t mask = keys_.size() - 1;
    for (size_t j = 0; j < ok.size(); ++j) {
      if (ok[j] == kEmpty) continue;
      size_t i = hash_mix(ok[j]) & mask;
      while (keys_[i] != kEmpty) i = (i + 1) & mask;
      keys_[i] = ok[j];
      vals_[i] = ov[j];
    }
  }
  std::vector<uint64_t> keys_;
  std::vector<uint32_t> vals_;
  size_t size_ = 0;
};

struct HeapEntry {
  int64_t count;
  uint32_t a, b, pair;
};
// std::priority_queue pops the largest: highest count, then smallest (a, b).
struct HeapLess {
  bool operator()(const HeapEntry& x, const HeapEntry& y) const {
    if (x.count != y.count) return x.count < y.count;
    if (x.a != y.a) return x.a > y.a;
    return x.b > y.b;
  }
};

// The incremental merge state: words as symbol runs in one array, pairs with 64-bit counts and
// the list of words they occur in (append-only; stale entries are skipped when scanned).
class MergeLoop {
 public:
  MergeLoop(const PretokenTable& table, VocabBuilder& vb) : vb_(vb), index_(table.size() * 4) {
    size_t total = 0;
    table.for_each([&](std::string_view w, int64_t) { if (w.size() >= 2) total += w.size(); });
    sym_.reserve(total);
    table.for_each([&](std::string_view w, int64_t c) {
      if (w.size() < 2) return;  // a single byte has no pair
      start_.push_back(sym_.size());
      len_.push_back(static_cast<uint32_t>(w.size()));
      count_.push_back(c);
      for (unsigned char ch : w) sym_.push_back(vb_.byte_id(ch));
    });
    for (uint32_t w = 0; w < count_.size(); ++w) {
      const uint32_t* s = &sym_[start_[w]];
      for (uint32_t i = 0; i + 1 < len_[w]; ++i) add(s[i], s[i + 1], count_[w], w);
    }
    stamp_.assign(count_.size(), ~0u);
    std::vector<HeapEntry> init;
    init.reserve(pcount_.size());
    for (uint32_t p = 0; p < pcount_.size(); ++p)
      if (pcount_[p] > 0) init.push_back({pcount_[p], pa_[p], pb_[p], p});
    heap_ = decltype(heap_)(HeapLess{}, std::move(init));
  }

  void run(uint32_t vocab_size, int64_t min_frequency) {
    uint32_t step = 0;
    while (vb_.model.vocab.size() < vocab_size && !heap_.empty()) {
      HeapEntry top = heap_.top();
      heap_.pop();
      int64_t cur = pcount_[top.pair];
      if (top.count != cur) {  // stale: counts only fall, so re-queue at the current count
        if (cur > 0) heap_.push({cur, top.a, top.b, top.pair});
        continue;
      }
      if (cur < 1 || cur < min_frequency) break;
      uint32_t c = vb_.merge(top.a, top.b);
      apply(top.pair, top.a, top.b, c, step++);
    }
  }

 private:
  // Adds delta to the count of pair (a, b); with w set, notes that word w holds the pair.
  void add(uint32_t a, uint32_t b, int64_t delta, uint32_t w = ~0u) {
    bool fresh;
    uint32_t p = index_.find_or_insert((static_cast<uint64_t>(a) << 32) | b,
                                       static_cast<uint32_t>(pcount_.size()), &fresh);
    if (fresh) {
      pcount_.push_back(0);
      pa_.push_back(a);
      pb_.push_back(b);
      where_.emplace_back();
      touched_.push_back(~0u);
    }
    pcount_[p] += delta;
    if (w != ~0u) {
      auto& wl = where_[p];
      if (wl.empty() || wl.back() != w) wl.push_back(w);
      if (touched_[p] != cur_step_) touched_[p] = cur_step_, touched_list_.push_back(p);
    }
  }

  void apply(uint32_t p, uint32_t a, uint32_t b, uint32_t c, uint32_t step) {
    cur_step_ = step;
    touched_list_.clear();
    std::vector<uint32_t> words;
    words.swap(where_[p]);
    for (uint32_t w : words) {
      if (stamp_[w] == step) continue;
      stamp_[w] = step;
      uint32_t* s = &sym_[start_[w]];
      uint32_t n = len_[w], out = 0, i = 0;
      int64_t cnt = count_[w];
      while (i < n) {
        if (i + 1 < n && s[i] == a && s[i + 1] == b) {
          if (out > 0) {
            add(s[out - 1], a, -cnt);
            add(s[out - 1], c, cnt, w);
          }
          if (i + 2 < n) {
            add(b, s[i + 2], -cnt);
            add(c, s[i + 2], cnt, w);
          }
          s[out++] = c;
          i += 2;
        } else {
          s[out++] = s[i++];
        }
      }
      len_[w] = out;
    }
    pcount_[p] = 0;  // every occurrence is merged (the overlap corrections above may leave a residue)
    for (uint32_t q : touched_list_)
      if (pcount_[q] > 0) heap_.push({pcount_[q], pa_[q], pb_[q], q});
  }

  VocabBuilder& vb_;
  std::vector<uint32_t> sym_;                // [symbol] of every word, word w at start_[w]
  std::vector<uint64_t> start_;              // [word]
  std::vector<uint32_t> len_;                // [word] current symbols
  std::vector<int64_t> count_;               // [word]
  std::vector<uint32_t> stamp_;              // [word] last step that merged it
  PairIndex index_;
  std::vector<int64_t> pcount_;              // [pair]
  std::vector<uint32_t> pa_, pb_, touched_;  // [pair]
  std::vector<std::vector<uint32_t>> where_; // [pair] words holding it (maybe stale, maybe repeated)
  std::vector<uint32_t> touched_list_;
  uint32_t cur_step_ = ~0u;
  std::priority_queue<HeapEntry, std::vector<HeapEntry>, HeapLess> heap_;
};

}  // namespace

void bpe_merge(const PretokenTable& words, const BpeMergeOptions& opt, BpeModel& model) {
  VocabBuilder vb(model, opt.special_tokens);
  MergeLoop loop(words, vb);
  loop.run(opt.vocab_size, opt.min_frequency);
}

void bpe_merge_ref(const PretokenTable& table, const BpeMergeOptions& opt, BpeModel& model) {
  VocabBuilder vb(model, opt.special_tokens);
  std::vector<std::pair<std::vector<uint32_t>, int64_t>> words;
  table.for_each([&](std::string_view w, int64_t c) {
    std::vector<uint32_t> s;
    for (unsigned char ch : w) s.push_back(vb.byte_id(ch));
    words.emplace_back(std::move(s), c);
  });
  while (model.vocab.size() < opt.vocab_size) {
    std::map<std::pair<uint32_t, uint32_t>, int64_t> counts;
    for (const auto& [s, c] : words)
      for (size_t i = 0; i + 1 < s.size(); ++i) counts[{s[i], s[i + 1]}] += c;
    std::pair<uint32_t, uint32_t> best{};
    int64_t best_count = 0;
    for (const auto& [pr, c] : counts)  // ascending pairs: the first maximum is the smallest pair
      if (c > best_count) best = pr, best_count = c;
    if (best_count < 1 || best_count < opt.min_frequency) break;
    uint32_t id = vb.merge(best.first, best.second);
    for (auto& [s, c] : words) {
      std::vector<uint32_t> out;
      for (size_t i = 0; i < s.size();) {
        if (i + 1 < s.size() && s[i] == best.first && s[i + 1] == best.second) out.push_back(id), i += 2;
        else out.push_back(s[i++]);
      }
      s = std::move(out);
    }
  }
}

nlohmann::json bpe_train_info(const BpeTrainConfig& cfg, const BpeTrainStats& st) {
  nlohmann::json j;
  j["trainer"] = "smelt tokenizer train (byte-level BPE)";
  j["corpus"] = {{"hash", st.corpus_hash}, {"hash_rule", "XXH3-64 of every document's bytes, each followed by 0xFF, in input order"},
                 {"inputs", cfg.inputs}, {"files", st.files}, {"documents", st.documents}, {"bytes", st.bytes},
                 {"read_issues", st.read_issues}};
  j["settings"] = {{"vocab_size", cfg.vocab_size}, {"special_tokens", cfg.special_tokens},
                   {"pretokenizer", cfg.pretokenizer}, {"min_frequency", cfg.min_frequency},
                   {"memory_bytes", cfg.memory_bytes}, {"text_field", cfg.text_field}};
  j["counts"] = {{"pretokens", st.pieces}, {"pretokens_too_long", st.pieces_too_long},
                 {"distinct_seen", st.distinct_seen}, {"distinct_kept", st.distinct_kept},
                 {"distinct_pruned", st.distinct_pruned}, {"pruned_occurrences", st.pruned_occurrences},
                 {"prunes", st.prunes}, {"prune_threshold", st.prune_threshold}, {"rounds", st.rounds},
                 {"merges", st.merges}};
  return j;
}

Status bpe_train(const BpeTrainConfig& cfg, const Pretokenizer& pretok, BpeModel& model, BpeTrainStats& stats,
                 const std::function<void(uint64_t, uint64_t)>& progress) {
  if (cfg.vocab_size < cfg.special_tokens.size() + 256)
    return Status::error("vocab size " + std::to_string(cfg.vocab_size) + " is below the " +
                         std::to_string(cfg.special_tokens.size() + 256) +
                         " ids that the special tokens and the 256 bytes take");
  auto t0 = std::chrono::steady_clock::now();
  PretokenTable table;
  BpeSplitFn split = [&](std::string_view t, std::vector<std::string_view>& out) { pretok.split(t, out); };
  if (Status s = bpe_count_inputs(cfg, split, table, stats, progress); !s) return s;
  auto t1 = std::chrono::steady_clock::now();
  {
    VocabBuilder vb(model, cfg.special_tokens);
    MergeLoop loop(table, vb);
    table.clear();  // the loop holds the words now
    loop.run(cfg.vocab_size, cfg.min_frequency);
  }
  auto t2 = std::chrono::steady_clock::now();
  stats.merges = model.merges.size();
  stats.count_seconds = std::chrono::duration<double>(t1 - t0).count();
  stats.merge_seconds = std::chrono::duration<double>(t2 - t1).count();
  model.pretokenizer = pretok.name() == "regex" ? pretok.pattern() : pretok.name();
  model.info = bpe_train_info(cfg, stats);
  return Status::ok();
}

}  // namespace smelt
