// The training GEMMs of a frozen linear layer held in q8_0 (a LoRA run's base, QLoRA's idea with
// our int8 blocks): the weight (OC, IC) as OC rows of IC/32 BlockQ8_0 (decode_linear.hpp) is
// dequantized a tile at a time into fp32 scratch and multiplied with gemm_f32. Forward and the
// input's gradient only (a frozen weight has no gradient). Tiles are fixed by the shape, so the
// bits do not depend on the thread count; the result equals an fp32 GEMM on the dequantized
// weight up to the GEMM's summation order. Not the decoding kernels (decode_linear.hpp).
#pragma once
#include "smelt/kernels/decode_linear.hpp"

namespace smelt {

// out (N, OC) = beta * out + inp (N, IC) @ W^T. IC % 32 == 0.
void matmul_forward_q8_0(float* out, const float* inp, const BlockQ8_0* w, int N, int IC, int OC, float beta);
// dinp (N, IC) = dout (N, OC) @ W (overwritten). IC % 32 == 0.
void matmul_backward_input_q8_0(float* dinp, const float* dout, const BlockQ8_0* w, int N, int IC, int OC);

// The fp32 tile scratch each thread keeps for these (thread-local, reused): for in-features up to max_ic.
int64_t q8_matmul_scratch_floats(int max_ic);

}  // namespace smelt
