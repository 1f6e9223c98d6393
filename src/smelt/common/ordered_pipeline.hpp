// An ordered parallel pipeline, the shape of `smelt prep` and `smelt tokenize`: one reader thread
// groups items into chunks, worker threads process whole chunks in any order, and the calling
// thread commits the items in the reader's order. At most 4 x threads chunks are in flight, so
// memory does not grow with the input, and the committed order (hence every output byte) does
// not depend on the thread count.
//
// Stopping: `stop` may be raised by a signal handler (which cannot notify), so every wait for a
// free slot is a timed one; a failed commit raises it too and closes the work queue.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "smelt/common/queue.hpp"
#include "smelt/common/status.hpp"

namespace smelt {

template <class Item>
class OrderedPipeline {
 public:
  // threads workers; a chunk ships when it holds chunk_items items or chunk_bytes bytes
  OrderedPipeline(int threads, size_t chunk_items, size_t chunk_bytes, std::atomic<bool>& stop)
      : threads_(threads),
        chunk_items_(chunk_items),
        chunk_bytes_(chunk_bytes),
        max_in_flight_(4ull * static_cast<uint64_t>(threads)),
        stop_(stop),
        work_(2ull * static_cast<size_t>(threads)),
        done_(max_in_flight_ + 1) {}

  // Reader side (inside `read`): adds an item that counts `bytes` towards its chunk's size; ships
  // the chunk when full. False once the pipeline stops: the reader should return.
  bool add(Item&& it, size_t bytes) {
    open_bytes_ += bytes;
    open_.items.push_back(std::move(it));
    return (open_.items.size() < chunk_items_ && open_bytes_ < chunk_bytes_) || ship();
  }

  // Runs the pipeline to its end. read(): the reader thread's loop, calling add(). make_worker():
  // called once in each worker thread, returns that thread's per-item function (so a worker may
  // keep its own parser or buffers). commit(Item&) -> Status, in the reader's order on this thread;
  // the first failure stops the pipeline and is returned. tick(): after each finished chunk.
  template <class Read, class MakeWorker, class Commit, class Tick>
  Status run(Read read, MakeWorker make_worker, Commit commit, Tick tick) {
    std::thread reader([&] {
      struct CloseOnExit {  // whatever way read() ends, the workers learn that no more chunks come
        BoundedQueue<Chunk>* q;
        ~CloseOnExit() { q->close(); }
      } close_on_exit{&work_};
      read();
      if (!stop_) ship();
    });
    std::vector<std::thread> workers;
    for (int i = 0; i < threads_; ++i)
      workers.emplace_back([&] {
        auto process = make_worker();
        while (auto chunk = work_.pop()) {
          for (auto& it : chunk->items) process(it);
          if (!done_.push(std::move(*chunk))) break;
        }
      });
    std::thread closer([&] {
      for (auto& w : workers) w.join();
      done_.close();
    });

    Status status;
    std::map<uint64_t, Chunk> reorder;
    uint64_t next_seq = 0;
    while (auto chunk = done_.pop()) {
      reorder.emplace(chunk->seq, std::move(*chunk));
      while (!reorder.empty() && reorder.begin()->first == next_seq) {
        Chunk ch = std::move(reorder.begin()->second);
        reorder.erase(reorder.begin());
        ++next_seq;
        for (auto& it : ch.items) {
          if (!status) break;
          status = commit(it);
        }
        --in_flight_;
        flight_cv_.notify_all();
      }
      tick();
      if (status && !stop_.load()) continue;
      stop_ = true;  // a failure stops the pipeline too
      flight_cv_.notify_all();
      work_.close();
    }
    flight_cv_.notify_all();
    reader.join();
    closer.join();
    return status;
  }

 private:
  struct Chunk {
    uint64_t seq = 0;
    std::vector<Item> items;
  };

  bool ship() {
    if (open_.items.empty()) return true;
    {
      std::unique_lock lk(flight_mu_);
      while (!flight_cv_.wait_for(lk, std::chrono::milliseconds(100),
                                  [&] { return in_flight_ < max_in_flight_ || stop_; })) {
      }
    }
    if (stop_) return false;
    ++in_flight_;
    open_.seq = next_ship_++;
    bool ok = work_.push(std::move(open_));
    open_ = Chunk{};
    open_bytes_ = 0;
    return ok;
  }

  const int threads_;
  const size_t chunk_items_, chunk_bytes_;
  const uint64_t max_in_flight_;
  std::atomic<bool>& stop_;
  BoundedQueue<Chunk> work_, done_;
  std::atomic<uint64_t> in_flight_{0};
  std::mutex flight_mu_;
  std::condition_variable flight_cv_;
  Chunk open_;  // the reader's chunk being filled
  size_t open_bytes_ = 0;
  uint64_t next_ship_ = 0;
};

}  // namespace smelt
