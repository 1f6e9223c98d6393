// The loader's deterministic core: data sources and their weights, the resumable position (per-source
// cursors, serialised to JSON), the weighted blend schedule, per-source document permutations, and
// the planner that turns cursors into batch plans (packed or bucketed) plus the copy that fills a
// Batch from a plan. Everything here is single-threaded and allocation-free once warm.
// Not here: threads, prefetching, config files (loader.hpp), reading text (stream_source.cpp).
//
// Determinism contract (docs/loader.md):
//  * source s's document order in epoch e is a permutation seeded by (seed, s.name, e) — not by s's
//    index in the blend, so adding or removing another source leaves it unchanged;
//  * the position is {step, per source name: (epoch, documents consumed, token offset in the current
//    document, scheduling units)}; it survives blend and rank-count changes;
//  * the GLOBAL batch is a function of the position alone; rank r of R takes rows [r*B/R, (r+1)*B/R).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "smelt/common/batch.hpp"
#include "smelt/common/enum_names.hpp"
#include "smelt/common/status.hpp"
#include "smelt/dataset/indexed.hpp"
#include "smelt/dataset/loader_config.hpp"

namespace smelt {

// One blended input: a token shard prefix (PREFIX.bin/.idx) with a relative weight. `name` keys the
// source in positions; it defaults to the prefix as written.
struct DataSource {
  std::string name;
  std::string prefix;
  double weight = 1.0;
};

// Parses "[NAME=]PREFIX[:WEIGHT],..." (the trainer's --data flag). Weights default to 1 and must be
// > 0; names must be unique. Errors name the entry and what is allowed.
Status blend_parse_sources(std::string_view spec, std::vector<DataSource>& out);

// Where one source's reading stands.
struct SourceCursor {
  uint64_t epoch = 0;   // reshuffle counter: the permutation is seeded by (seed, name, epoch)
  uint64_t docs = 0;    // documents (spans, with span_tokens) of this epoch's order fully consumed
  uint64_t offset = 0;  // tokens of the current document (span) consumed (packed; EOD counts as one)
  uint64_t units = 0;   // scheduling units (rows or tokens) consumed since the blend last changed
  bool operator==(const SourceCursor&) const = default;
};

// A document taken from a source in bucketed mode but not yet emitted in a batch.
struct PendingDoc {
  uint32_t source = 0;  // blend index (in LoaderPosition: resolved through the name)
  uint64_t doc = 0;     // physical document index in the shard
  uint32_t tokens = 0;  // tokens to read (after truncation), EOD not included
  bool eod = false;     // an EOD follows
  bool operator==(const PendingDoc&) const = default;
};

// What a checkpoint stores. JSON:
//  {"version":1, "step":N, "blend":"name=w;...", "sources":{NAME:{"epoch","docs","offset","units"}},
//   "pending":[{"bucket":T,"source":NAME,"doc":D,"tokens":L,"eod":bool}, ...]}
// plus "span_tokens":S when the cursors count spans of S tokens (absent: whole documents).
struct LoaderPosition {
  uint64_t step = 0;
  uint64_t span_tokens = 0;                           // what the cursors' "docs" count (0: documents)
  std::string blend;                                  // the blend the units were counted under
  std::map<std::string, SourceCursor> sources;        // by source name; sources no longer blended stay
  struct Pending { int bucket = 0; std::string source; uint64_t doc = 0; uint32_t tokens = 0; bool eod = false; };
  std::vector<Pending> pending;                       // bucketed mode only
  nlohmann::json to_json() const;
  static Status from_json(const nlohmann::json& j, LoaderPosition& out);
  bool operator==(const LoaderPosition& o) const;
};

// "name=weight;..." in blend order: when it changes, the schedule's units restart from zero.
std::string blend_key(const std::vector<DataSource>& sources);

// Error-feedback weighted schedule (as Megatron's blended dataset builds its index): the next unit
// goes to the source whose consumed share lags its weight the most, argmax(w_i * total - units_i);
// ties go to the lower blend index. Deterministic and self-correcting when weights change.
size_t blend_pick(const std::vector<double>& weights, const std::vector<SourceCursor>& cursors);

// A source's document order: a seeded Fisher-Yates permutation per epoch, cached (the current and
// the next epoch are kept, since a row may cross an epoch end).
class DocSampler {
 public:
  DocSampler(uint64_t seed, std::string name, uint64_t docs, bool shuffle = true);
  uint64_t doc_at(uint64_t epoch, uint64_t i);  // physical document of the i-th in that epoch's order
  uint64_t docs() const { return docs_; }

