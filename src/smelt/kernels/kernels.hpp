// CPU kernels of the Llama-style decoder: pure functions over raw fp32 pointers with explicit
// shapes, forward and backward side by side (one .cpp per op family in cpu/), each with a naive
// `_ref` twin used as the test oracle. Not the model (model/), not the optimizer loop (train/).
//
// Conventions (docs/model.md):
//  - Argument order: outputs, saved-for-backward buffers, inputs, weights, then dimensions.
//    Gradient arguments carry a `d` prefix.
//  - Dimension letters: B batch, T time, C channels, V vocab, NH query heads, NKV key/value heads,
//    HS head size, H SwiGLU hidden size, N = B*T rows. Row-major; a weight (OC,IC) maps IC -> OC
//    (out = inp @ weight^T, the PyTorch nn.Linear layout).
//
// THE GRADIENT CONTRACT
//  - Parameter gradients ACCUMULATE (+=): micro-batch accumulation is free; zero them per step.
//  - Activation gradients OVERWRITE, except on the residual stream: rmsnorm_backward ADDS into
//    `dinp` because a norm's input is always the residual stream, whose gradient already holds the
//    skip connection's contribution. (In the forward, matmul_forward with beta 1 is the residual
//    add.) Cross-entropy backward turns the logits into dlogits in place.
//  - A kernel never allocates on the heap, reads files, looks at configs or calls MPI. Fixed-size
//    scratch lives on the stack; anything sized by the problem is passed in.
//  - Threads: kernels parallelise with OpenMP over the current team size (omp_set_num_threads,
//    set by the caller); GEMMs call single-threaded OpenBLAS inside OpenMP loops on fixed blocks,
//    so there is one thread pool. Every reduction has a fixed order and every GEMM a fixed shape
//    independent of the thread count, so results are bit-identical for any number of threads.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace smelt {

// Sets OpenMP to `threads` threads and OpenBLAS to 1 (one pool; see docs/model.md "Threads").
void kernels_set_threads(int threads);

// ---- embedding.cpp --------------------------------------------------------------------------
// out (N,C) = wte[inp[n]]
void embedding_forward(float* out, const int32_t* inp, const float* wte, int N, int C, int V);
// dwte (V,C) += scatter of dout (N,C) by token (deterministic: each thread owns channel ranges)
void embedding_backward(float* dwte, const float* dout, const int32_t* inp, int N, int C, int V);
void embedding_forward_ref(float* out, const int32_t* inp, const float* wte, int N, int C, int V);
void embedding_backward_ref(float* dwte, const float* dout, const int32_t* inp, int N, int C, int V);

// ---- rmsnorm.cpp ----------------------------------------------------------------------------
// out (N,C) = inp * rstd * weight, rstd (N) = 1/sqrt(mean(inp^2) + eps)  [Zhang & Sennrich 2019]
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                     float eps);
// dinp (N,C) += (residual stream), dweight (C) +=
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int N, int C);
void rmsnorm_forward_ref(float* out, float* rstd, const float* inp, const float* weight, int N,
                         int C, float eps);
void rmsnorm_backward_ref(float* dinp, float* dweight, const float* dout, const float* inp,
                          const float* weight, const float* rstd, int N, int C);

// Per-head RMSNorm (QK-norm): heads [0,nheads) of size HS starting at column col0 of each row of
// x (N, row_stride), normalised in place with one weight (HS) shared by the heads. raw (N,
// nheads*HS) keeps the input and rstd (N*nheads) its scale for backward.
void head_rmsnorm_forward(float* x, float* raw, float* rstd, const float* weight, int N, int row_stride,
                          int col0, int nheads, int HS, float eps);
// dx: the same heads of the gradient, in place from d(normalised) to d(raw) (OVERWRITES: the
// heads are not the residual stream); dweight (HS) +=.
void head_rmsnorm_backward(float* dx, float* dweight, const float* raw, const float* weight, const float* rstd,
                           int N, int row_stride, int col0, int nheads, int HS);
void head_rmsnorm_forward_ref(float* x, float* raw, float* rstd, const float* weight, int N, int row_stride,
                              int col0, int nheads, int HS, float eps);
