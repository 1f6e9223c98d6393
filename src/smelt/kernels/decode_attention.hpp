// Single-query attention over a KV cache, the attention of a decode step (model/decoder.cpp): one
// query head of one row (or the group of query heads that share a kv head, which then reads the
// cache once) over the keys and values of positions 0..n-1 of its sequence, the cache
// held in fp32, IEEE half or bf16 (a batch-1 decode reads the whole cache every token, so 16-bit
// halves attention's bytes). An exact softmax in three passes over a score buffer:
//   s[j]  = scale * dot(q, k_j)         the dot: 8 lane sums (lane l: fma over e = l mod 8, in e
//                                       order, up to HS - HS % 8), vmath::hsum8's tree, then fma
//                                       over the tail; k_j widened exactly from the cache
//   m     = max_j s[j]
//   p[j]  = vmath exp(s[j] - m)         sum: 8 lane partial sums over j < n - n % 8, hsum8's
//                                       tree, then the tail in j order
//   out[e] = (sum_j p[j] v_j[e]) * (1 / sum)   fma in j order, element by element
// Each (row, head) is computed alone in that fixed order whatever the other rows or the threads:
// a decode stays batch invariant. The AVX2 + FMA + F16C path gives the scalar reference's bits
// (tested); it runs unless decode_linear's dispatch is on its portable path. Not the training
// attention (kernels.hpp: many queries, tiles, a backward).
#pragma once
#include <cstdint>

namespace smelt {

// How a KV cache holds its elements: fp32, IEEE binary16 bits (round to nearest even) or bf16
// bits (the upper half of an fp32, round to nearest even).
enum class KvFormat { kF32, kF16, kBf16 };
const char* kv_format_name(KvFormat f);  // "f32", "f16", "bf16"
int kv_format_bytes(KvFormat f);         // 4 or 2

// dst[0..n) = src[0..n) in format f (dst: float, or uint16_t bits for f16 and bf16).
void kv_store(void* dst, const float* src, int n, KvFormat f);

// out[0..HS) = softmax(scale * q . k_j) weighted sum of v_j over j < n (n >= 1). K and V point at
// the head's first position (elements of format f); position j of the head starts ld elements
// after position j-1. scores: n floats of scratch.
void decode_attention(float* out, const float* q, const void* K, const void* V, KvFormat f, int64_t ld,
                      int n, int HS, float scale, float* scores);
// Grouped-query attention: G query heads (1 <= G <= kMaxGroup) that share one kv head, head g's
// query at q + g HS and its output at out + g HS; each key and value is read once for the group.
// Head g's result is decode_attention's for that head alone, bit for bit. scores: G n floats.
constexpr int kMaxGroup = 64;
void decode_attention_group(float* out, const float* q, int G, const void* K, const void* V, KvFormat f,
                            int64_t ld, int n, int HS, float scale, float* scores);
// The scalar reference (same contract, the same bits).
void decode_attention_ref(float* out, const float* q, const void* K, const void* V, KvFormat f,
                          int64_t ld, int n, int HS, float scale, float* scores);

}  // namespace smelt
