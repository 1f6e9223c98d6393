// The GEMM back ends every linear layer runs on: fp32 through OpenBLAS or oneDNN's sgemm, bf16
// inputs with fp32 accumulation through oneDNN's matmul (AMX or AVX512-BF16 where the CPU has
// them) or a portable path (bf16 widened to fp32, then sgemm: the same products, exact in fp32).
// Called inside an OpenMP team a call runs on its thread (the fp32 tiles of matmul.cpp,
// attention's blocks, the decoder's one-row blocks); called outside one, oneDNN's bf16 matmul
// threads itself over the team size (matmul.cpp's whole bf16 GEMMs); the table of which linear
// layer's product runs on oneDNN and which on Smelt's own packed kernel (gemm_bf16_packed.cpp).
// Not a GEMM of our own, and not the choice of back end (machine/gemm_select measures that).
#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include <cblas.h>
#include <immintrin.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include "smelt/kernels/cpu/gemm_blis.hpp"
#include "smelt/kernels/cpu/vec_math.hpp"
#include "smelt/kernels/kernels.hpp"

namespace smelt {

namespace {
GemmBackend g_backend = GemmBackend::kOpenBlas;
int g_bf16_mode = -1;  // -1 not decided yet, 0 portable, 1 oneDNN

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// One oneDNN matmul per GEMM shape (and team size), created on first use and kept. Each OpenMP
// thread executes through its own memory objects, stream and scratchpad, so two tiles of the same
// shape run at once without sharing state. Only one thread outside a team may call at a time
// (the trainer's and the decoder's own thread; nothing else runs GEMMs).
constexpr int kMaxThreads = 256;
struct PerThread {
  std::unique_ptr<dnnl::stream> stream;
  dnnl::memory a, b, c, scratch;
  std::vector<uint8_t> scratch_bytes;
};
struct Bf16Gemm {
  dnnl::matmul prim;
  dnnl::memory::desc ad, bd, cd, sd;
  std::array<std::unique_ptr<PerThread>, kMaxThreads> threads;
};
// (transposes, shape, leading dimensions, accumulate, threads the primitive was made for: a
// primitive executed outside an OpenMP team threads itself, and its scratchpad is sized for that)
using Key = std::tuple<bool, bool, int, int, int, int, int, int, bool, int>;
std::mutex g_mu;
std::map<Key, std::unique_ptr<Bf16Gemm>> g_cache;

Bf16Gemm& bf16_gemm_for(bool ta, bool tb, int M, int N, int K, int lda, int ldb, int ldc, bool accumulate) {
  const int team = omp_in_parallel() ? 1 : omp_get_max_threads();
  std::lock_guard<std::mutex> lock(g_mu);
  auto& slot = g_cache[Key{ta, tb, M, N, K, lda, ldb, ldc, accumulate, team}];
  if (slot) return *slot;
  using dt = dnnl::memory::data_type;
  using dims = dnnl::memory::dims;
  auto g = std::make_unique<Bf16Gemm>();
  // op(A) (M,K) and op(B) (K,N) described by strides over the row-major storage: no copies.
  g->ad = dnnl::memory::desc({M, K}, dt::bf16, ta ? dims{1, lda} : dims{lda, 1});
  g->bd = dnnl::memory::desc({K, N}, dt::bf16, tb ? dims{1, ldb} : dims{ldb, 1});
  g->cd = dnnl::memory::desc({M, N}, dt::f32, dims{ldc, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (accumulate) {
    dnnl::post_ops po;
    po.append_sum(1.0f);  // C += A B, in fp32
    attr.set_post_ops(po);
  }
  auto pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(g->ad, g->bd, g->cd), attr, engine());
  g->sd = pd.scratchpad_desc();
  g->prim = dnnl::matmul(pd);
  slot = std::move(g);
  return *slot;
}

using vmath::bf16_widen;
}  // namespace

void gemm_set_backend(GemmBackend b) { g_backend = gemm_backend_available(b) ? b : GemmBackend::kOpenBlas; }
GemmBackend gemm_backend() { return g_backend; }
const char* gemm_backend_name(GemmBackend b) {
  return b == GemmBackend::kOneDnn ? "onednn" : b == GemmBackend::kBlis ? "blis" : "openblas";
}
bool gemm_backend_available(GemmBackend b) { return b != GemmBackend::kBlis || gemm_blis_available(); }

void gemm_f32(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
              int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  if (g_backend == GemmBackend::kOneDnn) {
    // Row-major like cblas; single-threaded when called inside an OpenMP region (our tiles).
    dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  if (g_backend == GemmBackend::kBlis) {
    gemm_f32_blis(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A,
              lda, B, ldb, beta, C, ldc);
}

bool gemm_bf16_native() {
  if (g_bf16_mode < 0) {
    const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    g_bf16_mode = (isa == dnnl_cpu_isa_avx512_core_bf16 || isa == dnnl_cpu_isa_avx512_core_amx) ? 1 : 0;
  }
  return g_bf16_mode == 1;
}

const char* gemm_bf16_isa() {
  if (!gemm_bf16_native()) return "portable (bf16 widened to fp32, sgemm)";
  return dnnl_get_effective_cpu_isa() == dnnl_cpu_isa_avx512_core_amx ? "onednn amx_bf16" : "onednn avx512_bf16";
}

void gemm_bf16_set_portable(bool portable) {
  if (portable) g_bf16_mode = 0;
  else g_bf16_mode = -1, gemm_bf16_native();
}

float gemm_bf16_prescale(float beta, int M, int N, float* C, int ldc) {
  if (beta == 0.0f || beta == 1.0f) return beta;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) C[(int64_t)i * ldc + j] *= beta;
  return 1.0f;
}

void gemm_bf16_onednn(bool ta, bool tb, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B, int ldb,
                      float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  beta = gemm_bf16_prescale(beta, M, N, C, ldc);
  Bf16Gemm& g = bf16_gemm_for(ta, tb, M, N, K, lda, ldb, ldc, beta != 0.0f);
  const int tid = omp_get_thread_num() % kMaxThreads;
  auto& pt = g.threads[tid];
  if (!pt) {  // first call of this shape on this thread
    pt = std::make_unique<PerThread>();
    pt->stream = std::make_unique<dnnl::stream>(engine());
    pt->a = dnnl::memory(g.ad, engine(), DNNL_MEMORY_NONE);
    pt->b = dnnl::memory(g.bd, engine(), DNNL_MEMORY_NONE);
    pt->c = dnnl::memory(g.cd, engine(), DNNL_MEMORY_NONE);
    pt->scratch_bytes.resize(g.sd.get_size() + 64);
    pt->scratch = dnnl::memory(g.sd, engine(), pt->scratch_bytes.data());
  }
  pt->a.set_data_handle(const_cast<uint16_t*>(A));
  pt->b.set_data_handle(const_cast<uint16_t*>(B));
  pt->c.set_data_handle(C);
  dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, pt->a.get()},
                             {DNNL_ARG_WEIGHTS, pt->b.get()},
                             {DNNL_ARG_DST, pt->c.get()},
                             {DNNL_ARG_SCRATCHPAD, pt->scratch.get()}};
  dnnl_primitive_execute(g.prim.get(), pt->stream->get(), 4, args);
  dnnl_stream_wait(pt->stream->get());
}

void gemm_bf16_portable(bool ta, bool tb, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B,
                        int ldb, float beta, float* C, int ldc) {
  // Blocks of op(A) and op(B) widened into fixed per-thread buffers (row-major, K innermost), then
  // one sgemm per block pair accumulating into C: fp32 products of bf16 values are exact, sums in
  // fp32, as on the bf16 units.
  constexpr int MB = 64, NB = 64, KB = 256;
  alignas(64) thread_local float abuf[MB * KB], bbuf[NB * KB];  // 64 KiB each, not the heap
  if (K <= 0) {
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) C[(int64_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(int64_t)i * ldc + j];
    return;
  }
  for (int k0 = 0; k0 < K; k0 += KB) {
    const int kb = std::min(KB, K - k0);
    for (int i0 = 0; i0 < M; i0 += MB) {
      const int mb = std::min(MB, M - i0);
      for (int i = 0; i < mb; i++)
        for (int k = 0; k < kb; k++)
          abuf[i * KB + k] =
              bf16_widen(ta ? A[(int64_t)(k0 + k) * lda + i0 + i] : A[(int64_t)(i0 + i) * lda + k0 + k]);
      for (int j0 = 0; j0 < N; j0 += NB) {
        const int nb = std::min(NB, N - j0);
        for (int j = 0; j < nb; j++)
          for (int k = 0; k < kb; k++)
            bbuf[j * KB + k] =
                bf16_widen(tb ? B[(int64_t)(j0 + j) * ldb + k0 + k] : B[(int64_t)(k0 + k) * ldb + j0 + j]);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, mb, nb, kb, 1.0f, abuf, KB, bbuf, KB,
                    k0 == 0 ? beta : 1.0f, C + (int64_t)i0 * ldc + j0, ldc);
      }
    }
  }
}