void head_rmsnorm_backward_ref(float* dx, float* dweight, const float* raw, const float* weight,
                               const float* rstd, int N, int row_stride, int col0, int nheads, int HS);

// ---- bias.cpp -------------------------------------------------------------------------------
// out (N,OC) += bias (OC) on every row; dbias (OC) += the column sums of dout (N,OC), each column
// summed over the rows in order (the same bits for any thread count).
void bias_forward(float* out, const float* bias, int N, int OC);
void bias_backward(float* dbias, const float* dout, int N, int OC);

// ---- rope.cpp -------------------------------------------------------------------------------
// Rotary embedding [Su et al. 2021] in the Hugging Face Llama "rotate_half" layout: in each head,
// element i pairs with i + HS/2, angle = pos * inv_freq[i % (HS/2)] (theta^(-2i/HS) unscaled:
// rope_theta_freq; the model's scaled ones: rope_inv_freq in model/config.hpp).
// table (max_pos, HS/2, 2): cos, sin interleaved, filled once by rope_table.
std::vector<double> rope_theta_freq(int HS, double theta);
void rope_table(float* table, int max_pos, int HS, const double* inv_freq);
// x (N, row_stride): heads [0,nheads) of size HS start at column col0 of each row; rotated in
// place. pos (N) positions (nullptr: n % T). Backward is the inverse rotation, also in place.
void rope_forward(float* x, const int32_t* pos, const float* table, int N, int T, int row_stride,
                  int col0, int nheads, int HS);
void rope_backward(float* dx, const int32_t* pos, const float* table, int N, int T,
                   int row_stride, int col0, int nheads, int HS);
void rope_forward_ref(float* x, const int32_t* pos, int N, int T, int row_stride, int col0,
                      int nheads, int HS, const double* inv_freq);
void rope_backward_ref(float* dx, const int32_t* pos, int N, int T, int row_stride, int col0,
                       int nheads, int HS, const double* inv_freq);

// ---- attention.cpp --------------------------------------------------------------------------
// Causal grouped-query attention, flash-style [Dao et al. 2022]: 64x64 query/key tiles (one small
// sgemm per tile product) with an online softmax; memory linear in T (only the logsumexp is
// saved, never a (T,T) matrix). T need not be a multiple of the tile.
// qkv (B,T,(NH+2*NKV)*HS): q heads, then k heads, then v heads on each row (post-RoPE).
// out (B,T,NH*HS); lse (B,NH,T) saved; seg (B,T) optional document ids: a query attends only to
// keys of its own segment (nullptr: plain causal). Query head h reads kv head h / (NH/NKV).
void attention_forward(float* out, float* lse, const float* qkv, const int32_t* seg, int B, int T,
                       int NH, int NKV, int HS);
// dqkv (B,T,(NH+2*NKV)*HS) overwritten. One pass over tiles per (batch, kv head) task, which owns
// the dq rows of its group's query heads and its dk, dv rows: no atomics, no second pass, sums in
// a fixed order, so results do not depend on the thread count. Recomputes P from lse
// (FlashAttention-2).
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, const int32_t* seg, int B, int T, int NH, int NKV,
                        int HS);
// Reference: materialises the (T,T) probabilities per head; scratch (T*T) floats; T <= 4096.
void attention_forward_ref(float* out, const float* qkv, const int32_t* seg, float* scratch, int B,
                           int T, int NH, int NKV, int HS);
void attention_backward_ref(float* dqkv, const float* dout, const float* qkv, const int32_t* seg,
                            float* scratch, int B, int T, int NH, int NKV, int HS);

// ---- gemm.cpp: the GEMM back ends ------------------------------------------------------------
// fp32 GEMMs (every linear layer, every precision's fp32 parts) run on the back end set here,
// chosen once per process by machine/gemm_select (a measurement at the model's shapes). BLIS is
// opened at run time (Debian's libblis4-serial, else its OpenMP or pthread build, each run on one
// thread): a machine without it runs the other two.
enum class GemmBackend : int { kOpenBlas = 0, kOneDnn = 1, kBlis = 2 };
void gemm_set_backend(GemmBackend b);  // BLIS where it is not installed: OpenBLAS
GemmBackend gemm_backend();
const char* gemm_backend_name(GemmBackend b);
bool gemm_backend_available(GemmBackend b);  // OpenBLAS and oneDNN always (linked); BLIS if installed
std::string gemm_blis_library();             // the BLIS library opened and its kernels ("" where none)
// C (M,N) = beta*C + alpha op(A) op(B), row-major fp32; one thread (callers tile over OpenMP).
void gemm_f32(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
              const float* B, int ldb, float beta, float* C, int ldc);
