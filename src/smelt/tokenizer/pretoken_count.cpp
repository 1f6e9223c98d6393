// Pre-token counting for the BPE trainer: the PretokenTable, and parallel counting of documents in
// rounds under a memory budget. Not the merge loop (bpe_train.cpp).
//
// Determinism: documents are read in input order and grouped into rounds of a fixed number of text
// bytes (a function of the budget only). Within a round, threads count chunks into their own
// tables; at the end of the round those are added into the global table, then the budget is
// checked. Sums commute, so the global table after each round, every pruning decision and the
// final counts depend on the data and the budget alone, not on the thread count or timing.
//
// Pruning rule (lossy counting): when the global table's bytes (slots + word bytes) exceed the
// budget after a round, every entry with count < t is dropped, t starting at max(2, last t) and
// doubling until the table is at most half the budget. Dropped words seen again later start from
// zero. The number of entries and occurrences dropped is reported.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include <spdlog/spdlog.h>
#include <xxhash.h>

#include "smelt/common/hash.hpp"
#include "smelt/text/doc_reader.hpp"
#include "smelt/text/html_extract.hpp"
#include "smelt/tokenizer/bpe_train.hpp"

namespace smelt {

// ---- PretokenTable ----

bool PretokenTable::add(std::string_view word, int64_t count) {
  return add_hashed(hash64(word), word, count);
}

bool PretokenTable::add_hashed(uint64_t hash, std::string_view word, int64_t count) {
  if (word.size() > kMaxWordBytes || count <= 0) return false;
  if ((size_ + 1) * 2 > slots_.size()) grow();
  size_t mask = slots_.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    Slot& s = slots_[i];
    if (s.count == 0) {
      s.hash = hash;
      s.offlen = (static_cast<uint64_t>(arena_.size()) << 24) | word.size();
      s.count = count;
      arena_.append(word);
      ++size_;
      return true;
    }
    if (s.hash == hash && (s.offlen & 0xFFFFFF) == word.size() &&
        std::memcmp(arena_.data() + (s.offlen >> 24), word.data(), word.size()) == 0) {
      s.count += count;
      return false;
    }
  }
}

void PretokenTable::grow() {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(std::max<size_t>(16, old.size() * 2), Slot{});
  size_t mask = slots_.size() - 1;
  for (const Slot& s : old) {
    if (s.count == 0) continue;
    size_t i = s.hash & mask;
    while (slots_[i].count != 0) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

uint64_t PretokenTable::merge_from(const PretokenTable& other) {
  uint64_t added = 0;
  other.for_each_hashed([&](uint64_t h, std::string_view w, int64_t c) { added += add_hashed(h, w, c); });
  return added;
}

uint64_t PretokenTable::prune_below(int64_t threshold, uint64_t* occurrences) {
  PretokenTable kept;
  uint64_t removed = 0;
  size_t keep_n = 0, keep_bytes = 0;
  for_each([&](std::string_view w, int64_t c) {
    if (c >= threshold) ++keep_n, keep_bytes += w.size();
  });
  size_t cap = 16;
  while (cap < keep_n * 2 + 2) cap *= 2;
  kept.slots_.assign(cap, Slot{});
  kept.arena_.reserve(keep_bytes);
  for_each_hashed([&](uint64_t h, std::string_view w, int64_t c) {
    if (c >= threshold) {
      kept.add_hashed(h, w, c);
    } else {
      ++removed;
      if (occurrences) *occurrences += static_cast<uint64_t>(c);
    }
  });
  *this = std::move(kept);
  return removed;
}

void PretokenTable::clear() {
  std::vector<Slot>().swap(slots_);
  std::string().swap(arena_);
  size_ = 0;
}

uint64_t PretokenTable::memory_bytes() const { return slots_.size() * sizeof(Slot) + arena_.size(); }

int64_t PretokenTable::count_of(std::string_view word) const {
  if (slots_.empty()) return 0;
  uint64_t h = hash64(word);
  size_t mask = slots_.size() - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.count == 0) return 0;
    if (s.hash == h && (s.offlen & 0xFFFFFF) == word.size() &&
        std::memcmp(arena_.data() + (s.offlen >> 24), word.data(), word.size()) == 0)
      return s.count;
  }
}

