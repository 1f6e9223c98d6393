// Shared by the model benchmarks (bench/train/model_bench, bench/lora/lora_bench): a CONFIG.toml's
// [model] and its [bench] batch and seq_len, and a batch of random tokens. Not a benchmark.
#pragma once
#include <cstdio>
#include <random>
#include <string>

#include "smelt/common/batch.hpp"
#include "smelt/common/config.hpp"
#include "smelt/model/config.hpp"

namespace smelt::bench {

// [model] into c, [bench] batch / seq_len into B / T (defaults kept); false after printing why.
inline bool read_bench_config(const char* path, ModelConfig& c, int& B, int& T) {
  toml::table root;
  if (auto s = config_load(path, root); !s) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return false;
  }
  ConfigSection bs(root, "bench");
  bs.get("batch", B);
  bs.get("seq_len", T);
  root.erase("bench");  // [model] reads only its own section; the rest belongs to the bench
  if (auto s = model_config_read(root, c); !s) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return false;
  }
  return true;
}

// B x T random inputs and targets below V (seed 1).
inline Batch random_batch(int B, int T, int V) {
  Batch b;
  b.B = B;
  b.T = T;
  std::mt19937_64 g(1);
  for (int n = 0; n < B * T; n++) {
    b.inputs.push_back((int32_t)(g() % V));
    b.targets.push_back((int32_t)(g() % V));
  }
  return b;
}

}  // namespace smelt::bench