// bf16 GEMM: A, B bf16 (the upper half of an fp32, uint16_t), fp32 accumulation, C fp32; one
// thread. gemm_bf16 runs oneDNN's matmul when the CPU has bf16 units (AMX, AVX512-BF16), else
// the portable path, which computes the same products (exact in fp32) with fp32 sums in another
// order: the two agree to fp32 rounding, not bit for bit.
void gemm_bf16(bool ta, bool tb, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B,
               int ldb, float beta, float* C, int ldc);
void gemm_bf16_onednn(bool ta, bool tb, int M, int N, int K, const uint16_t* A, int lda,
                      const uint16_t* B, int ldb, float beta, float* C, int ldc);
// The bf16 engines run with beta 0 (overwrite) or 1 (accumulate), the two the model uses: any
// other beta scales C (M,N) here first, and 1 is returned; 0 and 1 come back unchanged.
float gemm_bf16_prescale(float beta, int M, int N, float* C, int ldc);
void gemm_bf16_portable(bool ta, bool tb, int M, int N, int K, const uint16_t* A, int lda,
                        const uint16_t* B, int ldb, float beta, float* C, int ldc);
// Smelt's own bf16 GEMM (gemm_bf16_packed.cpp): both operands packed, an AVX512-BF16 (vdpbf16ps)
// micro-kernel; threads itself outside an OpenMP team, one thread inside one. Each element's sum
// has a fixed order, so the bits depend on the shape only. Only where available() is true.
void gemm_bf16_packed(bool ta, bool tb, int M, int N, int K, const uint16_t* A, int lda,
                      const uint16_t* B, int ldb, float beta, float* C, int ldc);
bool gemm_bf16_packed_available();  // the CPU has AVX512-BF16 (and AVX512-BW)
// The packing buffers (bytes) one thread of the packed kernel needs for a call of this shape; a
// thread keeps the largest it has needed between calls.
int64_t gemm_bf16_packed_scratch_bytes(int M, int N, int K);
// Which bf16 engine each linear layer's product runs on, where the CPU has bf16 units: chosen per
// layer shape (in, out) and product by machine/gemm_select's measurement; oneDNN where nothing
// was chosen (and for every other bf16 GEMM: attention's, the decoder's). Set before a run's
// GEMMs start (not while they run).
enum class Bf16Engine : int { kOneDnn = 0, kPacked = 1 };
enum class LinearProduct : int { kForward = 0, kDinp = 1, kDweight = 2 };
// The packed kernel packs the weight again on every call, so a forward or dinp of fewer input rows
// than this stays on oneDNN whatever was chosen (the LM head's 64-row blocks in bf16 training, the
// decoder's few rows): bench/kernels/gemm_engines_bench --only lm_head, Zen 5, bench-small's head,
// the packed forward against oneDNN: 0.66x at 64 rows, 0.84x at 128, 0.87x at 256, 0.99x at 512.
// dweight packs two activations, never a weight: any row count.
constexpr int kBf16PackedMinRows = 256;
// The engine a linear layer's product with `rows` input rows runs on (the choice, and the rule above).
Bf16Engine gemm_bf16_engine_for(int rows, int IC, int OC, LinearProduct p);
const char* bf16_engine_name(Bf16Engine e);
void gemm_bf16_set_engine(int IC, int OC, LinearProduct p, Bf16Engine e);
Bf16Engine gemm_bf16_engine(int IC, int OC, LinearProduct p);
void gemm_bf16_clear_engines();
// gemm_bf16 on engine e (oneDNN or packed) where the CPU has bf16 units; the portable path
// otherwise, whatever e says.
void gemm_bf16_on(Bf16Engine e, bool ta, bool tb, int M, int N, int K, const uint16_t* A, int lda,
                  const uint16_t* B, int ldb, float beta, float* C, int ldc);
