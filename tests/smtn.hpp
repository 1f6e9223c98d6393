// The "SMTN" tensor file that the tests and their PyTorch references exchange (the format is
// documented in tests/reference/llama_ref.py): a writer and a reader. Not product code.
#pragma once
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace smelt::test {

struct Tensor {
  std::vector<float> f;
  std::vector<int32_t> i;
  std::vector<int64_t> dims;
};
using TensorMap = std::map<std::string, Tensor>;

// Writes the "SMTN" tensor file documented in tests/reference/llama_ref.py.
inline void write_smtn(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& ts) {
  std::ofstream f(path, std::ios::binary);
  auto u32 = [&](uint32_t v) { f.write((const char*)&v, 4); };
  f.write("SMTN", 4);
  u32(1);
  u32((uint32_t)ts.size());
  for (const auto& [name, t] : ts) {
    u32((uint32_t)name.size());
    f.write(name.data(), name.size());
    uint8_t dtype = t.f.empty() ? 1 : 0, ndim = (uint8_t)t.dims.size();
    f.write((const char*)&dtype, 1);
    f.write((const char*)&ndim, 1);
    f.write((const char*)t.dims.data(), 8 * ndim);
    if (dtype == 0) f.write((const char*)t.f.data(), 4 * t.f.size());
    else f.write((const char*)t.i.data(), 4 * t.i.size());
  }
}

inline TensorMap read_smtn(const std::string& path) {
  TensorMap out;
  std::ifstream f(path, std::ios::binary);
  char magic[4];
  uint32_t version = 0, count = 0;
  f.read(magic, 4);
  f.read((char*)&version, 4);
  f.read((char*)&count, 4);
  EXPECT_TRUE(f && std::memcmp(magic, "SMTN", 4) == 0 && version == 1) << path;
  for (uint32_t k = 0; k < count && f; k++) {
    uint32_t n;
    f.read((char*)&n, 4);
    std::string name(n, '\0');
    f.read(name.data(), n);
    uint8_t dtype, ndim;
    f.read((char*)&dtype, 1);
    f.read((char*)&ndim, 1);
    Tensor t;
    t.dims.resize(ndim);
    f.read((char*)t.dims.data(), 8 * ndim);
    int64_t numel = 1;
    for (auto d : t.dims) numel *= d;
    if (dtype == 0) { t.f.resize(numel); f.read((char*)t.f.data(), 4 * numel); }
    else { t.i.resize(numel); f.read((char*)t.i.data(), 4 * numel); }
    out[name] = std::move(t);
  }
  return out;
}

}  // namespace smelt::test
