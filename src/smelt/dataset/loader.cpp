// The prefetching loader: one planner (under the lock, cheap: it walks lengths), N fill threads
// (copy tokens from the mapped shards into preallocated Batch buffers), an ordered ring of slots.
// Also the [data] config and the latency window. Not here: the batch rules (packing.cpp).
#include "smelt/dataset/loader.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include <fmt/format.h>

#include "smelt/common/config_schema.hpp"

namespace smelt {

// ---- config ----

namespace {

// sources: a string "A:0.7,B:0.3" or an array of such strings (joined with commas).
std::string read_sources(const toml::node* n, LoaderConfig& c) {
  const char* expected = "a string \"PREFIX[:WEIGHT],...\" or an array of them";
  if (!n) return "";
  if (auto str = n->value<std::string>()) return c.sources = *str, "";
  const toml::array* a = n->as_array();
  if (!a) return expected;
  std::string joined;
  for (const auto& x : *a) {
    auto v = x.value<std::string>();
    if (!v) return expected;
    joined += (joined.empty() ? "" : ",") + *v;
  }
  c.sources = joined;
  return "";
}

// buckets: an integer array, or "128,256" (what --set data.buckets=128,256 gives).
std::string read_buckets(const toml::node* n, LoaderConfig& c) {
  const char* expected = "an array of integers, e.g. [128, 256, 512, 1024, 2048]";
  if (!n) return "";
  std::vector<int> b;
  if (const toml::array* a = n->as_array()) {
    for (const auto& x : *a) {
      if (!x.is_integer()) return expected;
      b.push_back(static_cast<int>(*x.value<int64_t>()));
    }
  } else if (auto str = n->value<std::string>()) {
    for (size_t at = 0; at < str->size();) {
      size_t end = str->find(',', at);
      if (end == std::string::npos) end = str->size();
      try { b.push_back(std::stoi(str->substr(at, end - at))); } catch (...) { return expected; }
      at = end + 1;
    }
  } else {
    return expected;
  }
  c.buckets = std::move(b);
  return "";
}

const Schema<LoaderConfig>& loader_schema() {
  using L = LoaderConfig;
  static const Schema<LoaderConfig> s{
      "data",
      {field_custom<L>("sources", "\"[NAME=]PREFIX[:WEIGHT],...\" or an array of them", "string", read_sources,
                       [](const L& c, toml::table& t) { t.insert_or_assign("sources", c.sources); }),
       field("mode", &L::mode, "packed rows of seq_len, or bucketed rows of whole documents"),
       field("seq_len", &L::seq_len, "packed: T", in_range(1, 1 << 24)),
       field("batch_size", &L::batch_size, "packed: global rows per step (split over ranks)", at_least(1)),
       field("doc_mask", &L::doc_mask, "keep attention and positions inside a document"),
       field_custom<L>("buckets", "bucketed: row lengths, ascending", "array", read_buckets,
                       [](const L& c, toml::table& t) { schema_detail::put(t, "buckets", c.buckets); }),
       field("max_tokens_per_batch", &L::max_tokens_per_batch, "bucketed: rows = this / bucket"),
       field("seed", &L::seed, "the documents' order"),
       field("shuffle", &L::shuffle, "false: documents in file order"),
       field("span_tokens", &L::span_tokens, "packed: shuffle spans of this many tokens (0: whole documents)"),
       field("append_eod", &L::append_eod, "insert EOD after every document"),
       field("eod_id", &L::eod_id, "-1: the tokenizer's or none"),
       field("prefetch_threads", &L::prefetch_threads, "0: build each batch on the caller's thread",
             in_range(0, 64, "0 = on the caller's thread")),
       field("prefetch_depth", &L::prefetch_depth, "batches in flight", in_range(2, 1024)),
       field("latency_window", &L::latency_window, "fetch latencies kept for P50/P95/P99", at_least(1)),
       field("inject_slow_ms", &L::inject_slow_ms, "fault injection (tests): each batch this much slower",
             at_least(0)),
       field("format", &L::format, "\"text\": token shards; \"chat\": chat JSONL, loss on the replies (docs/finetune.md)"),
       field("chat_template", &L::chat_template, "chat: \"\" = the model's own; a .jinja or tokenizer_config.json"),
       field("chat_overflow", &L::chat_overflow, "chat: a conversation longer than a row is cut or dropped"),
       field("stream_tokenizer", &L::stream_tokenizer, "tokenizer file; non-empty = streaming mode"),
       field("stream_threads", &L::stream_threads, "streaming: tokenizer threads", at_least(1))}};
  return s;
}

}  // namespace

SectionDoc loader_config_doc() { return section_doc(loader_schema()); }

Status loader_config_validate(const LoaderConfig& c) {
  std::vector<std::string> e;
  schema_check(loader_schema(), c, e);
  if (c.sources.empty()) e.push_back("[data] sources: empty; expected \"PREFIX[:WEIGHT],...\"");
  if (c.mode == BatchMode::kPacked && c.batch_size < c.ranks)
    e.push_back(fmt::format("[data] batch_size = {}: the global batch must have at least one row per rank ({} ranks)",
                            c.batch_size, c.ranks));
  if (c.buckets.empty()) e.push_back("[data] buckets: empty; expected ascending lengths, e.g. [128, 256, 512]");
  for (size_t i = 0; i < c.buckets.size(); ++i)
    if (c.buckets[i] < 1 || (i > 0 && c.buckets[i] <= c.buckets[i - 1])) {
      e.push_back(fmt::format("[data] buckets: {} at index {}: expected positive, strictly ascending lengths",
                              c.buckets[i], i));
      break;
    }
  if (c.mode == BatchMode::kBucketed && !c.buckets.empty() && c.buckets.back() > 0 &&
      c.max_tokens_per_batch / static_cast<uint64_t>(c.buckets.back()) < static_cast<uint64_t>(c.ranks))
    e.push_back(fmt::format("[data] max_tokens_per_batch = {}: the largest bucket ({}) must fit at least one row per "
                            "rank ({} ranks), so at least {}",
                            c.max_tokens_per_batch, c.buckets.back(), c.ranks,
                            static_cast<uint64_t>(c.buckets.back()) * c.ranks));
  if (c.append_eod && c.eod_id < 0 && c.stream_tokenizer.empty())
    e.push_back("[data] append_eod = true needs eod_id >= 0 (or a tokenizer that has one); set append_eod = false "
                "when the shards were written with `smelt tokenize --append-eod`");
  if (c.span_tokens > 0 && c.mode == BatchMode::kBucketed)
    e.push_back(fmt::format("[data] span_tokens = {}: spans are for packed rows; bucketed rows hold whole documents "
                            "(set span_tokens = 0)", c.span_tokens));
  if (c.span_tokens > 0 && !c.stream_tokenizer.empty())
    e.push_back(fmt::format("[data] span_tokens = {}: a stream is read in order, not shuffled (set span_tokens = 0)",
                            c.span_tokens));
  if (c.format == DataFormat::kChat) {
    if (!c.stream_tokenizer.empty()) e.push_back("[data] format = \"chat\": chat data is not streamed (unset stream_tokenizer)");
    if (c.span_tokens > 0) e.push_back("[data] format = \"chat\": rows hold whole conversations (set span_tokens = 0)");
    if (!c.doc_mask) e.push_back("[data] format = \"chat\" with doc_mask = false: packed conversations would attend to each other");
    if (c.append_eod) e.push_back("[data] format = \"chat\" with append_eod = true: the template ends each turn itself");
  }
  if (c.ranks < 1 || c.rank < 0 || c.rank >= c.ranks)
    e.push_back(fmt::format("data: rank {} of {} ranks is out of range", c.rank, c.ranks));
  if (c.stream_tokenizer.empty() && !c.sources.empty()) {
    std::vector<DataSource> s;
    if (Status st = blend_parse_sources(c.sources, s); !st) e.push_back("[data] sources: " + st.message());
  }
  return config_errors_status(e);
}

Status loader_config_read(const toml::table& root, LoaderConfig& c, toml::table* resolved) {
  std::vector<std::string> errors;
  schema_read_keys(loader_schema(), root, c, errors);
  if (c.format == DataFormat::kChat) {  // chat's defaults: conversations kept apart, no EOD of the loader's
    const toml::node_view<const toml::node> d = root["data"];
    if (!d["doc_mask"]) c.doc_mask = true;
    if (!d["append_eod"]) c.append_eod = false;
  }
  if (resolved) *resolved = schema_to_toml(loader_schema(), c);
  if (!errors.empty()) return config_errors_status(errors);
  return loader_config_validate(c);
}

void train_batch_shape(const LoaderConfig& d, int& B, int& T) {
  if (d.mode == BatchMode::kPacked) {
    B = std::max(1, d.batch_size / std::max(1, d.ranks));
    T = d.seq_len;
    return;
  }
  T = d.buckets.back();
  const int64_t tokens = (int64_t)d.max_tokens_per_batch / std::max(1, d.ranks);
  B = (int)std::max<int64_t>(1, (tokens + T - 1) / T);
}

// ---- latency window ----

LatencyWindow::LatencyWindow(size_t capacity) : ring_(std::max<size_t>(capacity, 1)) { scratch_.reserve(ring_.size()); }

void LatencyWindow::add(double ms) {
  ring_[next_] = ms;
  next_ = (next_ + 1) % ring_.size();
  size_ = std::min(size_ + 1, ring_.size());
  ++total_;
}

void LatencyWindow::clear() { next_ = size_ = 0, total_ = 0; }

LatencyWindow::Stats LatencyWindow::stats() const {
  Stats s;
  s.count = size_;
  if (size_ == 0) return s;
  scratch_.assign(ring_.begin(), ring_.begin() + static_cast<std::ptrdiff_t>(size_));
  std::sort(scratch_.begin(), scratch_.end());
  // nearest-rank percentile
  auto pct = [&](double p) {
    size_t k = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(size_)));
    return scratch_[std::min(size_ - 1, k == 0 ? 0 : k - 1)];
  };
  s.p50 = pct(50), s.p95 = pct(95), s.p99 = pct(99), s.max = scratch_.back();
  double sum = 0;
  for (double x : scratch_) sum += x;
  s.mean = sum / static_cast<double>(size_);
  return s;
}

