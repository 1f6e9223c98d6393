// GEMMs of the CUDA backend through cuBLAS (cuda_kernels.hpp). cuBLAS is column-major: a
// row-major C (M,N) is the column-major C^T (N,M) = op(B)^T op(A)^T, so every call swaps the
// operands and keeps each one's transpose flag. fp32 runs with CUBLAS_DEFAULT_MATH (no TF32: the
// exact path); bf16 inputs accumulate in fp32 (CUBLAS_COMPUTE_32F) into an fp32 C.
// cuBLAS is opened at the first blas_create (dlopen), so a binary that never trains on a GPU
// neither needs nor loads it.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <type_traits>
#include <string>

#include "smelt/kernels/cuda/cuda_kernels.hpp"

namespace smelt::cuda {

struct Blas {
  cublasHandle_t h = nullptr;
  Stream s = nullptr;
};

namespace {
// The cuBLAS entry points used here, looked up once.
struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  // (the C entry point; C++ also sees an overload taking cudaDataType for the compute type)
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  std::string error;
};

const CublasApi& cublas() {
  static CublasApi api;
  static std::once_flag once;
  std::call_once(once, [] {
    void* h = nullptr;
    for (const char* name : {"libcublas.so.13", "libcublas.so"})
      if ((h = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
    if (!h) {
      api.error = std::string("cannot load cuBLAS (libcublas.so.13): ") + dlerror();
      return;
    }
    auto sym = [&](auto& f, const char* name) {
      f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(dlsym(h, name));
      if (!f && api.error.empty()) api.error = std::string("cuBLAS has no ") + name;
    };
    sym(api.create, "cublasCreate_v2");
    sym(api.destroy, "cublasDestroy_v2");
    sym(api.set_stream, "cublasSetStream_v2");
    sym(api.set_math_mode, "cublasSetMathMode");
    sym(api.sgemm, "cublasSgemm_v2");
    sym(api.gemm_ex, "cublasGemmEx");
  });
  return api;
}

void check(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return;
  std::fprintf(stderr, "smelt: cuBLAS %s failed (status %d)\n", what, (int)st);
  std::abort();
}
cublasOperation_t op(bool t) { return t ? CUBLAS_OP_T : CUBLAS_OP_N; }

// Round to nearest, ties to even; a NaN stays a quiet NaN (kernels.hpp's bf16_from_f32 rule).
__device__ __forceinline__ uint16_t bf16_round(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

__global__ void bf16_from_f32_kernel(uint16_t* __restrict__ out, const float* __restrict__ inp, int64_t n) {
  const int64_t i4 = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 4;
  if (i4 + 4 <= n && ((reinterpret_cast<uintptr_t>(inp) | reinterpret_cast<uintptr_t>(out)) & 15) == 0) {
    const float4 v = *reinterpret_cast<const float4*>(inp + i4);
    ushort4 r;
    r.x = bf16_round(v.x), r.y = bf16_round(v.y), r.z = bf16_round(v.z), r.w = bf16_round(v.w);
    *reinterpret_cast<ushort4*>(out + i4) = r;
    return;
  }
  for (int64_t i = i4; i < i4 + 4 && i < n; i++) out[i] = bf16_round(inp[i]);
}
}  // namespace

std::string blas_error() { return cublas().error; }

Blas* blas_create(Stream s) {
  const CublasApi& api = cublas();
  if (!api.error.empty()) return nullptr;
  auto* b = new Blas;
  check(api.create(&b->h), "create");
  check(api.set_stream(b->h, s), "set stream");
  check(api.set_math_mode(b->h, CUBLAS_DEFAULT_MATH), "math mode");
  b->s = s;
  return b;
}

void blas_destroy(Blas* b) {
  if (!b) return;
  (void)cublas().destroy(b->h);
  delete b;
}

void gemm_f32(Blas* b, bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
              const float* B, int ldb, float beta, float* C, int ldc) {
  check(cublas().sgemm(b->h, op(tb), op(ta), N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc), "sgemm");
}

void gemm_bf16(Blas* b, bool ta, bool tb, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B,
               int ldb, float beta, float* C, int ldc) {
  const float alpha = 1.0f;
  check(cublas().gemm_ex(b->h, op(tb), op(ta), N, M, K, &alpha, B, CUDA_R_16BF, ldb, A, CUDA_R_16BF, lda, &beta, C,
                     CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "bf16 gemm");
}

void bf16_from_f32(uint16_t* out, const float* inp, int64_t n, Stream s) {
  if (n <= 0) return;
  const int threads = 256;
  const int64_t blocks = ((n + 3) / 4 + threads - 1) / threads;
  bf16_from_f32_kernel<<<(unsigned)blocks, threads, 0, s>>>(out, inp, n);
}

void matmul_forward(Blas* b, float* out, const float* inp, const float* weight, int N, int IC, int OC,
                    float beta) {
  gemm_f32(b, false, true, N, OC, IC, 1.0f, inp, IC, weight, IC, beta, out, OC);
}

void matmul_backward(Blas* b, float* dinp, float* dweight, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC) {
  if (dinp) gemm_f32(b, false, false, N, IC, OC, 1.0f, dout, OC, weight, IC, 0.0f, dinp, IC);
  gemm_f32(b, true, false, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dweight, IC);
}

void matmul_forward_bf16(Blas* b, float* out, uint16_t* inp16, const float* inp, const uint16_t* weight16,
                         int N, int IC, int OC, float beta) {
  bf16_from_f32(inp16, inp, (int64_t)N * IC, b->s);
  gemm_bf16(b, false, true, N, OC, IC, inp16, IC, weight16, IC, beta, out, OC);
}

void matmul_backward_bf16(Blas* b, float* dinp, float* dweight, uint16_t* dout16, uint16_t* inp16,
                          const float* dout, const float* inp, const uint16_t* weight16, int N, int IC,
                          int OC) {
  if (dout) bf16_from_f32(dout16, dout, (int64_t)N * OC, b->s);
  bf16_from_f32(inp16, inp, (int64_t)N * IC, b->s);
  if (dinp) gemm_bf16(b, false, false, N, IC, OC, dout16, OC, weight16, IC, 0.0f, dinp, IC);
  gemm_bf16(b, true, false, OC, IC, N, dout16, OC, inp16, IC, 1.0f, dweight, IC);
}

}  // namespace smelt::cuda
