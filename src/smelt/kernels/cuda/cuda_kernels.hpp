// CUDA kernels of the Llama-style decoder: the CPU kernels' names and arguments (kernels.hpp),
// over device pointers, each with a stream. The CPU kernels are the reference (tests/cuda/).
// This header needs no CUDA header: it compiles everywhere. When the build has no CUDA compiler,
// stub.cpp links instead: cuda::built() is false, device_count() is 0, and any op called anyway
// ends the process naming the op that is missing.
//
// Conventions: those of kernels.hpp (argument order outputs, saved, inputs, weights, dimensions;
// parameter gradients ADD, activation gradients overwrite, the residual stream's norm backward
// adds). Row-major. No kernel allocates; scratch is passed in. Every reduction runs in a fixed
// order (no floating-point atomics): the same inputs give the same bits on the same GPU.
#pragma once
#include <cstdint>
#include <string>

struct CUstream_st;  // cudaStream_t is CUstream_st*

namespace smelt::cuda {

using Stream = CUstream_st*;  // nullptr: the legacy default stream

// ---- runtime.cu: devices, memory, streams ------------------------------------------------------
bool built();                  // this build has the CUDA backend
int device_count();            // 0 when not built or no device/driver
std::string device_name(int device = 0);
// Selects the device; an error text (empty when fine).
std::string set_device(int device);
void* device_alloc(int64_t bytes);   // nullptr when it fails (cudaMalloc; never managed memory)
void device_free(void* p);
void* host_alloc_pinned(int64_t bytes);  // page-locked host memory for staging; nullptr on failure
void host_free_pinned(void* p);
void copy_to_device(void* dst, const void* src, int64_t bytes, Stream s);
void copy_to_host(void* dst, const void* src, int64_t bytes, Stream s);
void copy_device(void* dst, const void* src, int64_t bytes, Stream s);
void memset_device(void* p, int value, int64_t bytes, Stream s);
Stream stream_create();
void stream_destroy(Stream s);
// Waits for the stream; the error of anything that ran on it (empty when fine).
std::string stream_sync(Stream s);
// Events for timing: seconds between two records on a stream (after both completed).
struct Timer;
Timer* timer_create();
void timer_destroy(Timer* t);
void timer_start(Timer* t, Stream s);
double timer_stop_seconds(Timer* t, Stream s);  // synchronises
// A fixed set of events recorded in order on a stream, for per-op profiles: marks_record(m, i)
// records event i; marks_ms(m, i, j) the milliseconds between events i and j (after a sync).
struct Marks;
Marks* marks_create(int n);
void marks_destroy(Marks* m);
void marks_record(Marks* m, int i, Stream s);
float marks_ms(Marks* m, int i, int j);

// ---- gemm.cu: cuBLAS ---------------------------------------------------------------------------
// One cuBLAS handle bound to a stream; fp32 GEMMs run without TF32 (the exact path).
struct Blas;
Blas* blas_create(Stream s);  // nullptr when cuBLAS cannot be loaded (blas_error says why)
std::string blas_error();
void blas_destroy(Blas* b);
// C (M,N) = beta*C + alpha op(A) op(B), row-major fp32 (as kernels.hpp's gemm_f32).
void gemm_f32(Blas* b, bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
              const float* B, int ldb, float beta, float* C, int ldc);
// bf16 inputs (uint16_t: the upper half of an fp32), fp32 accumulation and C.
void gemm_bf16(Blas* b, bool ta, bool tb, int M, int N, int K, const uint16_t* A, int lda,
               const uint16_t* B, int ldb, float beta, float* C, int ldc);
// The linear layers, as kernels.hpp's matmul_* (weight (OC,IC), out = inp @ weight^T).
void matmul_forward(Blas* b, float* out, const float* inp, const float* weight, int N, int IC, int OC,
                    float beta);
void matmul_backward(Blas* b, float* dinp, float* dweight, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC);
// bf16: inp16 (N,IC) scratch, filled here; weight16 the weight in bf16.
void matmul_forward_bf16(Blas* b, float* out, uint16_t* inp16, const float* inp, const uint16_t* weight16,
                         int N, int IC, int OC, float beta);
// dout16 (N,OC), inp16 (N,IC) scratch, filled here.
void matmul_backward_bf16(Blas* b, float* dinp, float* dweight, uint16_t* dout16, uint16_t* inp16,
                          const float* dout, const float* inp, const uint16_t* weight16, int N, int IC,
                          int OC);
// out (n) = inp rounded to bf16 (nearest, ties to even), bit-equal to kernels.hpp's bf16_from_f32.
void bf16_from_f32(uint16_t* out, const float* inp, int64_t n, Stream s);

// ---- elementwise.cu ----------------------------------------------------------------------------
void embedding_forward(float* out, const int32_t* inp, const float* wte, int N, int C, int V, Stream s);
// dwte (V,C) += dout rows gathered per token. order (N): the row indices sorted by token (stable),
// starts (U+1) where each of the U distinct tokens' run begins, tokens (U) the token of each run:
// embedding_order() makes them on the host. Each token's rows are summed in row order.
void embedding_backward(float* dwte, const float* dout, const int32_t* order, const int32_t* starts,
                        const int32_t* tokens, int U, int C, Stream s);
// Host: the order/starts/tokens of embedding_backward for inp (N) over V tokens; returns U.
// order (N), starts (N+1), tokens (N) are host buffers; count (V) scratch.
int embedding_order(int32_t* order, int32_t* starts, int32_t* tokens, int32_t* count, const int32_t* inp,
                    int N, int V);
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps,
                     Stream s);
