// Prometheus text exposition (format 0.0.4) of `smelt serve`'s GET /metrics: the engine's
// counters, gauges and latency histograms (EngineStats) plus what only the HTTP layer sees (how
// requests finished, why some were refused, responses by status code). Not the collection: the
// engine counts its own, http_server.cpp counts ServeCounters.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "smelt/serve/engine.hpp"

namespace smelt {

// Counts kept by the HTTP layer; thread-safe.
class ServeCounters {
 public:
  void finished(FinishReason r);
  void rejected(Admission a);        // kQueueFull, kTooLong, kStopping, kInvalid
  void response(int status);
  struct Snapshot {
    uint64_t finish[4] = {};         // by FinishReason: stop, length, cancelled, aborted
    uint64_t rejected[5] = {};       // by Admission (kAccepted unused)
    std::map<int, uint64_t> status;  // HTTP status -> responses
  };
  Snapshot snapshot() const;

 private:
  mutable std::mutex mu_;
  Snapshot s_;
};

// The whole exposition text (metric families in a fixed order, each with # HELP and # TYPE).
std::string metrics_render(const EngineStats& e, const ServeCounters::Snapshot& c);

}  // namespace smelt