// ---- loader ----

Loader::~Loader() { close(); }

Status Loader::open(const LoaderConfig& c, const LoaderPosition* resume) {
  close();
  c_ = c;
  if (Status s = loader_config_validate(c_); !s) return s;
  if (!c_.stream_tokenizer.empty())
    return Status::error("loader: streaming mode is opened with StreamLoader (stream_source.hpp)");
  if (Status s = blend_parse_sources(c_.sources, sources_); !s) return s;
  shards_.clear();
  shards_.resize(sources_.size());
  data_.clear();
  for (size_t i = 0; i < sources_.size(); ++i) {
    if (Status s = shards_[i].open(sources_[i].prefix); !s)
      return Status::error(fmt::format("data source \"{}\": {}", sources_[i].name, s.message()));
    data_.push_back(&shards_[i]);
  }
  // (bucketed with span_tokens was refused by loader_config_validate above)
  if (Status s = planner_.init(c_, sources_, data_, resume); !s) return s;
  start_state_ = planner_.state();
  fetch_ = LatencyWindow(static_cast<size_t>(c_.latency_window));

  const int depth = c_.prefetch_threads == 0 ? 1 : c_.prefetch_depth;
  const int rows = planner_.max_rows(), cols = planner_.max_cols();
  slots_.clear();
  for (int i = 0; i < depth; ++i) {
    auto s = std::make_unique<Slot>();
    loader_batch_reserve(s->batch, rows, cols);
    // pieces per row: at most one per document touched, bounded by the row's tokens (+EOD each)
    s->plan.pieces.reserve(static_cast<size_t>(rows) * 8);
    s->state = start_state_;
    // the pending lists reach at most a bucket's global rows: reserve so copying a state never allocates
    for (auto& p : s->state.pending) p.reserve(static_cast<size_t>(rows) * static_cast<size_t>(c_.ranks));
    slots_.push_back(std::move(s));
  }
  next_plan_ = consumed_ = 0;
  held_ = nullptr;
  stop_ = false;
  for (int i = 0; i < c_.prefetch_threads; ++i) threads_.emplace_back([this] { worker(); });
  return Status::ok();
}

