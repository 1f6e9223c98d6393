// CRC32C against the RFC 3720 (B.4) test vectors, streaming in pieces and crc32c_combine equal to
// one pass, the SSE4.2 path (three interleaved lanes from 24 KiB up) equal to the table path on
// random buffers of odd lengths and alignments, and crc32c_copy equal to memcpy + CRC.
#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "smelt/ckpt/crc32c.hpp"

using namespace smelt;

namespace {

std::vector<uint8_t> bytes_of(int n, int (*f)(int)) {
  std::vector<uint8_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(f(i));
  return v;
}

}  // namespace

TEST(Crc32c, Rfc3720Vectors) {
  using Fn = uint32_t (*)(uint32_t, const void*, size_t);
  std::vector<Fn> impls = {crc32c_update, crc32c_update_sw};
  if (crc32c_hw_available()) impls.push_back(crc32c_update_hw);
  for (Fn f : impls) {
    EXPECT_EQ(f(0, "123456789", 9), 0xE3069283u);
    EXPECT_EQ(f(0, "", 0), 0u);
    auto zeros = bytes_of(32, [](int) { return 0; });
    auto ones = bytes_of(32, [](int) { return 0xFF; });
    auto inc = bytes_of(32, [](int i) { return i; });
    auto dec = bytes_of(32, [](int i) { return 31 - i; });
    EXPECT_EQ(f(0, zeros.data(), 32), 0x8A9136AAu);
    EXPECT_EQ(f(0, ones.data(), 32), 0x62A8AB43u);
    EXPECT_EQ(f(0, inc.data(), 32), 0x46DD794Eu);
    EXPECT_EQ(f(0, dec.data(), 32), 0x113FDB5Cu);
  }
}

TEST(Crc32c, StreamingEqualsOnePass) {
  std::mt19937 rng(7);
  std::vector<uint8_t> buf(10007);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  uint32_t whole = crc32c_update(0, buf.data(), buf.size());
  for (size_t cut : {size_t{0}, size_t{1}, size_t{7}, size_t{4096}, size_t{10006}, buf.size()}) {
    uint32_t c = crc32c_update(0, buf.data(), cut);
    EXPECT_EQ(crc32c_update(c, buf.data() + cut, buf.size() - cut), whole) << "cut at " << cut;
  }
  uint32_t c = 0;
  for (size_t i = 0; i < buf.size(); i += 13) c = crc32c_update_sw(c, buf.data() + i, std::min<size_t>(13, buf.size() - i));
  EXPECT_EQ(c, whole);
}

TEST(Crc32c, CombineEqualsOnePass) {
  std::mt19937 rng(3);
  std::vector<uint8_t> buf(200000);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  uint32_t whole = crc32c_update_sw(0, buf.data(), buf.size());
  for (size_t cut : {size_t{0}, size_t{1}, size_t{8191}, size_t{65536}, size_t{199999}, buf.size()}) {
    uint32_t a = crc32c_update_sw(0, buf.data(), cut), b = crc32c_update_sw(0, buf.data() + cut, buf.size() - cut);
    EXPECT_EQ(crc32c_combine(a, b, buf.size() - cut), whole) << "cut at " << cut;
  }
}

TEST(Crc32c, HardwareEqualsSoftwareOnOddLengthsAndAlignments) {
  if (!crc32c_hw_available()) GTEST_SKIP() << "no SSE4.2 on this CPU";
  std::mt19937 rng(11);
  std::vector<uint8_t> buf(1 << 17);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (int i = 0; i < 2000; ++i) {
    size_t off = rng() % 64, len = rng() % (buf.size() - 64);
    if (i < 64) len = static_cast<size_t>(i);  // every short length
    uint32_t seed = (i % 3 == 0) ? 0 : static_cast<uint32_t>(rng());
    ASSERT_EQ(crc32c_update_hw(seed, buf.data() + off, len), crc32c_update_sw(seed, buf.data() + off, len))
        << "offset " << off << " length " << len;
  }
}

TEST(Crc32c, CopyCopiesAndEqualsTheCrcOfTheBytes) {
  // crc32c_copy (the writers' fused copy + CRC) against memcpy + the table path, both dispatches,
  // odd lengths (short ones, and ones past the 24 KiB three-lane block) and misaligned ends
  using Fn = uint32_t (*)(uint32_t, void*, const void*, size_t);
  std::vector<Fn> impls = {crc32c_copy};
  if (crc32c_hw_available()) impls.push_back(crc32c_copy_hw);
  std::mt19937 rng(5);
  std::vector<uint8_t> src(1 << 17), dst(src.size() + 64);
  for (auto& b : src) b = static_cast<uint8_t>(rng());
  for (Fn f : impls) {
    for (int i = 0; i < 600; ++i) {
      size_t soff = rng() % 64, doff = rng() % 64, len = rng() % (src.size() - 64);
      if (i < 64) len = static_cast<size_t>(i);
      uint32_t seed = (i % 3 == 0) ? 0 : static_cast<uint32_t>(rng());
      std::fill(dst.begin(), dst.end(), 0xA5);
      uint32_t c = f(seed, dst.data() + doff, src.data() + soff, len);
      ASSERT_EQ(c, crc32c_update_sw(seed, src.data() + soff, len)) << "offset " << soff << " length " << len;
      ASSERT_TRUE(std::equal(src.begin() + soff, src.begin() + soff + len, dst.begin() + doff)) << "length " << len;
      ASSERT_EQ(dst[doff + len], 0xA5) << "wrote past the end, length " << len;
      if (doff > 0) {
        ASSERT_EQ(dst[doff - 1], 0xA5);
      }
    }
  }
}
