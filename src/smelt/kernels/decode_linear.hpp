// Linear layers for decoding a few rows at a time (KV-cache inference, `smelt serve`'s batches),
// in fp32, in f16 (IEEE half weights, fp32 arithmetic), in bf16 (bf16 weights, fp32 arithmetic)
// and in Q8_0 (int8 weights and activations in blocks of 32 with one fp16 scale, the layout GGUF
// files use). Batch invariant by construction: every output element is computed by
// the same instructions in the same order whatever the number of rows n, the thread count or the
// other rows, so a sequence decodes to the same bits alone or in any batch. Runtime dispatch:
// AVX-512 (VNNI for int8) where the CPU has it, else AVX2; a portable scalar path is the
// reference each is tested against. Not the training GEMMs (kernels.hpp, gemm.cpp).
#pragma once
#include <cstdint>

namespace smelt {

// ---- Q8_0 -----------------------------------------------------------------------------------
constexpr int kQ8Block = 32;
// 34 bytes: scale d (IEEE fp16 bits) then 32 int8 values; value i = d * qs[i].
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQ8Block];
};
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 blocks are 34 bytes, as in GGUF");

// IEEE 754 binary16 <-> binary32, round to nearest even (fp16 infinities/NaN preserved).
uint16_t fp16_from_f32(float x);
float f32_from_fp16(uint16_t h);

// The reference rounding, byte for byte ggml's quantize_row_q8_0_ref: per block amax = max |x|,
// d = amax / 127, id = d ? 1/d : 0, q = roundf(x * id) (half away from zero), the scale stored
// as fp16(d); an all-zero block has d = 0, q = 0, and no q is -128. n % kQ8Block == 0.
// quantize(dequantize(b)) == b for any block made here whose fp16 scale is neither 0 nor
// infinite (amax within about [4e-6, 8e6]). Dequantize: value i = fp32(d) * qs[i].
void quantize_row_q8_0(BlockQ8_0* out, const float* x, int64_t n);
void dequantize_row_q8_0(float* out, const BlockQ8_0* in, int64_t n);

// ---- the linear layers ------------------------------------------------------------------------
// out (n, ldo) = beta * out + inp (n, IC) @ W^T with W (OC, IC) row-major (the nn.Linear layout):
// out[r][o] = beta * out[r][o] + dot(inp[r], W[o]). beta is 0 or 1 (1: the residual add; with
// beta 0, out is not read). Parallel over fixed blocks of output columns with the current OpenMP
// team (kernels_set_threads). The dot is 16 lane sums (lane j: fma over k = j mod 16, in k order,
// up to IC - IC % 16), a fixed halving tree of the lanes, then fma over the IC % 16 tail; then
// out = beta ? fma(beta, out, dot) : dot. decode_linear.cpp spells out both formulas.
void decode_linear_f32(float* out, int ldo, const float* inp, const float* W, int n, int IC, int OC,
                       float beta);
// f16: W (OC, IC) IEEE half bits (half the bytes of fp32), widened exactly to fp32 as they are
// loaded: the fp32 formula on the widened weights, so out equals decode_linear_f32's on them bit
// for bit. inp is fp32 (the decoder's f16 format rounds it to half first: round_to_fp16).
void decode_linear_f16(float* out, int ldo, const float* inp, const uint16_t* W, int n, int IC, int OC,
                       float beta);
// out[i] = fp32(fp16(x[i])), round to nearest even (the inputs of an f16 linear layer).
void round_to_fp16(float* out, const float* x, int64_t n);
// bf16: W (OC, IC) bf16 bits (the upper half of an fp32: half the bytes of fp32), widened exactly
// (a shift) as they are loaded: the fp32 formula on the widened weights, so out equals
// decode_linear_f32's on them bit for bit. inp is fp32 (the decoder's bf16 format rounds it to
// bf16 first: round_to_bf16).
void decode_linear_bf16(float* out, int ldo, const float* inp, const uint16_t* W, int n, int IC, int OC,
                        float beta);
// out[i] = fp32(bf16(x[i])), round to nearest even, NaN kept (the inputs of a bf16 linear layer;
// bf16_round_f32's rounding, as the weights' copy and the training GEMMs round).
void round_to_bf16(float* out, const float* x, int64_t n);
// Q8_0: xq (n, IC/32 blocks) the rows quantized by quantize_row_q8_0 (so no -128 in them), Wq
// (OC, IC/32 blocks), any int8 including -128 (blocks from foreign GGUF files). IC % 32 == 0.
// out[r][o] = beta * out[r][o] + sum over blocks b of fp16(Wd) * fp16(xd) * (int32 sum of the
// 32 int8 products of block b), the block sums added in block order:
// acc = fma(fp32(Wd) * fp32(xd), (float)isum, acc), the product of the two scales exact in fp32.
void decode_linear_q8_0(float* out, int ldo, const BlockQ8_0* xq, const BlockQ8_0* Wq, int n, int IC,
                        int OC, float beta);

// The scalar references (same contract; the fp32 one sums in the lane order the vector paths use
// so that it matches them exactly, see decode_linear.cpp).
void decode_linear_f32_ref(float* out, int ldo, const float* inp, const float* W, int n, int IC,
                           int OC, float beta);
void decode_linear_f16_ref(float* out, int ldo, const float* inp, const uint16_t* W, int n, int IC, int OC,
                           float beta);
void decode_linear_bf16_ref(float* out, int ldo, const float* inp, const uint16_t* W, int n, int IC, int OC,
                            float beta);
void decode_linear_q8_0_ref(float* out, int ldo, const BlockQ8_0* xq, const BlockQ8_0* Wq, int n,
                            int IC, int OC, float beta);

// What the dispatch chose ("avx512-vnni", "avx2", "portable"), and a switch for tests and
// benchmarks: force the portable path (true) or go back to the CPU's best (false).
// avx512-vnni needs AVX512F/BW/VL and AVX512-VNNI (both kernels then run on AVX-512); avx2 needs
// AVX2, FMA and F16C. A CPU with AVX-512 but no VNNI runs the avx2 paths.
const char* decode_linear_isa();
void decode_linear_set_portable(bool portable);
// Force one path (tests compare them on one machine); false, and nothing changes, when the CPU
// lacks it.
enum class DecodeIsa : int { kPortable = 0, kAvx2 = 1, kAvx512Vnni = 2 };
bool decode_linear_set_isa(DecodeIsa isa);
// The path the decode kernels take now (decode_attention follows it: its vector path unless portable).
DecodeIsa decode_linear_current_isa();

}  // namespace smelt
