// Decode-time linear layers (decode_linear.hpp): fp16 <-> fp32 in software, Q8_0 quantization
// (ggml's reference rounding), and fp32 / Q8_0 matrix-vector products for a few rows at a time.
// Not the training GEMMs (gemm.cpp, matmul.cpp).
#include "smelt/kernels/decode_linear.hpp"

#include <bit>
#include <cmath>
#include <cstring>

namespace smelt {

// ---- fp16 -----------------------------------------------------------------------------------
// Round to nearest, ties to even, on the bits; NaN keeps its sign and top 10 payload bits and
// comes out quiet, as F16C's vcvtps2ph does (the test compares with it).
uint16_t fp16_from_f32(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u | (uint16_t)((a >> 13) & 0x3ffu);  // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to infinity (and infinity)
  if (a >= 0x38800000u) {                       // >= 2^-14: a normal half
    const uint32_t r = a - 0x38000000u;         // exponent rebiased from 127 to 15
    uint32_t h = r >> 13;
    const uint32_t rem = r & 0x1fffu;
    h += (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ? 1u : 0u;  // a carry bumps the exponent
    return sign | (uint16_t)h;
  }
  // A subnormal half (or zero): value / 2^-24 rounded to an integer. Below 2^-25 it is 0.
  const uint32_t e = a >> 23;
  if (e < 102) return sign;
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const uint32_t s = 126 - e;  // 14..24
  uint32_t h = m >> s;
  const uint32_t rem = m & ((1u << s) - 1), half = 1u << (s - 1);
  h += (rem > half || (rem == half && (h & 1u))) ? 1u : 0u;  // 0x400 is the smallest normal
  return sign | (uint16_t)h;
}

// Exact (every half is a float); NaN comes out quiet with its payload, as F16C's vcvtph2ps.
float f32_from_fp16(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u));
  if (e == 0) return std::bit_cast<float>(sign | std::bit_cast<uint32_t>((float)m * 0x1p-24f));
  return std::bit_cast<float>(sign | ((e + 112) << 23) | (m << 13));
}

// ---- Q8_0 -----------------------------------------------------------------------------------
// ggml's quantize_row_q8_0_ref, operation for operation (so GGUF files we write hold the same
// bytes llama.cpp would): amax by (a > b ? a : b), d = amax / 127, id = d ? 1/d : 0,
// q = roundf(x * id) (half away from zero), d stored as fp16(d).
void quantize_row_q8_0(BlockQ8_0* out, const float* x, int64_t n) {
  for (int64_t b = 0; b < n / kQ8Block; b++) {
    const float* xb = x + b * kQ8Block;
    float amax = 0.0f;
    for (int j = 0; j < kQ8Block; j++) {
      const float v = std::fabs(xb[j]);
      amax = amax > v ? amax : v;
    }
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].d = fp16_from_f32(d);
    for (int j = 0; j < kQ8Block; j++) out[b].qs[j] = (int8_t)std::roundf(xb[j] * id);
  }
}

void dequantize_row_q8_0(float* out, const BlockQ8_0* in, int64_t n) {
  for (int64_t b = 0; b < n / kQ8Block; b++) {
    const float d = f32_from_fp16(in[b].d);
    for (int j = 0; j < kQ8Block; j++) out[b * kQ8Block + j] = (float)in[b].qs[j] * d;
  }
}

}  // namespace smelt
