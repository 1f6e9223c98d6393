// Whole-file read and write for tests (fixtures, outputs to compare). Not for product code,
// which streams its inputs.
#pragma once
#include <fstream>
#include <sstream>
#include <string>

namespace smelt::test {

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline void write_file(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary);
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
}

}  // namespace smelt::test
