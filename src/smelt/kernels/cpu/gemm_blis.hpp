// BLIS opened at run time (gemm_blis.cpp): what gemm.cpp's back end switch calls.
#pragma once

namespace smelt {

bool gemm_blis_available();  // a BLIS library was found and has the typed API
// gemm_f32's contract on BLIS; only where gemm_blis_available().
void gemm_f32_blis(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                   int ldb, float beta, float* C, int ldc);

}  // namespace smelt
