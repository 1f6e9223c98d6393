// The training data loader: opens the blended token shards, plans batches deterministically
// (blend.hpp) and fills them on background threads into a bounded ring of preallocated Batch
// buffers, handed out in step order. Records data_wait_ms per step and a window of fetch latencies
// (P50/P95/P99) for rank 0's report. Not here: the planning rules (blend.hpp, packing.cpp), reading
// .jsonl.zst on the fly (StreamLoader below, stream_source.cpp).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "smelt/common/batch.hpp"
#include "smelt/common/status.hpp"
#include "smelt/dataset/blend.hpp"
#include "smelt/dataset/indexed.hpp"

namespace smelt {

class Tokenizer;

// The model's planned batch (rows B, length T) for the largest batch the loader hands one rank.
void train_batch_shape(const LoaderConfig& d, int& B, int& T);

// Fixed-capacity window of latencies (ms); percentiles over the last `capacity` samples.
class LatencyWindow {
 public:
  explicit LatencyWindow(size_t capacity = 1000);
  void add(double ms);
  struct Stats { double p50 = 0, p95 = 0, p99 = 0, mean = 0, max = 0; uint64_t count = 0; };
  Stats stats() const;  // over the window (count: samples in it)
  uint64_t total() const { return total_; }
  void clear();

 private:
  std::vector<double> ring_;
  size_t next_ = 0, size_ = 0;
  uint64_t total_ = 0;
  mutable std::vector<double> scratch_;
};

class Loader {
 public:
  Loader() = default;
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Opens every source and starts the prefetch threads. resume: a position from a checkpoint
  // (it may come from a different blend or rank count).
  Status open(const LoaderConfig& c, const LoaderPosition* resume = nullptr);
  // This rank's next batch. The reference stays valid until the next call to next() or close().
  const Batch& next();
  // The position after the last batch next() returned: what a checkpoint stores.
  LoaderPosition position() const;
  double last_wait_ms() const { return last_wait_ms_; }     // time next() was blocked
  double last_fetch_ms() const { return last_fetch_ms_; }   // whole next() call
  const LatencyWindow& fetch_latency() const { return fetch_; }
  void close();

  const LoaderConfig& config() const { return c_; }
  const std::vector<DataSource>& sources() const { return sources_; }

 private:
  struct Slot {
    uint64_t seq = UINT64_MAX;  // the step filled into it
    bool ready = false;
    BatchPlan plan;
    Planner::State state;       // planner state after this batch
    Batch batch;
  };
  void worker();
  void build(Slot& s);
  LoaderConfig c_;
  std::vector<DataSource> sources_;
  std::vector<IndexedDataset> shards_;
  std::vector<const IndexedDataset*> data_;
  Planner planner_;
  Planner::State start_state_;
  std::vector<std::unique_ptr<Slot>> slots_;
  mutable std::mutex mu_;
  std::condition_variable cv_free_, cv_ready_;
  uint64_t next_plan_ = 0;     // next sequence number to plan
  uint64_t consumed_ = 0;      // batches handed out
  Slot* held_ = nullptr;       // the batch the caller holds
  bool stop_ = false;
  std::vector<std::thread> threads_;
  LatencyWindow fetch_;
  double last_wait_ms_ = 0, last_fetch_ms_ = 0;
};

// ---- streaming mode (stream_source.cpp) ----

// Refined JSONL(.zst) or text files read and tokenized on background threads (one reader, N
// encoders, results reordered), yielding documents as token vectors in input order: the order
// `smelt tokenize` writes them. Memory: at most 4 x threads chunks of 64 documents in flight.
class StreamSource {
 public:
  StreamSource();
  ~StreamSource();
  StreamSource(const StreamSource&) = delete;
  StreamSource& operator=(const StreamSource&) = delete;
  // inputs: files, folders, globs (sorted, as smelt tokenize reads them). The first skip_docs
  // documents are read but not tokenized (a resume).
  Status open(const std::vector<std::string>& inputs, const Tokenizer& tok, int threads, uint64_t skip_docs = 0,
              const std::string& text_field = "text");
  // The next document's ids; false at the end of the input.
  bool next(std::vector<uint32_t>& ids);
  void close();
  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The loader over a StreamSource: packed rows exactly as Loader builds them from an unshuffled shard
// of the same text (documents in input order, EOD between them, rows of T+1 tokens consuming T;
// ranks take rows [r*B/R, (r+1)*B/R)); the input starts over at its end (a new epoch). Position:
// one source named "stream" with (epoch, docs, offset). c.sources: the input paths, comma-separated;
// c.stream_tokenizer: the tokenizer file; EOD from c.eod_id or the tokenizer. Packed mode only.
class StreamLoader {
 public:
  StreamLoader();
  ~StreamLoader();
  Status open(const LoaderConfig& c, const LoaderPosition* resume = nullptr);
  const Batch& next();
  LoaderPosition position() const;
  double last_wait_ms() const { return last_wait_ms_; }
  const LatencyWindow& fetch_latency() const { return fetch_; }
  void close();

 private:
  bool pull(uint64_t upto);  // reads documents until doc index `upto` is held
  LoaderConfig c_;
  std::unique_ptr<Tokenizer> tok_;
  std::vector<std::string> inputs_;
  StreamSource src_;
  std::deque<std::vector<uint32_t>> docs_;  // held documents, the first is number base_
  uint64_t base_ = 0, read_ = 0;            // document numbers (since the start of the epoch)
  SourceCursor cur_;
  uint64_t step_ = 0;
  int64_t eod_ = -1;
  BatchPlan plan_;
  Batch batch_;
  LatencyWindow fetch_;
  double last_wait_ms_ = 0;
  std::vector<uint64_t> epoch_docs_;        // documents per finished epoch (the input's count)
};

}  // namespace smelt
