// safetensors writer and reader: a file written tensor by tensor is read back by our reader and by
// an independent numpy reader (tests/reference/safetensors_read.py, written from the format spec)
// with every value equal; CRC32Cs match the bytes, also for files larger than the write buffers and
// for tensors written straight from a 4 KiB-aligned image (per tensor, as one stream from stable
// memory, with CRCs handed over); damaged headers are rejected with their place.
#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "smelt/ckpt/crc32c.hpp"
#include "smelt/ckpt/safetensors.hpp"
#include "test_files.hpp"

namespace fs = std::filesystem;
using namespace smelt;

namespace {

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("smelt_safetensors_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Tensors whose values are obvious by construction: tensor k element i = k * 1000 + i * 0.25.
  std::string write_sample(std::vector<std::vector<float>>& data, std::vector<SafetensorsTensor>& specs) {
    std::vector<std::vector<int64_t>> shapes = {{3, 5}, {7}, {0}, {2, 3, 4}, {}, {1, 13}};
    for (size_t k = 0; k < shapes.size(); ++k) {
      SafetensorsTensor t;
      t.name = "layer." + std::to_string(k) + ".weight";
      t.shape = shapes[k];
      std::vector<float> v(static_cast<size_t>(safetensors_numel(t.shape)));
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(k * 1000 + i * 0.25);
      data.push_back(v);
      specs.push_back(t);
    }
    std::string path = (dir_ / "a.safetensors").string();
    SafetensorsWriter w;
    EXPECT_TRUE(w.open(path, specs, {{"format", "smelt"}, {"step", "42"}}).is_ok());
    for (const auto& v : data) EXPECT_TRUE(w.write_next(v.data()).is_ok());
    Status s = w.finish();
    EXPECT_TRUE(s.is_ok()) << s.message();
    specs = w.tensors();
    std::string bytes = test::read_file(path);
    EXPECT_EQ(static_cast<int64_t>(bytes.size()), w.file_bytes());
    EXPECT_EQ(crc32c_update(0, bytes.data(), bytes.size()), w.file_crc32c());
    return path;
  }
  fs::path dir_;
};

}  // namespace

TEST_F(SafetensorsTest, RoundTripOwnReader) {
  std::vector<std::vector<float>> data;
  std::vector<SafetensorsTensor> specs;
  std::string path = write_sample(data, specs);
  std::string bytes = test::read_file(path);
  SafetensorsReader rd;
  Status s = rd.open(path);
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(rd.data_start() % 4096, 0);  // the header is padded so that the data is 4 KiB aligned
  EXPECT_EQ(rd.metadata().at("step"), "42");
  ASSERT_EQ(rd.tensors().size(), data.size());
  for (size_t k = 0; k < data.size(); ++k) {
    const SafetensorsTensor* t = rd.find(specs[k].name);
    ASSERT_NE(t, nullptr) << specs[k].name;
    EXPECT_EQ(t->shape, specs[k].shape);
    EXPECT_EQ(t->begin, specs[k].begin);
    EXPECT_EQ(t->bytes(), static_cast<int64_t>(data[k].size() * 4));
    std::vector<float> back(data[k].size());
    ASSERT_TRUE(rd.read_at(t->begin, back.data(), t->bytes()).is_ok());
    EXPECT_EQ(back, data[k]);
    EXPECT_EQ(crc32c_update(0, bytes.data() + t->begin, static_cast<size_t>(t->bytes())), specs[k].crc32c);
  }
}

TEST_F(SafetensorsTest, IndependentNumpyReaderAgrees) {
  std::vector<std::vector<float>> data;
  std::vector<SafetensorsTensor> specs;
  std::string path = write_sample(data, specs);
  std::string out = (dir_ / "py.json").string();
  std::string cmd = "/usr/bin/python3 " + std::string(SMELT_SOURCE_DIR) + "/tests/reference/safetensors_read.py " +
                    path + " > " + out;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto j = nlohmann::json::parse(test::read_file(out));
  EXPECT_EQ(j["metadata"]["format"], "smelt");
  EXPECT_EQ(j["metadata"]["step"], "42");
  ASSERT_EQ(j["tensors"].size(), data.size());
  for (size_t k = 0; k < data.size(); ++k) {
    const auto& t = j["tensors"][specs[k].name];
    EXPECT_EQ(t["dtype"], "F32");
    EXPECT_EQ(t["shape"].get<std::vector<int64_t>>(), specs[k].shape);
    std::vector<double> v = t["values"].get<std::vector<double>>();
    ASSERT_EQ(v.size(), data[k].size()) << specs[k].name;
    for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(v[i], static_cast<double>(data[k][i])) << specs[k].name << "[" << i << "]";
  }
}