// ---- counting in rounds ----

namespace {

// Text of one round, cut into chunks of whole documents (or parts of long documents).
struct Chunk {
  std::string text;
  std::vector<uint32_t> ends;  // [doc part] end offset in text
};

// A long document is cut only after a '\n' that follows a visible ASCII character and precedes
// an ASCII letter or digit: every pre-tokenizer family (GPT-2, Llama-3, Qwen2) has piece
// boundaries on both sides of such a newline, and it is a piece of its own whether or not the
// text ends after it, so the pieces are the same as without the cut. (After a space it is not:
// `\s+(?!\S)` would take "  \n" whole at the end of a text.)
size_t safe_cut(std::string_view s, size_t from) {
  auto alnum = [](unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); };
  for (size_t i = std::max<size_t>(from, 1); i + 1 < s.size(); ++i) {
    if (s[i] == '\n') {
      unsigned char p = static_cast<unsigned char>(s[i - 1]);
      if (p >= 0x21 && p <= 0x7E && alnum(static_cast<unsigned char>(s[i + 1]))) return i + 1;
    }
  }
  return s.size();
}

class RoundCounter {
 public:
  RoundCounter(const BpeTrainConfig& cfg, const BpeSplitFn& split, PretokenTable& table, BpeTrainStats& stats)
      : cfg_(cfg), split_(split), table_(table), stats_(stats) {
    budget_ = std::max<uint64_t>(cfg.memory_bytes, 1);
    round_bytes_ = std::clamp<uint64_t>(budget_ / 16, 64 << 10, 64 << 20);
    chunk_bytes_ = std::clamp<uint64_t>(round_bytes_ / 16, 16 << 10, 1 << 20);
    threads_ = std::max(1, cfg.threads);
    hash_state_ = XXH3_createState();
    XXH3_64bits_reset(hash_state_);
  }

  void add_doc(std::string_view text) {
    static const char kSep = '\xFF';  // never in UTF-8: document boundaries are part of the hash
    XXH3_64bits_update(hash_state_, text.data(), text.size());
    XXH3_64bits_update(hash_state_, &kSep, 1);
    ++stats_.documents;
    stats_.bytes += text.size();
    size_t pos = 0;
    while (pos < text.size()) {
      size_t end = text.size();
      if (end - pos > chunk_bytes_) end = safe_cut(text, pos + chunk_bytes_);
      if (chunks_.empty() || chunks_.back().text.size() >= chunk_bytes_) chunks_.emplace_back();
      Chunk& c = chunks_.back();
      c.text.append(text.substr(pos, end - pos));
      c.ends.push_back(static_cast<uint32_t>(c.text.size()));
      round_fill_ += end - pos;
      pos = end;
      if (round_fill_ >= round_bytes_) flush();  // also inside a long document: rounds stay bounded
    }
  }

  ~RoundCounter() { XXH3_freeState(hash_state_); }
  RoundCounter(const RoundCounter&) = delete;
  RoundCounter& operator=(const RoundCounter&) = delete;

  void finish() {
    flush();
    stats_.distinct_kept = table_.size();
    char hex[32];
    std::snprintf(hex, sizeof hex, "xxh3:%016llx", static_cast<unsigned long long>(XXH3_64bits_digest(hash_state_)));
    stats_.corpus_hash = hex;
  }

 private:
  void count_chunks(PretokenTable& local, std::atomic<size_t>& next, uint64_t& pieces, uint64_t& too_long) {
    std::vector<std::string_view> parts;
    for (size_t k; (k = next.fetch_add(1)) < chunks_.size();) {
      const Chunk& c = chunks_[k];
      size_t start = 0;
      for (uint32_t end : c.ends) {
        parts.clear();
        split_(std::string_view(c.text).substr(start, end - start), parts);
        for (std::string_view p : parts) {
          if (p.size() > PretokenTable::kMaxWordBytes) { ++too_long; continue; }
          local.add(p, 1);
        }
        pieces += parts.size();
        start = end;
      }
    }
  }