void Loader::build(Slot& s) {
  packing_fill(s.plan, data_, c_.eod_id, c_.doc_mask, s.batch, c_.format == DataFormat::kChat);
  if (c_.inject_slow_ms > 0)  // fault injection: a slow file system or decoder
    std::this_thread::sleep_for(std::chrono::microseconds((int64_t)(c_.inject_slow_ms * 1e3)));
}

void Loader::worker() {
  const uint64_t depth = slots_.size();
  for (;;) {
    Slot* slot;
    {
      std::unique_lock lk(mu_);
      // Slot of sequence q is free once the caller has moved past q - depth (it holds consumed_-1).
      cv_free_.wait(lk, [&] { return stop_ || next_plan_ + 1 < consumed_ + depth; });
      if (stop_) return;
      uint64_t q = next_plan_++;
      slot = slots_[q % depth].get();
      slot->ready = false;
      slot->seq = q;
      planner_.next(slot->plan);  // cheap: walks lengths, touches no tokens
      slot->state = planner_.state();
    }
    build(*slot);
    {
      std::lock_guard lk(mu_);
      slot->ready = true;
    }
    cv_ready_.notify_all();
  }
}

const Batch& Loader::next() {
  auto t0 = std::chrono::steady_clock::now();
  double wait_ms = 0;
  if (threads_.empty()) {
    Slot& s = *slots_[0];
    planner_.next(s.plan);
    s.state = planner_.state();
    s.seq = consumed_;
    build(s);
    held_ = &s;
    ++consumed_;
    wait_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  } else {
    std::unique_lock lk(mu_);
    const uint64_t depth = slots_.size();
    Slot* s = slots_[consumed_ % depth].get();
    ++consumed_;  // releases the previously held slot
    cv_free_.notify_all();
    if (!(s->ready && s->seq == consumed_ - 1)) {
      auto w0 = std::chrono::steady_clock::now();
      cv_ready_.wait(lk, [&] { return s->ready && s->seq == consumed_ - 1; });
      wait_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - w0).count();
    }
    held_ = s;
  }
  last_wait_ms_ = wait_ms;
  last_fetch_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  fetch_.add(last_fetch_ms_);
  return held_->batch;
}

LoaderPosition Loader::position() const {
  std::lock_guard lk(mu_);
  return planner_.position(held_ ? held_->state : start_state_);
}

void Loader::close() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_free_.notify_all();
  cv_ready_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
  held_ = nullptr;
}

}  // namespace smelt
