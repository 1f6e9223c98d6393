// General-purpose compressors as a yardstick for a model's bits per byte: `gzip -9`, `zstd -19`
// and `xz -9e` run as processes on the same held-out text the model was scored on. Not the
// evaluation itself (evaluate.hpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace smelt {

struct CompressorResult {
  std::string name;     // "gzip", "zstd", "xz"
  std::string label;    // the setting, e.g. "xz -9e"
  std::string command;  // as run, e.g. "xz -9e -c"
  uint64_t bytes_in = 0, bytes_out = 0;
  double bits_per_byte = -1;  // 8 x bytes_out / bytes_in; -1 when it did not run
  double seconds = 0;
  std::string error;  // why it did not run ("" when it did)
};

// Writes `text` to a temporary file in tmp_dir and compresses it with each tool (stdout to a second
// temporary file, both removed). A tool that is missing or fails gives a result with `error` set.
std::vector<CompressorResult> compressors_measure(const std::string& text, const std::string& tmp_dir);

}  // namespace smelt