  void flush() {
    if (chunks_.empty()) return;
    size_t nt = std::min<size_t>(threads_, chunks_.size());
    std::vector<PretokenTable> locals(nt);
    std::vector<uint64_t> pieces(nt, 0), too_long(nt, 0);
    std::atomic<size_t> next{0};
    std::vector<std::thread> pool;
    for (size_t t = 1; t < nt; ++t)
      pool.emplace_back([&, t] { count_chunks(locals[t], next, pieces[t], too_long[t]); });
    count_chunks(locals[0], next, pieces[0], too_long[0]);
    for (auto& th : pool) th.join();
    chunks_.clear();
    round_fill_ = 0;
    ++stats_.rounds;
    for (size_t t = 0; t < nt; ++t) {
      stats_.distinct_seen += table_.merge_from(locals[t]);
      locals[t].clear();
      stats_.pieces += pieces[t] - too_long[t];
      stats_.pieces_too_long += too_long[t];
    }
    stats_.peak_table_bytes = std::max(stats_.peak_table_bytes, table_.memory_bytes());
    if (table_.memory_bytes() > budget_) prune();
  }

  void prune() {
    int64_t t = std::max<int64_t>(2, stats_.prune_threshold);
    uint64_t before = table_.size(), removed = 0, occ = 0;
    for (;;) {
      removed += table_.prune_below(t, &occ);
      if (table_.memory_bytes() <= budget_ / 2 || table_.size() == 0) break;
      t *= 2;
    }
    ++stats_.prunes;
    stats_.prune_threshold = t;
    stats_.distinct_pruned += removed;
    stats_.pruned_occurrences += occ;
    spdlog::info("pre-token table over the {:.2f} MB budget after {} documents: pruned {} of {} distinct pre-tokens "
                 "(count < {}, {} occurrences); {} kept, {:.2f} MB",
                 budget_ / 1048576.0, stats_.documents, removed, before, t, occ, table_.size(),
                 table_.memory_bytes() / 1048576.0);
  }

  const BpeTrainConfig& cfg_;
  const BpeSplitFn& split_;
  PretokenTable& table_;
  BpeTrainStats& stats_;
  uint64_t budget_, round_bytes_, chunk_bytes_;
  size_t threads_;
  std::vector<Chunk> chunks_;
  uint64_t round_fill_ = 0;
  XXH3_state_t* hash_state_;
};

}  // namespace

void bpe_count_docs(const std::vector<std::string>& docs, const BpeTrainConfig& cfg, const BpeSplitFn& split,
                    PretokenTable& table, BpeTrainStats& stats) {
  RoundCounter rc(cfg, split, table, stats);
  for (const auto& d : docs) rc.add_doc(d);
  rc.finish();
}

Status bpe_count_inputs(const BpeTrainConfig& cfg, const BpeSplitFn& split, PretokenTable& table,
                        BpeTrainStats& stats, const std::function<void(uint64_t, uint64_t)>& progress) {
  RoundCounter rc(cfg, split, table, stats);
  ReaderOptions ro;
  ro.text_field = cfg.text_field;
  // A plain text file is one document, read whole: allow large ones (a bigger file is skipped and
  // reported; give such corpora as JSONL or split them).
  ro.max_record_bytes = 1ull << 30;
  uint64_t done_bytes = 0;
  RawDoc doc;
  HtmlExtractResult html;
  for (const std::string& path : cfg.inputs) {
    Status err;
    auto reader = doc_reader_open(path, ro, err);
    if (!reader) return Status::error(err.message());
    uint64_t shown = 0;
    reader->on_issue = [&](const ReadIssue& is) {
      if (shown++ < 5)
        spdlog::warn("{}{}: {}", is.file, is.line ? fmt::format(" line {}", is.line) : fmt::format(" @{}", is.offset),
                     is.message);
    };
    ++stats.files;
    while (reader->next(doc)) {
      if (doc.is_html) {
        html_extract(doc.text, HtmlExtractOptions{}, html);
        rc.add_doc(html.text);
      } else {
        rc.add_doc(doc.text);
      }
      if (progress && (stats.documents & 255) == 0) progress(stats.documents, done_bytes + reader->bytes_read());
    }
    done_bytes += reader->bytes_read();
    for (const auto& [reason, n] : reader->issue_counts()) stats.read_issues += n;
    if (progress) progress(stats.documents, done_bytes);
  }
  rc.finish();
  return Status::ok();
}

}  // namespace smelt