 private:
  const std::vector<uint32_t>& perm(uint64_t epoch);
  uint64_t seed_;
  std::string name_;
  uint64_t docs_;
  bool shuffle_;
  struct Cached { uint64_t epoch = UINT64_MAX; std::vector<uint32_t> order; };
  Cached cache_[2];
};
// The permutation itself (exposed for tests): order of n documents for (seed, name, epoch).
void sampler_permutation(uint64_t seed, std::string_view name, uint64_t epoch, uint64_t n,
                         std::vector<uint32_t>& out);

// Tokens of document d (sum of its sequences).
uint64_t indexed_doc_tokens(const IndexedDataset& ds, uint64_t d);

// One contiguous run of tokens of a plan: a document slice or a single EOD token.
struct Piece {
  uint32_t row = 0;       // row within this rank's slice
  uint16_t source = 0;    // blend index
  bool eod = false;       // one EOD token (doc/begin/count unused)
  bool doc_start = false; // a new document begins here (a new segment)
  uint64_t doc = 0;       // physical document
  uint64_t begin = 0;     // token offset inside the document
  uint32_t count = 0;
};

// Everything the copy needs to fill a Batch: no file access happened yet.
struct BatchPlan {
  uint64_t step = 0;
  int B = 0;               // rows of this rank
  int T = 0;               // columns
  int global_B = 0;
  bool packed = true;      // packed rows read T+1 tokens; bucketed rows hold one document, padded
  std::vector<Piece> pieces;
};

// Walks the cursors and emits plans. Sources are opened shards (owned by the caller), in blend order.
class Planner {
 public:
  Status init(const LoaderConfig& o, const std::vector<DataSource>& sources,
              std::vector<const IndexedDataset*> data, const LoaderPosition* resume);
  // The plan of the next global batch (this rank's rows); advances the state.
  void next(BatchPlan& plan);

  // Fixed-size state (copying into a warm instance does not allocate).
  struct State {
    uint64_t step = 0;
    std::vector<SourceCursor> cursors;             // [blend index]
    std::vector<std::vector<PendingDoc>> pending;  // [bucket]
  };
  const State& state() const { return st_; }
  // The resumable position for a state (sources outside the blend are carried over from the resume).
  LoaderPosition position(const State& s) const;
  const LoaderConfig& options() const { return o_; }
  int max_rows() const;  // this rank's largest B
  int max_cols() const;  // largest T

 private:
  // Returns false when it stopped early: whole documents only (chat) and the next one does not fit.
  bool walk(size_t src, SourceCursor& c, uint64_t n, uint32_t row, bool emit, bool& first, BatchPlan& plan);
  // The i-th unit of an epoch's order: its document, first token and tokens (a span, or the whole
  // document), and whether the document ends with it.
  struct Unit { uint64_t doc = 0, begin = 0, len = 0; bool last = true; };
  Unit unit_at(size_t src, uint64_t epoch, uint64_t i);
  void rank_rows(int global_B, int& r0, int& r1) const;
  LoaderConfig o_;
  std::vector<DataSource> sources_;
  std::vector<const IndexedDataset*> data_;
  std::vector<std::unique_ptr<DocSampler>> samplers_;
  std::vector<std::vector<uint64_t>> first_span_;  // [source][doc]: its first span's index, then the total (spans only)
  std::vector<std::vector<uint64_t>> excluded_;  // [source] sorted quarantined documents
  bool excluded(size_t src, uint64_t doc) const;
  std::vector<double> weights_;
  std::vector<int> rows_per_bucket_;
  State st_;
  LoaderPosition carried_;  // cursors of sources outside the blend, kept for a later resume
};

// Fills out from plan, reading tokens from data[source] (zero-copy views). out's buffers must be
// sized for the largest plan (loader_batch_reserve); no allocation happens here. chat: tokens carry
// kChatTrainedBit (dataset/chat_shard.hpp), which is stripped; only flagged tokens are targets.
void packing_fill(const BatchPlan& plan, const std::vector<const IndexedDataset*>& data, int64_t eod_id,
                  bool doc_mask, Batch& out, bool chat = false);
// The same with any token store (the streaming source keeps its documents in memory): fetch writes
// `count` tokens of (source, doc) from token offset `begin` to out.
using TokenFetch = std::function<void(uint16_t source, uint64_t doc, uint64_t begin, uint64_t count, int32_t* out)>;
void packing_fill(const BatchPlan& plan, const TokenFetch& fetch, int64_t eod_id, bool doc_mask, Batch& out,
                  bool chat = false);
void loader_batch_reserve(Batch& b, int rows, int cols);

}  // namespace smelt
