// Shared fixtures of the training tests: a token shard of real text (one token per byte) and the
// run's metrics.jsonl read back, with or without the timing fields (the only ones that differ
// between identical runs). Not product code.
#pragma once
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "smelt/dataset/indexed.hpp"
#include "smelt/dataset/lineage.hpp"
#include "test_files.hpp"

namespace smelt::test {

// One document per line of 8 bytes or more, one token per byte (ids < 256, no EOD in the shard);
// PREFIX.docs names each document "FILE:LINE".
inline void write_byte_shard(const std::string& prefix, const std::vector<std::string>& files) {
  IndexedWriter w;
  LineageWriter lin;
  ASSERT_TRUE(w.open(prefix, IndexedDType::kUInt16).is_ok());
  ASSERT_TRUE(lin.open(lineage_path(prefix)).is_ok());
  for (const auto& f : files) {
    std::istringstream in(read_file(f));
    std::string line;
    for (int n = 1; std::getline(in, line); n++) {
      if (line.size() < 8) continue;
      std::vector<uint32_t> ids(line.begin(), line.end());
      for (auto& x : ids) x &= 0xFF;
      ASSERT_TRUE(w.add_document(ids).is_ok());
      ASSERT_TRUE(lin.add(std::filesystem::path(f).filename().string() + ":" + std::to_string(n)).is_ok());
    }
  }
  ASSERT_TRUE(w.finish().is_ok());
  ASSERT_TRUE(lin.finish().is_ok());
}

// A metrics line without its timing fields.
inline nlohmann::json drop_timing(nlohmann::json j) {
  for (const char* k : {"tokens_per_s", "mfu", "step_ms", "data_wait_ms", "fetch_ms", "ckpt_stall_ms",
                        "ckpt_write_mb_s", "allreduce_ms", "allreduce_wait_ms", "allreduce_bytes",
                        "allreduce_buckets"})
    j.erase(k);
  return j;
}

// RUN/metrics.jsonl, one object per line (timing fields dropped unless keep_timing).
inline std::vector<nlohmann::json> read_metrics(const std::filesystem::path& run_dir, bool keep_timing = false) {
  std::vector<nlohmann::json> out;
  std::istringstream in(read_file((run_dir / "metrics.jsonl").string()));
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    out.push_back(keep_timing ? j : drop_timing(j));
  }
  return out;
}

}  // namespace smelt::test
