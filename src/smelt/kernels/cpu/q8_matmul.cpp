// q8_0 training GEMMs: dequantized tiles through gemm_f32 (q8_matmul.hpp).
#include "smelt/kernels/q8_matmul.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

#include <omp.h>

#include "smelt/kernels/kernels.hpp"

namespace smelt {

namespace {
// Rows of W per forward tile and input columns per backward block: large enough that the GEMM's
// repacking of the other operand (once per tile) stays small against the tile's work, small
// enough that two threads share a layer's tiles.
constexpr int kTileRows = 256, kBlockCols = 512;

// One thread's fp32 scratch, kept between calls.
float* scratch(size_t n) {
  thread_local std::vector<float> s;
  if (s.size() < n) s.resize(n);
  return s.data();
}

// W[o0:o1, c0:c1] as fp32 (o1-o0, c1-c0), c0 and c1 on block edges.
void dequantize_tile(float* out, const BlockQ8_0* w, int IC, int o0, int o1, int c0, int c1) {
  const int64_t nb = IC / kQ8Block;
  for (int o = o0; o < o1; o++)
    dequantize_row_q8_0(out + (int64_t)(o - o0) * (c1 - c0), w + o * nb + c0 / kQ8Block, c1 - c0);
}
}  // namespace

int64_t q8_matmul_scratch_floats(int max_ic) { return (int64_t)kTileRows * std::max(max_ic, kBlockCols); }

void matmul_forward_q8_0(float* out, const float* inp, const BlockQ8_0* w, int N, int IC, int OC, float beta) {
  const int tiles = (OC + kTileRows - 1) / kTileRows;
#pragma omp parallel for schedule(dynamic, 1)
  for (int k = 0; k < tiles; k++) {
    const int o0 = k * kTileRows, o1 = std::min(OC, o0 + kTileRows);
    float* t = scratch((size_t)kTileRows * IC);
    dequantize_tile(t, w, IC, o0, o1, 0, IC);
    gemm_f32(false, true, N, o1 - o0, IC, 1.0f, inp, IC, t, IC, beta, out + o0, OC);
  }
}

void matmul_backward_input_q8_0(float* dinp, const float* dout, const BlockQ8_0* w, int N, int IC, int OC) {
  const int blocks = (IC + kBlockCols - 1) / kBlockCols;
#pragma omp parallel for schedule(dynamic, 1)
  for (int b = 0; b < blocks; b++) {
    const int c0 = b * kBlockCols, c1 = std::min(IC, c0 + kBlockCols);
    float* t = scratch((size_t)kTileRows * kBlockCols);
    for (int o0 = 0; o0 < OC; o0 += kTileRows) {  // the sum over W's rows, in a fixed order
      const int o1 = std::min(OC, o0 + kTileRows);
      dequantize_tile(t, w, IC, o0, o1, c0, c1);
      gemm_f32(false, false, N, c1 - c0, o1 - o0, 1.0f, dout + o0, OC, t, c1 - c0, o0 == 0 ? 0.0f : 1.0f, dinp + c0, IC);
    }
  }
}

}  // namespace smelt
