// CRC32C: the SSE4.2 path (crc32 instructions on three interleaved streams, whose results are
// joined with crc32c_combine, so the 3-cycle latency is hidden; compiled for sse4.2 only in that
// function, chosen at run time) and the slicing-by-8 software path (Intel's table method);
// crc32c_copy is the SSE4.2 loop storing every word it reads.
// Both keep the reflected register inverted on entry and exit, as RFC 3720 specifies.
#include "smelt/ckpt/crc32c.hpp"

#include <nmmintrin.h>

#include <array>
#include <cstring>

namespace smelt {

namespace {

constexpr uint32_t kPolyReflected = 0x82F63B78u;

struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t{};
  constexpr Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPolyReflected : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
  }
};
constexpr Tables kTables{};

// a(x) * b(x) modulo the polynomial, bit-reflected (zlib's multmodp).
uint32_t multmodp(uint32_t a, uint32_t b) {
  uint32_t m = 1u << 31, p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = (b & 1) ? (b >> 1) ^ kPolyReflected : b >> 1;
  }
  return p;
}

// x^(2^k) modulo the polynomial, k = 0..31.
struct X2n {
  std::array<uint32_t, 32> t{};
  X2n() {
    uint32_t p = 1u << 30;  // x^1
    t[0] = p;
    for (int k = 1; k < 32; ++k) t[k] = p = multmodp(p, p);
  }
};

// x^(8 * n) modulo the polynomial: the operator that shifts a CRC past n zero bytes.
uint32_t x8nmodp(uint64_t n) {
  static const X2n x2n;
  uint32_t p = 1u << 31;  // x^0
  unsigned k = 3;
  while (n) {
    if (n & 1) p = multmodp(x2n.t[k & 31], p);
    n >>= 1;
    ++k;
  }
  return p;
}

// Interleaved block for the hardware path: three streams of kLane bytes each.
constexpr size_t kLane = 8192;

bool detect_hw() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}

}  // namespace

uint32_t crc32c_update_sw(uint32_t crc, const void* data, size_t n) {
  const auto& t = kTables.t;
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  while (n && (reinterpret_cast<uintptr_t>(p) & 7)) {
    c = t[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    --n;
  }
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);  // little-endian host (x86): byte 0 is the low byte
    w ^= c;
    c = t[7][w & 0xFF] ^ t[6][(w >> 8) & 0xFF] ^ t[5][(w >> 16) & 0xFF] ^ t[4][(w >> 24) & 0xFF] ^
        t[3][(w >> 32) & 0xFF] ^ t[2][(w >> 40) & 0xFF] ^ t[1][(w >> 48) & 0xFF] ^ t[0][w >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) c = t[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
  return ~c;
}

// Three interleaved lanes of the crc32 instruction, combined by multiplication mod P; with kCopy
// every word read is also stored to dst (one pass over src instead of memcpy + CRC).
template <bool kCopy>
__attribute__((target("sse4.2"))) uint32_t crc32c_hw(uint32_t crc, void* dst, const void* src, size_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  auto* q = static_cast<uint8_t*>(dst);
  uint64_t c = ~crc;
  while (n && (reinterpret_cast<uintptr_t>(p) & 7)) {
    if constexpr (kCopy) *q++ = *p;
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
    --n;
  }
  if (n >= 3 * kLane) {
    static const uint32_t shift = x8nmodp(kLane);
    while (n >= 3 * kLane) {
      uint64_t a = c, b = 0xFFFFFFFFu, d = 0xFFFFFFFFu;  // b, d: fresh CRCs of lanes 2 and 3
      for (size_t i = 0; i < kLane; i += 8) {
        uint64_t wa, wb, wd;
        std::memcpy(&wa, p + i, 8);
        std::memcpy(&wb, p + kLane + i, 8);
        std::memcpy(&wd, p + 2 * kLane + i, 8);
        if constexpr (kCopy) {
          std::memcpy(q + i, &wa, 8);
          std::memcpy(q + kLane + i, &wb, 8);
          std::memcpy(q + 2 * kLane + i, &wd, 8);
        }
        a = _mm_crc32_u64(a, wa);
        b = _mm_crc32_u64(b, wb);
        d = _mm_crc32_u64(d, wd);
      }
      uint32_t ab = multmodp(shift, ~static_cast<uint32_t>(a)) ^ ~static_cast<uint32_t>(b);
      c = ~(multmodp(shift, ab) ^ ~static_cast<uint32_t>(d));
      p += 3 * kLane;
      if constexpr (kCopy) q += 3 * kLane;
      n -= 3 * kLane;
    }
  }
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    if constexpr (kCopy) {
      std::memcpy(q, &w, 8);
      q += 8;
    }
    c = _mm_crc32_u64(c, w);
    p += 8;
    n -= 8;
  }
  while (n--) {
    if constexpr (kCopy) *q++ = *p;
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
  }
  return ~static_cast<uint32_t>(c);
}

uint32_t crc32c_update_hw(uint32_t crc, const void* data, size_t n) { return crc32c_hw<false>(crc, nullptr, data, n); }

uint32_t crc32c_copy_hw(uint32_t crc, void* dst, const void* src, size_t n) { return crc32c_hw<true>(crc, dst, src, n); }

uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  return multmodp(x8nmodp(len_b), crc_a) ^ crc_b;
}

bool crc32c_hw_available() {
  static const bool hw = detect_hw();  // function-local: safe from static-init order
  return hw;
}

uint32_t crc32c_update(uint32_t crc, const void* data, size_t n) {
  return crc32c_hw_available() ? crc32c_update_hw(crc, data, n) : crc32c_update_sw(crc, data, n);
}

uint32_t crc32c_copy(uint32_t crc, void* dst, const void* src, size_t n) {
  if (crc32c_hw_available()) return crc32c_copy_hw(crc, dst, src, n);
  std::memcpy(dst, src, n);
  return crc32c_update_sw(crc, dst, n);
}

}  // namespace smelt