bool gemm_bf16_native();          // oneDNN reports bf16 units (avx512_core_bf16 or amx)
const char* gemm_bf16_isa();      // what gemm_bf16 runs on, for reports
void gemm_bf16_set_portable(bool portable);  // tests and benchmarks: force the portable path
// out (n) = inp rounded to bf16 (nearest, ties to even; NaN stays NaN). OpenMP over fixed blocks.
void bf16_from_f32(uint16_t* out, const float* inp, int64_t n);
void f32_from_bf16(float* out, const uint16_t* inp, int64_t n);
void bf16_from_f32_serial(uint16_t* out, const float* inp, int64_t n);  // one thread (inside a team)
float bf16_round_f32(float x);    // x rounded to the nearest bf16, as an fp32

// ---- attention_bf16.cpp ---------------------------------------------------------------------
// The same attention for bf16 mixed precision: every matrix product (Q K^T, P V and the backward
// dO V^T, P^T dO, dS^T Q, dS K) on bf16 inputs with fp32 sums; softmax, its gradient, lse and D in
// fp32. Blocked by 128 query rows meeting all their visible keys in one GEMM. qkv16 (B,T,QKV) and
// dout16 (B,T,NH*HS) scratch receive the bf16 copies; scratch holds
// attention_bf16_scratch_floats(T, threads) floats (per thread: scores, their gradient and bf16
// copies of a block). Same arguments otherwise as attention_forward / attention_backward.
int64_t attention_bf16_scratch_floats(int T, int threads);
void attention_forward_bf16(float* out, float* lse, uint16_t* qkv16, float* scratch, const float* qkv,
                            const int32_t* seg, int B, int T, int NH, int NKV, int HS);
void attention_backward_bf16(float* dqkv, uint16_t* qkv16, uint16_t* dout16, float* scratch,
                             const float* dout, const float* qkv, const float* out, const float* lse,
                             const int32_t* seg, int B, int T, int NH, int NKV, int HS);

// ---- matmul.cpp -----------------------------------------------------------------------------
// out (N,OC) = beta*out + inp (N,IC) @ weight(OC,IC)^T. beta 1 adds into out (the residual add).
void matmul_forward(float* out, const float* inp, const float* weight, int N, int IC, int OC,
                    float beta = 0.0f);
// dinp (N,IC) = dout @ weight (overwrite; skipped when dinp is nullptr); dweight (OC,IC) +=
// dout^T @ inp (skipped when dweight is nullptr: a frozen weight). The bf16 and reference
// versions likewise.
void matmul_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC);
// bf16 mixed precision: the same products with bf16 inputs and fp32 accumulation and outputs.
// inp16 (N,IC) scratch, filled here with inp rounded to bf16; weight16 (OC,IC) the weight in bf16.
void matmul_forward_bf16(float* out, uint16_t* inp16, const float* inp, const uint16_t* weight16,
                         int N, int IC, int OC, float beta = 0.0f);
// dout16 (N,OC) and inp16 (N,IC) scratch, filled here (the forward's inp16 may be reused by the
// caller, this kernel refills it); dout nullptr: dout16 already holds the gradient in bf16 (from
// cross_entropy_backward_bf16). dinp and dweight in fp32 as matmul_backward.
void matmul_backward_bf16(float* dinp, float* dweight, uint16_t* dout16, uint16_t* inp16,
                          const float* dout, const float* inp, const uint16_t* weight16, int N,
                          int IC, int OC);
void matmul_forward_ref(float* out, const float* inp, const float* weight, int N, int IC, int OC,
                        float beta = 0.0f);
// References of the bf16 kernels: inputs rounded to bf16, sums in double.
void matmul_forward_bf16_ref(float* out, const float* inp, const uint16_t* weight16, int N, int IC,
                             int OC, float beta = 0.0f);
void matmul_backward_bf16_ref(float* dinp, float* dweight, const float* dout, const float* inp,
                              const uint16_t* weight16, int N, int IC, int OC);
void matmul_backward_ref(float* dinp, float* dweight, const float* dout, const float* inp,
                         const float* weight, int N, int IC, int OC);