TEST_F(SafetensorsTest, LargeOddSizedTensorsCrossWriteBufferBoundaries) {
  // ~21 MB over 4 MiB write buffers: tensors straddle buffers, the last write is padded for
  // O_DIRECT and the file truncated back to its exact size
  std::vector<int64_t> sizes = {3000001, 7, 2333333};
  std::vector<std::vector<float>> data;
  std::vector<SafetensorsTensor> specs;
  for (size_t k = 0; k < sizes.size(); ++k) {
    std::vector<float> v(static_cast<size_t>(sizes[k]));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 2654435761u + k) % 1000003);
    data.push_back(std::move(v));
    SafetensorsTensor t;
    t.name = "big." + std::to_string(k);
    t.shape = {sizes[k]};
    specs.push_back(t);
  }
  std::string path = (dir_ / "big.safetensors").string();
  SafetensorsWriter w;
  ASSERT_TRUE(w.open(path, specs, {}).is_ok());
  for (const auto& v : data) ASSERT_TRUE(w.write_next(v.data()).is_ok());
  ASSERT_TRUE(w.finish().is_ok());
  std::string bytes = test::read_file(path);
  ASSERT_EQ(static_cast<int64_t>(bytes.size()), w.file_bytes());
  EXPECT_EQ(crc32c_update(0, bytes.data(), bytes.size()), w.file_crc32c());
  SafetensorsReader rd;
  ASSERT_TRUE(rd.open(path).is_ok());
  for (size_t k = 0; k < data.size(); ++k) {
    const SafetensorsTensor* t = rd.find("big." + std::to_string(k));
    ASSERT_NE(t, nullptr);
    std::vector<float> back(data[k].size());
    ASSERT_TRUE(rd.read_at(t->begin, back.data(), t->bytes()).is_ok());
    EXPECT_TRUE(back == data[k]) << t->name;
    EXPECT_EQ(crc32c_update(0, back.data(), back.size() * 4), w.tensors()[k].crc32c);
  }
}