// dinp (N,C) += (residual stream); dweight (C) +=. scratch: rmsnorm_backward_scratch_floats(N, C).
int64_t rmsnorm_backward_scratch_floats(int N, int C);
void rmsnorm_backward(float* dinp, float* dweight, float* scratch, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int N, int C, Stream s);
// table (max_pos, HS/2, 2) from kernels.hpp's rope_table, copied to the device.
void rope_forward(float* x, const int32_t* pos, const float* table, int N, int T, int row_stride, int col0,
                  int nheads, int HS, Stream s);
void rope_backward(float* dx, const int32_t* pos, const float* table, int N, int T, int row_stride,
                   int col0, int nheads, int HS, Stream s);
void swiglu_forward(float* out, const float* gu, int N, int H, Stream s);
void swiglu_backward(float* dgu, const float* dout, const float* gu, int N, int H, Stream s);

// ---- attention.cu ------------------------------------------------------------------------------
// Causal grouped-query attention, flash-style (tiles of queries and keys in shared memory, online
// softmax; only the logsumexp is saved). Layouts as kernels.hpp's attention_forward: qkv
// (B,T,(NH+2*NKV)*HS), out (B,T,NH*HS), lse (B,NH,T), seg (B,T) or nullptr. HS <= 128, even.
void attention_forward(float* out, float* lse, const float* qkv, const int32_t* seg, int B, int T, int NH,
                       int NKV, int HS, Stream s);
// dqkv overwritten; delta (B,NH,T) scratch (rowsum(dout * out)). dq by query tiles, dk/dv by key
// tiles over their group's query heads: no atomics.
void attention_backward(float* dqkv, float* delta, const float* dout, const float* qkv, const float* out,
                        const float* lse, const int32_t* seg, int B, int T, int NH, int NKV, int HS,
                        Stream s);
// delta (B,NH,T) = rowsum(dout * out) per head in fp32, the first step of both backwards.
void attention_delta(float* delta, const float* dout, const float* out, int B, int T, int NH, int HS, Stream s);

// ---- attention_bf16.cu -------------------------------------------------------------------------
// The same attention on the tensor cores for bf16 mixed precision, with the rounding points of
// kernels.hpp's attention_forward_bf16 / attention_backward_bf16: every matrix product (Q K^T,
// P V; dO V^T, P^T dO, dS^T Q, dS K) on bf16 operands with fp32 sums; softmax, lse, D and dS's
// arithmetic in fp32. HS a multiple of 16, at most 128 (attention_bf16_supported). qkv16
// (B,T,QKV) and dout16 (B,T,NH*HS) scratch receive the bf16 copies (each call refills them).
bool attention_bf16_supported(int HS);
void attention_forward_bf16(float* out, float* lse, uint16_t* qkv16, const float* qkv, const int32_t* seg, int B,
                            int T, int NH, int NKV, int HS, Stream s);
void attention_backward_bf16(float* dqkv, float* delta, uint16_t* qkv16, uint16_t* dout16, const float* dout,
                             const float* qkv, const float* out, const float* lse, const int32_t* seg, int B, int T,
                             int NH, int NKV, int HS, Stream s);

// ---- loss_optim.cu -----------------------------------------------------------------------------
// losses (N) (0 where target is -1), lse (N); logits untouched.
void cross_entropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets, int N,
                           int V, Stream s);
// In place: logits become dloss * (softmax - onehot); rows with target -1 become 0.
void cross_entropy_backward(float* logits, const float* lse, const int32_t* targets, float dloss, int N,
                            int V, Stream s);
// out (K): the entropy (nats) of softmax(logits row rows[k]) = lse - sum p z, lse from
// cross_entropy_forward (kernels.hpp's softmax_entropy, one block per row).
void softmax_entropy_rows(float* out, const float* logits, const float* lse, const int32_t* rows, int K, int V,
                          Stream s);
// As kernels.hpp's adamw_step (torch.optim.AdamW order).
void adamw_step(float* param, float* m, float* v, const float* grad, int64_t n, float lr, float beta1,
                float beta2, float eps, float weight_decay, float grad_scale, int64_t t, Stream s);
// Sum of squares of grad (n) in double: per-4Ki-block partials (kGradNormBlock) on the device,
// copied into host_partials and summed there in block order (synchronises the stream). partials
// (device) and host_partials (host) hold grad_norm_scratch_doubles(n) doubles each.
int64_t grad_norm_scratch_doubles(int64_t n);
double grad_norm_squared(const float* grad, int64_t n, double* partials, double* host_partials, Stream s);

}  // namespace smelt::cuda