// ---- swiglu.cpp -----------------------------------------------------------------------------
// SwiGLU [Shazeer 2020]: out (N,H) = silu(gu[:, :H]) * gu[:, H:], gu (N,2H) = [gate | up].
void swiglu_forward(float* out, const float* gu, int N, int H);
// dgu (N,2H) overwritten.
void swiglu_backward(float* dgu, const float* dout, const float* gu, int N, int H);
void swiglu_forward_ref(float* out, const float* gu, int N, int H);
void swiglu_backward_ref(float* dgu, const float* dout, const float* gu, int N, int H);

// ---- cross_entropy.cpp ----------------------------------------------------------------------
// Softmax cross-entropy over V in one streaming pass per row (online max/sum, chunked over the
// vocabulary): losses (N) (0 where target is -1), lse (N) saved. Logits are left untouched.
void cross_entropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                           int N, int V);
// In place: logits (N,V) become dlogits = dloss * (softmax - onehot); rows with target -1 become 0.
// No second (N,V) buffer.
void cross_entropy_backward(float* logits, const float* lse, const int32_t* targets, float dloss,
                            int N, int V);
// bf16 mixed precision: the same dlogits rounded to bf16 straight into dlogits16 (N,V) (the LM
// head's backward GEMMs read them in bf16 anyway); logits are left untouched. Bit-equal to
// bf16_from_f32 of cross_entropy_backward's output.
void cross_entropy_backward_bf16(uint16_t* dlogits16, const float* logits, const float* lse,
                                 const int32_t* targets, float dloss, int N, int V);
// Training's forward under bf16: cross_entropy_forward and, while each row is still in cache,
// its gradient bf16(dloss * (softmax - onehot)) into dlogits16 (N,V), so the backward does not read
// the (N,V) logits again. One exponential per logit: each chunk's e^(l - chunk max) is kept in
// place of the logits (which are overwritten: a scratch block) and scaled by e^(chunk max - lse).
// losses and lse equal cross_entropy_forward's to fp32 rounding; dlogits16 is
// cross_entropy_backward_bf16's to within one bf16 rounding.
void cross_entropy_forward_grad_bf16(float* losses, float* lse, uint16_t* dlogits16, float* logits,
                                     const int32_t* targets, float dloss, int N, int V);
// Entropy (nats) of softmax(z) over V: log sum e^(z-m) - sum e^(z-m) (z-m) / sum e^(z-m), the
// exponentials vectorised, each 2048-chunk's sums added in double. One row, one thread.
double softmax_entropy(const float* z, int V);
void cross_entropy_forward_ref(float* losses, const float* logits, const int32_t* targets, int N,
                               int V);
void cross_entropy_backward_ref(float* dlogits, const float* logits, const int32_t* targets,
                                float dloss, int N, int V);

// ---- adamw.cpp ------------------------------------------------------------------------------
// One AdamW step [Loshchilov & Hutter 2019] on n elements, decoupled weight decay:
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  p -= lr * (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps)
//   + wd * p)   (torch.optim.AdamW order: decay applied to p before the Adam update).
// grad_scale multiplies g first (gradient clipping folded in). step t starts at 1.
void adamw_step(float* param, float* m, float* v, const float* grad, int64_t n, float lr,
                float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                int64_t t);
void adamw_step_ref(float* param, float* m, float* v, const float* grad, int64_t n, float lr,
                    float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                    int64_t t);

// ---- grad_norm.cpp --------------------------------------------------------------------------
// Sum of squares of grad (n), in double over fixed 4Ki-element blocks summed in block order:
// the same bits for any thread count.
double grad_norm_squared(const float* grad, int64_t n);
// The blocks' sums of squares alone, out[b - first_block] for blocks [first_block, last_block) of a
// gradient of n floats: a rank holding a block-aligned part of the gradient (ZeRO-1) computes its
// blocks' partials with the same bits, and the partials summed in block order give the same norm.
constexpr int64_t kGradNormBlock = 1 << 12;
void grad_norm_block_partials(const float* grad, int64_t n, int64_t first_block, int64_t last_block, double* out);
double grad_norm_squared_ref(const float* grad, int64_t n);
// The factor that brings global norm `norm` to at most max_norm (1 when it is already below or
// max_norm <= 0); torch.nn.utils.clip_grad_norm_ semantics (max_norm / (norm + 1e-6)).
float grad_clip_scale(double norm, float max_norm);

}  // namespace smelt
