// Batch plans from cursors (packed and bucketed), and the copy that fills a Batch from a plan.
// Packed (Megatron GPTDataset style): a row reads T+1 consecutive tokens of one source's stream
// (documents in permuted order, EOD between them) and consumes T, so the last target of a row is the
// first input of the next row of that source. Bucketed: one document per row, truncated to the
// largest bucket, grouped by bucket; a bucket's batch is emitted when it holds
// max_tokens_per_batch / bucket rows. Not here: threads (loader.cpp).
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "smelt/dataset/blend.hpp"
#include "smelt/dataset/chat_shard.hpp"

namespace smelt {

uint64_t indexed_doc_tokens(const IndexedDataset& ds, uint64_t d) {
  if (ds.documents() == ds.sequences()) return static_cast<uint64_t>(ds.length(d));
  uint64_t b, e, n = 0;
  ds.document_sequences(d, b, e);
  for (uint64_t i = b; i < e; ++i) n += static_cast<uint64_t>(ds.length(i));
  return n;
}

Status Planner::init(const LoaderConfig& o, const std::vector<DataSource>& sources,
                     std::vector<const IndexedDataset*> data, const LoaderPosition* resume) {
  o_ = o;
  sources_ = sources;
  data_ = std::move(data);
  if (sources_.empty() || sources_.size() != data_.size()) return Status::error("loader: no data sources");
  if (sources_.size() > 65535) return Status::error("loader: more than 65535 sources");
  if (o_.append_eod && o_.eod_id < 0)
    return Status::error("loader: append_eod needs an EOD id (set data.eod_id or give a tokenizer)");
  if (o_.ranks < 1 || o_.rank < 0 || o_.rank >= o_.ranks)
    return Status::error(fmt::format("loader: rank {} of {} is out of range", o_.rank, o_.ranks));
  if (o_.span_tokens > 0 && o_.mode == BatchMode::kBucketed)
    return Status::error("loader: span_tokens is for packed rows (bucketed rows hold whole documents)");
  samplers_.clear();
  first_span_.assign(sources_.size(), {});
  weights_.clear();
  for (size_t i = 0; i < sources_.size(); ++i) {
    const IndexedDataset& ds = *data_[i];
    if (ds.documents() == 0 || ds.tokens() == 0)
      return Status::error(fmt::format("loader: source \"{}\" ({}) holds no tokens", sources_[i].name, sources_[i].prefix));
    if (ds.documents() >= (1ull << 32))
      return Status::error(fmt::format("loader: source \"{}\" has {} documents; at most 2^32-1 are supported",
                                       sources_[i].name, ds.documents()));
    if (o_.mode == BatchMode::kBucketed) {  // some document must give a row (L >= 2), or next() never ends
      bool any = false;
      for (uint64_t d = 0; d < ds.documents() && !any; ++d) any = indexed_doc_tokens(ds, d) + (o_.append_eod ? 1 : 0) >= 2;
      if (!any)
        return Status::error(fmt::format("loader: source \"{}\" ({}) has no document of 2 or more tokens (with EOD); "
                                         "bucketed rows need at least one prediction", sources_[i].name, sources_[i].prefix));
    }
    uint64_t units = ds.documents();
    if (o_.span_tokens > 0) {  // a document of L tokens is max(1, ceil(L / S)) spans
      std::vector<uint64_t>& f = first_span_[i];
      f.resize(ds.documents() + 1);
      uint64_t n = 0;
      for (uint64_t d = 0; d < ds.documents(); ++d) {
        f[d] = n;
        n += std::max<uint64_t>(1, (indexed_doc_tokens(ds, d) + o_.span_tokens - 1) / o_.span_tokens);
      }
      f[ds.documents()] = units = n;
      if (units >= (1ull << 32))
        return Status::error(fmt::format("loader: source \"{}\" has {} spans of {} tokens; at most 2^32-1 are supported",
                                         sources_[i].name, units, o_.span_tokens));
    }
    samplers_.push_back(std::make_unique<DocSampler>(o_.seed, sources_[i].name, units, o_.shuffle));
    weights_.push_back(sources_[i].weight);
  }
  excluded_.assign(sources_.size(), {});
  for (const auto& [name, doc] : o_.exclude)
    for (size_t i = 0; i < sources_.size(); ++i)
      if (sources_[i].name == name && doc < data_[i]->documents()) excluded_[i].push_back(doc);
  for (size_t i = 0; i < sources_.size(); ++i) {
    auto& e = excluded_[i];
    std::sort(e.begin(), e.end());
    e.erase(std::unique(e.begin(), e.end()), e.end());
    if (!e.empty() && e.size() >= data_[i]->documents())
      return Status::error(fmt::format("loader: every document of source \"{}\" is quarantined", sources_[i].name));
  }
  rows_per_bucket_.clear();
  if (o_.mode == BatchMode::kBucketed) {
    if (o_.buckets.empty()) return Status::error("loader: bucketed mode needs buckets");
    for (int b : o_.buckets) {
      int rows = static_cast<int>(o_.max_tokens_per_batch / static_cast<uint64_t>(b));
      if (rows < o_.ranks)
        return Status::error(fmt::format("loader: bucket {} gets {} rows from max_tokens_per_batch {}, fewer than "
                                         "the {} ranks", b, rows, o_.max_tokens_per_batch, o_.ranks));
      rows_per_bucket_.push_back(rows);
    }
  } else if (o_.batch_size < o_.ranks) {
    return Status::error(fmt::format("loader: batch_size {} (global rows) is smaller than the {} ranks",
                                     o_.batch_size, o_.ranks));
  }

  st_ = State{};
  st_.cursors.assign(sources_.size(), SourceCursor{});
  st_.pending.assign(o_.mode == BatchMode::kBucketed ? o_.buckets.size() : 0, {});
  for (size_t b = 0; b < st_.pending.size(); ++b) st_.pending[b].reserve(rows_per_bucket_[b]);
  carried_ = LoaderPosition{};
  if (resume) {
    if (resume->span_tokens != o_.span_tokens)
      return Status::error(fmt::format("loader: the position to resume counts {} but [data] span_tokens = {}; resume "
                                       "with the span_tokens the run started with",
                                       resume->span_tokens ? fmt::format("spans of {} tokens", resume->span_tokens)
                                                           : std::string("whole documents"),
                                       o_.span_tokens));
    st_.step = resume->step;
    bool same_blend = resume->blend == blend_key(sources_);
    for (const auto& [name, c] : resume->sources) {
      bool found = false;
      for (size_t i = 0; i < sources_.size(); ++i)
        if (sources_[i].name == name) {
          st_.cursors[i] = c;
          if (!same_blend) st_.cursors[i].units = 0;
          found = true;
        }
      if (!found) carried_.sources[name] = c;
    }
    for (const auto& p : resume->pending) {
      auto bi = std::find(o_.buckets.begin(), o_.buckets.end(), p.bucket);
      size_t src = sources_.size();
      for (size_t i = 0; i < sources_.size(); ++i)
        if (sources_[i].name == p.source) src = i;
      // A pending document of a removed source stays in the position with its source's cursor (it
      // comes back when the source does); one whose bucket no longer exists goes to the smallest
      // bucket that holds it.
      if (src == sources_.size() || o_.mode != BatchMode::kBucketed) {
        carried_.pending.push_back(p);
        continue;
      }
      if (bi == o_.buckets.end()) {
        int need = static_cast<int>(p.tokens + (p.eod ? 1 : 0)) - 1;
        bi = std::lower_bound(o_.buckets.begin(), o_.buckets.end(), need);
        if (bi == o_.buckets.end()) --bi;
      }
      size_t b = static_cast<size_t>(bi - o_.buckets.begin());
      st_.pending[b].push_back(PendingDoc{static_cast<uint32_t>(src), p.doc, p.tokens, p.eod});
    }
  }
  return Status::ok();
}

int Planner::max_rows() const {
  int g = o_.batch_size;
  if (o_.mode == BatchMode::kBucketed) g = *std::max_element(rows_per_bucket_.begin(), rows_per_bucket_.end());
  return (g + o_.ranks - 1) / o_.ranks + 1;
}
int Planner::max_cols() const {
  return o_.mode == BatchMode::kBucketed ? o_.buckets.back() : o_.seq_len;
}

void Planner::rank_rows(int global_B, int& r0, int& r1) const {
  r0 = static_cast<int>(static_cast<int64_t>(o_.rank) * global_B / o_.ranks);
  r1 = static_cast<int>(static_cast<int64_t>(o_.rank + 1) * global_B / o_.ranks);
}

bool Planner::excluded(size_t src, uint64_t doc) const {
  const auto& e = excluded_[src];
  return !e.empty() && std::binary_search(e.begin(), e.end(), doc);
}

Planner::Unit Planner::unit_at(size_t src, uint64_t epoch, uint64_t i) {
  const uint64_t u = samplers_[src]->doc_at(epoch, i);
  if (o_.span_tokens == 0) return Unit{u, 0, indexed_doc_tokens(*data_[src], u), true};
  const std::vector<uint64_t>& f = first_span_[src];
  const uint64_t doc = static_cast<uint64_t>(std::upper_bound(f.begin(), f.end() - 1, u) - f.begin()) - 1;
  const uint64_t len = indexed_doc_tokens(*data_[src], doc);
  const uint64_t begin = (u - f[doc]) * o_.span_tokens;
  return Unit{doc, begin, std::min(len - std::min(len, begin), o_.span_tokens), u + 1 == f[doc + 1]};
}

// Reads n tokens of source src's stream from cursor c (advancing it), emitting pieces into row.
// The stream is the units (documents, or spans of them) in the epoch's order, an EOD after each
// document's last unit.
bool Planner::walk(size_t src, SourceCursor& c, uint64_t n, uint32_t row, bool emit, bool& first, BatchPlan& plan) {
  DocSampler& s = *samplers_[src];
  const bool whole = o_.format == DataFormat::kChat;  // a conversation is never split over rows
  while (n > 0) {
    const Unit u = unit_at(src, c.epoch, c.docs);
    if (excluded(src, u.doc)) {  // quarantined: skipped whole, wherever the cursor stood in it
      c.offset = 0;
      if (++c.docs == s.docs()) c.docs = 0, ++c.epoch;
      continue;
    }
    const uint64_t total = u.len + (o_.append_eod && u.last ? 1 : 0);
    if (whole && c.offset == 0 && !first && total > n) return false;  // the rest of the row is padding
    if (c.offset < u.len) {
      uint64_t take = std::min(u.len - c.offset, n);
      if (emit) {
        Piece p;
        p.row = row, p.source = static_cast<uint16_t>(src), p.doc = u.doc, p.begin = u.begin + c.offset;
        p.count = static_cast<uint32_t>(take);
        p.doc_start = c.offset == 0 || first;  // (a span begins a segment: what came before it is another text)
        plan.pieces.push_back(p);
      }
      first = false;
      c.offset += take;
      n -= take;
    } else if (c.offset < total) {  // the EOD after the document
      if (emit) {
        Piece p;
        p.row = row, p.source = static_cast<uint16_t>(src), p.eod = true, p.doc = u.doc, p.count = 1;
        p.doc_start = first;
        plan.pieces.push_back(p);
      }
      first = false;
      c.offset += 1;
      n -= 1;
    }
    if (c.offset >= total) {
      c.offset = 0;
      if (++c.docs == s.docs()) c.docs = 0, ++c.epoch;
    }
  }
  return true;
}

void Planner::next(BatchPlan& plan) {
  plan.pieces.clear();
  plan.step = st_.step;
  if (o_.mode == BatchMode::kPacked) {
    const int T = o_.seq_len;
    int r0, r1;
    rank_rows(o_.batch_size, r0, r1);
    plan.packed = true, plan.T = T, plan.global_B = o_.batch_size, plan.B = r1 - r0;
    for (int r = 0; r < o_.batch_size; ++r) {
      size_t src = blend_pick(weights_, st_.cursors);
      SourceCursor& c = st_.cursors[src];
      c.units += 1;
      bool emit = r >= r0 && r < r1;
      uint32_t row = static_cast<uint32_t>(r - r0);
      bool first = true;
      const bool full = walk(src, c, static_cast<uint64_t>(T), row, emit, first, plan);
      if (emit && full) {  // the (T+1)-th token: read, not consumed
        SourceCursor peek = c;
        peek.units = 0;
        walk(src, peek, 1, row, true, first, plan);
      }
    }
  } else {
    const int maxb = o_.buckets.back();
    size_t full = 0;
    for (;;) {
      size_t src = blend_pick(weights_, st_.cursors);
      SourceCursor& c = st_.cursors[src];
      uint64_t doc = samplers_[src]->doc_at(c.epoch, c.docs);
      if (++c.docs == samplers_[src]->docs()) c.docs = 0, ++c.epoch;
      c.offset = 0;
      if (excluded(src, doc)) continue;  // quarantined
      uint64_t len = indexed_doc_tokens(*data_[src], doc);
      // A row of L tokens trains L-1 predictions; truncate so that L-1 fits the largest bucket.
      uint64_t take = std::min<uint64_t>(len, static_cast<uint64_t>(maxb) + 1);
      bool eod = o_.append_eod && len + 1 <= static_cast<uint64_t>(maxb) + 1;
      uint64_t L = take + (eod ? 1 : 0);
      c.units += L > 0 ? L - 1 : 0;
      if (L < 2) continue;  // nothing to predict
      size_t b = static_cast<size_t>(std::lower_bound(o_.buckets.begin(), o_.buckets.end(), static_cast<int>(L - 1)) -
                                     o_.buckets.begin());
      st_.pending[b].push_back(PendingDoc{static_cast<uint32_t>(src), doc, static_cast<uint32_t>(take), eod});
      if (static_cast<int>(st_.pending[b].size()) == rows_per_bucket_[b]) {
        full = b;
        break;
      }
    }
    const int gB = rows_per_bucket_[full];
    int r0, r1;
    rank_rows(gB, r0, r1);
    plan.packed = false, plan.T = o_.buckets[full], plan.global_B = gB, plan.B = r1 - r0;
    for (int r = r0; r < r1; ++r) {
      const PendingDoc& d = st_.pending[full][static_cast<size_t>(r)];
      Piece p;
      p.row = static_cast<uint32_t>(r - r0), p.source = static_cast<uint16_t>(d.source), p.doc = d.doc;
      p.begin = 0, p.count = d.tokens, p.doc_start = true;
      plan.pieces.push_back(p);
      if (d.eod) {
        p.eod = true, p.count = 1, p.doc_start = false;
        plan.pieces.push_back(p);
      }
    }
    st_.pending[full].clear();
  }
  ++st_.step;
}

LoaderPosition Planner::position(const State& s) const {
  LoaderPosition p = carried_;
  p.step = s.step;
  p.span_tokens = o_.span_tokens;
  p.blend = blend_key(sources_);
  for (size_t i = 0; i < sources_.size(); ++i) p.sources[sources_[i].name] = s.cursors[i];
  for (size_t b = 0; b < s.pending.size(); ++b)
    for (const auto& d : s.pending[b]) p.pending.push_back({o_.buckets[b], sources_[d.source].name, d.doc, d.tokens, d.eod});
  return p;
}

void loader_batch_reserve(Batch& b, int rows, int cols) {
  size_t n = static_cast<size_t>(rows) * static_cast<size_t>(cols);
  b.inputs.reserve(n), b.targets.reserve(n), b.segments.reserve(n), b.positions.reserve(n), b.sources.reserve(n);
}

namespace {
// Copies count tokens of document doc from token offset begin.
void copy_doc(const IndexedDataset& ds, uint64_t doc, uint64_t begin, uint64_t count, int32_t* out) {
  uint64_t sb, se;
  if (ds.documents() == ds.sequences()) sb = doc, se = doc + 1;
  else ds.document_sequences(doc, sb, se);
  for (uint64_t i = sb; i < se && count > 0; ++i) {
    TokenView v = ds.sequence(i);
    uint64_t len = v.size();
    if (begin >= len) {
      begin -= len;
      continue;
    }
    uint64_t take = std::min(len - begin, count);
    if (v.dtype == IndexedDType::kUInt16) {
      const uint16_t* p = v.u16.data() + begin;
      for (uint64_t k = 0; k < take; ++k) out[k] = p[k];
    } else {
      std::memcpy(out, v.i32.data() + begin, take * sizeof(int32_t));
    }
    out += take, count -= take, begin = 0;
  }
}
}  // namespace

void packing_fill(const BatchPlan& plan, const std::vector<const IndexedDataset*>& data, int64_t eod_id,
                  bool doc_mask, Batch& out, bool chat) {
  packing_fill(plan, [&data](uint16_t source, uint64_t doc, uint64_t begin, uint64_t count, int32_t* o) {
    copy_doc(*data[source], doc, begin, count, o);
  }, eod_id, doc_mask, out, chat);
}

namespace {
// Chat rows: the flag leaves the inputs; a target counts only where its token carries it.
void chat_targets(int32_t* in, int32_t* tg, int T) {
  constexpr int32_t bit = static_cast<int32_t>(kChatTrainedBit);
  for (int t = 0; t < T; ++t) {
    in[t] &= ~bit;
    if (tg[t] != -1) tg[t] = (tg[t] & bit) ? (tg[t] & ~bit) : -1;
  }
}
}  // namespace

void packing_fill(const BatchPlan& plan, const TokenFetch& fetch, int64_t eod_id, bool doc_mask, Batch& out,
                  bool chat) {
  const int B = plan.B, T = plan.T;
  const size_t n = static_cast<size_t>(B) * static_cast<size_t>(T);
  out.B = B, out.T = T, out.step = plan.step;
  out.mask_segments = doc_mask;  // without doc masking, attention spans the row's documents
  out.inputs.resize(n), out.targets.resize(n), out.segments.resize(n), out.positions.resize(n), out.sources.resize(n);
  std::fill(out.inputs.begin(), out.inputs.end(), 0);
  std::fill(out.targets.begin(), out.targets.end(), -1);
  std::fill(out.segments.begin(), out.segments.end(), -1);
  std::fill(out.positions.begin(), out.positions.end(), 0);
  std::fill(out.sources.begin(), out.sources.end(), 0);
  // Each row's stream of tokens is written to inputs (up to T) then shifted into targets; the
  // (T+1)-th token of a packed row goes straight to the last target.
  size_t pi = 0;
  uint64_t target_tokens = 0;
  const int32_t eod = static_cast<int32_t>(eod_id);
  for (int r = 0; r < B; ++r) {
    int32_t* in = out.inputs.data() + static_cast<size_t>(r) * T;
    int32_t* tg = out.targets.data() + static_cast<size_t>(r) * T;
    int32_t* sg = out.segments.data() + static_cast<size_t>(r) * T;
    int32_t* ps = out.positions.data() + static_cast<size_t>(r) * T;
    uint16_t* sr = out.sources.data() + static_cast<size_t>(r) * T;
    int col = 0, seg = -1, pos = 0;
    bool over = false;                    // the row's stream has a token past column T-1
    int32_t last_tok = 0, last_seg = -1;  // that token (the last target of a packed row)
    for (; pi < plan.pieces.size() && plan.pieces[pi].row == static_cast<uint32_t>(r); ++pi) {
      const Piece& p = plan.pieces[pi];
      if (p.doc_start) ++seg, pos = 0;
      uint64_t cnt = p.count;
      if (col + static_cast<int64_t>(cnt) > T) {  // only the final token of a row overflows
        cnt = static_cast<uint64_t>(T - col);
        if (p.eod) last_tok = eod;
        else fetch(p.source, p.doc, p.begin + cnt, 1, &last_tok);
        last_seg = seg, over = true;
      }
      if (cnt > 0) {
        if (p.eod) in[col] = eod;
        else fetch(p.source, p.doc, p.begin, cnt, in + col);
        for (uint64_t k = 0; k < cnt; ++k) {
          sg[col + k] = seg;
          ps[col + k] = doc_mask ? pos++ : col + static_cast<int>(k);
          sr[col + k] = p.source;
        }
        col += static_cast<int>(cnt);
      }
    }
    // A stream of S tokens gives S-1 (input, next token) pairs.
    int pairs = over ? T : col - 1;
    for (int t = 0; t < pairs; ++t) {
      int32_t nt = t + 1 < col ? in[t + 1] : last_tok;
      int32_t ns = t + 1 < col ? sg[t + 1] : last_seg;
      tg[t] = doc_mask && ns != sg[t] ? -1 : nt;
    }
    if (!over && col > 0) {  // the stream's last token is nobody's input: padding
      in[col - 1] = 0, sg[col - 1] = -1, ps[col - 1] = 0, sr[col - 1] = 0;
    }
    if (chat) chat_targets(in, tg, T);
    for (int t = 0; t < T; ++t) target_tokens += tg[t] != -1;
  }
  out.target_tokens = target_tokens;
}

}  // namespace smelt
