// Whole-file read and write for tests (fixtures, outputs to compare). Not for product code,
// which streams its inputs.
#pragma once
#include <cstdio>
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

// Runs a shell command, returns its standard output; rc receives pclose's status (-1 if it could
// not start).
inline std::string run_command(const std::string& cmd, int& rc) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    rc = -1;
    return out;
  }
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  rc = pclose(p);
  return out;
}

}  // namespace smelt::test
