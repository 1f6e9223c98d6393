// BLIS as an fp32 GEMM back end (GemmBackend::kBlis), opened at run time: Smelt does not link it,
// so a machine without it builds and runs the same, and installing it does not move the system's
// BLAS (Debian's libblis4 alternatives rank below OpenBLAS). Debian's serial build first, since
// every call runs on one thread (the callers tile over OpenMP); else the build the system's
// libblis.so.4 points to, with its threads set to 1. Its typed API (blis.h, 64-bit dims and
// strides on x86-64) takes op(A) and op(B) as row and column strides, so no transpose flags.
// Not the choice of back end (machine/gemm_select measures BLIS beside the others).
#include <dlfcn.h>

#include <string>

#include "smelt/kernels/cpu/gemm_blis.hpp"
#include "smelt/kernels/kernels.hpp"

namespace smelt {

namespace {
using BliSgemm = void (*)(int transa, int transb, int64_t m, int64_t n, int64_t k, const float* alpha,
                          const float* a, int64_t rsa, int64_t csa, const float* b, int64_t rsb, int64_t csb,
                          const float* beta, float* c, int64_t rsc, int64_t csc);

struct Blis {
  BliSgemm sgemm = nullptr;
  std::string library;  // e.g. "blis-serial 0.9.0, zen3 kernels"
};

Blis open_blis() {
  const char* paths[][2] = {{"/usr/lib/x86_64-linux-gnu/blis-serial/libblis.so.4", "blis-serial"},
                            {"libblis.so.4", "blis"}};
  for (const auto& p : paths) {
    // DEEPBIND: BLIS resolves its own symbols (it exports the BLAS names too, as OpenBLAS does)
    void* h = dlopen(p[0], RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!h) continue;
    auto threads = (void (*)(int64_t))dlsym(h, "bli_thread_set_num_threads");
    auto arch_id = (int (*)())dlsym(h, "bli_arch_query_id");
    auto arch_str = (const char* (*)(int))dlsym(h, "bli_arch_string");
    auto version = (const char* (*)())dlsym(h, "bli_info_get_version_str");
    auto sgemm = (BliSgemm)dlsym(h, "bli_sgemm");
    if (!threads || !arch_id || !arch_str || !version || !sgemm) {
      dlclose(h);
      continue;
    }
    threads(1);
    Blis b;
    b.sgemm = sgemm;
    b.library = std::string(p[1]) + " " + version() + ", " + arch_str(arch_id()) + " kernels";
    return b;
  }
  return Blis{};
}

const Blis& blis() {
  static const Blis b = open_blis();
  return b;
}
}  // namespace

bool gemm_blis_available() { return blis().sgemm != nullptr; }

std::string gemm_blis_library() { return blis().library; }

// C (M,N) = beta*C + alpha op(A) op(B), row-major: row stride ld, column stride 1 (transposed:
// the other way round).
void gemm_f32_blis(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                   int ldb, float beta, float* C, int ldc) {
  blis().sgemm(0, 0, M, N, K, &alpha, A, ta ? 1 : lda, ta ? lda : 1, B, tb ? 1 : ldb, tb ? ldb : 1, &beta, C, ldc,
               1);
}

}  // namespace smelt