namespace {
// The linear layers' engine choices: a few dozen entries at most, written before a run's GEMMs
// start and only read while they run.
std::map<std::tuple<int, int, int>, Bf16Engine> g_engines;
}  // namespace

const char* bf16_engine_name(Bf16Engine e) { return e == Bf16Engine::kPacked ? "packed" : "onednn"; }

void gemm_bf16_set_engine(int IC, int OC, LinearProduct p, Bf16Engine e) {
  g_engines[std::make_tuple(IC, OC, (int)p)] = e;
}

Bf16Engine gemm_bf16_engine(int IC, int OC, LinearProduct p) {
  auto it = g_engines.find(std::make_tuple(IC, OC, (int)p));
  return it == g_engines.end() ? Bf16Engine::kOneDnn : it->second;
}

void gemm_bf16_clear_engines() { g_engines.clear(); }

Bf16Engine gemm_bf16_engine_for(int rows, int IC, int OC, LinearProduct p) {
  if (p != LinearProduct::kDweight && rows < kBf16PackedMinRows) return Bf16Engine::kOneDnn;
  return gemm_bf16_engine(IC, OC, p);
}

void gemm_bf16_on(Bf16Engine e, bool ta, bool tb, int M, int N, int K, const uint16_t* A, int lda,
                  const uint16_t* B, int ldb, float beta, float* C, int ldc) {
  if (e == Bf16Engine::kPacked && gemm_bf16_native() && gemm_bf16_packed_available())
    gemm_bf16_packed(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
  else gemm_bf16(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

void gemm_bf16(bool ta, bool tb, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B, int ldb,
               float beta, float* C, int ldc) {
  if (gemm_bf16_native()) gemm_bf16_onednn(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
  else gemm_bf16_portable(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

void bf16_from_f32(uint16_t* out, const float* inp, int64_t n) {
  constexpr int64_t kBlock = 1 << 16;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = std::min<int64_t>(n, b + kBlock);
    int64_t i = b;
    for (; i + 16 <= e; i += 16) vmath::bf16_round16(out + i, inp + i);
    for (; i < e; i++) out[i] = vmath::bf16_round(inp[i]);
  }
}

void bf16_from_f32_serial(uint16_t* out, const float* inp, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) vmath::bf16_round16(out + i, inp + i);
  for (; i < n; i++) out[i] = vmath::bf16_round(inp[i]);
}

void f32_from_bf16(float* out, const uint16_t* inp, int64_t n) {
  for (int64_t i = 0; i < n; i++) out[i] = bf16_widen(inp[i]);
}

float bf16_round_f32(float x) { return bf16_widen(vmath::bf16_round(x)); }

}  // namespace smelt