TEST_F(SafetensorsTest, DamagedFilesAreRejectedWithTheirPlace) {
  std::vector<std::vector<float>> data;
  std::vector<SafetensorsTensor> specs;
  std::string path = write_sample(data, specs);
  std::string good = test::read_file(path);
  auto expect_bad = [&](const std::string& bytes, const std::string& needle) {
    std::string p = (dir_ / "bad.safetensors").string();
    test::write_file(p, bytes);
    SafetensorsReader rd;
    Status s = rd.open(p);
    ASSERT_FALSE(s.is_ok()) << needle;
    EXPECT_NE(s.message().find("bad.safetensors"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  };
  expect_bad(good.substr(0, 5), "too short");
  expect_bad(good.substr(0, good.size() - 4), "outside the");  // truncated data
  std::string big_len = good;
  big_len[6] = 1;  // header length now > file size
  expect_bad(big_len, "header length");
  std::string bad_json = good;
  bad_json[8] = '[';
  expect_bad(bad_json, "header JSON invalid");
  std::string bad_dtype = good;
  size_t at = bad_dtype.find("\"F32\"");
  bad_dtype.replace(at, 5, "\"Q32\"");
  expect_bad(bad_dtype, "unknown dtype");
  std::string appended = good + std::string(8, '\0');
  expect_bad(appended, "data ends at byte");
}

TEST_F(SafetensorsTest, WriterRejectsRepeatedNamesAndMissingTensors) {
  SafetensorsWriter w;
  std::vector<SafetensorsTensor> specs(2);
  specs[0].name = specs[1].name = "x";
  specs[0].shape = specs[1].shape = {2};
  EXPECT_FALSE(w.open((dir_ / "r.safetensors").string(), specs, {}).is_ok());
  specs[1].name = "y";
  ASSERT_TRUE(w.open((dir_ / "r.safetensors").string(), specs, {}).is_ok());
  float v[2] = {1, 2};
  ASSERT_TRUE(w.write_next(v).is_ok());
  Status s = w.finish();
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("1 of 2 tensors"), std::string::npos) << s.message();
}

TEST_F(SafetensorsTest, AlignedImageIsWrittenStraightFromMemoryWithTheSameBytesAndCrcs) {
  // A 4 KiB-aligned buffer laid out like the file's data (CkptWriter's staging buffer): odd sizes,
  // an empty tensor, tensors under 1 MiB between large ones, unaligned tensor boundaries.
  std::vector<int64_t> sizes = {3000001, 7, 0, 2333333, 1, 600000, 1048576};
  int64_t total = 0;
  for (int64_t n : sizes) total += n;
  float* image = static_cast<float*>(std::aligned_alloc(4096, static_cast<size_t>((total * 4 + 4095) / 4096 * 4096)));
  ASSERT_NE(image, nullptr);
  std::vector<SafetensorsTensor> specs;
  std::vector<const float*> at;
  int64_t off = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    for (int64_t i = 0; i < sizes[k]; ++i) image[off + i] = static_cast<float>((i * 2654435761u + k) % 1000003);
    SafetensorsTensor t;
    t.name = "img." + std::to_string(k);
    t.shape = {sizes[k]};
    specs.push_back(t);
    at.push_back(image + off);
    off += sizes[k];
  }
  std::string expect_data(reinterpret_cast<const char*>(image), static_cast<size_t>(total * 4));
  // 0: per tensor (write_next waits; the caller scribbles over each tensor once it returns),
  // 1: stable memory (one stream), 2: stable memory with the CRCs handed over
  for (int mode = 0; mode < 3; ++mode) {
    std::string path = (dir_ / ("img" + std::to_string(mode) + ".safetensors")).string();
    SafetensorsWriter w;
    {
      SafetensorsStableMemory stable(mode ? image : nullptr, mode ? total * 4 : 0);
      if (mode == 2)
        for (size_t k = 0; k < sizes.size(); ++k)
          stable.add_crc(at[k], sizes[k] * 4, crc32c_update(0, at[k], static_cast<size_t>(sizes[k] * 4)));
      ASSERT_TRUE(w.open(path, specs, {{"format", "smelt"}}).is_ok());
      std::vector<float> saved;
      for (size_t k = 0; k < sizes.size(); ++k) {
        ASSERT_TRUE(w.write_next(at[k]).is_ok()) << "mode " << mode << " tensor " << k;
        if (mode == 0) std::memset(const_cast<float*>(at[k]), 0xFF, static_cast<size_t>(sizes[k] * 4));
      }
      Status s = w.finish();
      ASSERT_TRUE(s.is_ok()) << s.message();
      if (mode == 0) std::memcpy(image, expect_data.data(), expect_data.size());  // restore
    }
    std::string bytes = test::read_file(path);
    ASSERT_EQ(static_cast<int64_t>(bytes.size()), w.file_bytes());
    EXPECT_EQ(crc32c_update(0, bytes.data(), bytes.size()), w.file_crc32c()) << "mode " << mode;
    SafetensorsReader rd;
    ASSERT_TRUE(rd.open(path).is_ok());
    ASSERT_EQ(rd.data_start() % 4096, 0);
    EXPECT_TRUE(bytes.compare(static_cast<size_t>(rd.data_start()), std::string::npos, expect_data) == 0)
        << "mode " << mode << ": the data differs from the image";
    for (size_t k = 0; k < sizes.size(); ++k) {
      const SafetensorsTensor& t = w.tensors()[k];
      EXPECT_EQ(crc32c_update(0, bytes.data() + t.begin, static_cast<size_t>(t.bytes())), t.crc32c)
          << "mode " << mode << " " << t.name;
    }
    // O_DIRECT works on the test folder's filesystem (not tmpfs): most bytes went without a copy
    int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT);
    if (fd >= 0) {
      ::close(fd);
      EXPECT_GT(w.direct_bytes(), (mode ? 95 : 80) * total * 4 / 100) << "mode " << mode;
    }
  }
  std::free(image);
}
