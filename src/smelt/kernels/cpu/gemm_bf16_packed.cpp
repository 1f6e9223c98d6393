// Smelt's own bf16 GEMM for CPUs with AVX512-BF16 (Zen 4, Zen 5, Cooper Lake, Sapphire Rapids):
// C (M,N) fp32 = beta*C + op(A) op(B), A and B bf16. Both operands are copied into packed blocks
// (GotoBLAS layout: A in slivers of kMr rows, B in panels of kNr columns, each K pair side by side
// as vdpbf16ps reads it), so one micro-kernel serves every transpose; edges are zero-padded when
// packed and masked when stored. Each C element sums its K pairs in a fixed order, in blocks of
// kKc taken in order, whatever the thread count or the way C is shared out: the bits depend on
// the shape only. Not the choice between this and oneDNN (machine/gemm_select measures it).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include <immintrin.h>
#include <omp.h>

#include "smelt/kernels/kernels.hpp"

namespace smelt {

namespace {
constexpr int kMr = 12;   // rows of a micro-tile: 12 x 2 accumulators + 2 B registers of 32
constexpr int kNr = 32;   // columns of a micro-tile (two 16-float vectors)
constexpr int kKc = 2048;  // at most this many K elements per block (blocks of equal size, even)
constexpr int kMc = 96;   // rows of A packed at a time when B is the chunked operand (96 x 2048 bf16: 384 KiB)
constexpr int kNc = 512;  // columns of B packed at a time when A is the chunked operand
constexpr int64_t kWholeBytes = int64_t(2) << 20;  // a chunk of the smaller operand: at most this much

inline uint32_t load32(const uint16_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// op(A) rows [m0, m0+mc), K [k0, k0+kc) into slivers of kMr rows: sliver s, pair p, row r holds
// the two bf16 of (row r, K 2p and 2p+1) as one 32-bit word. Rows past mc and K past kc are 0.
__attribute__((target("avx512f,avx512bw"))) void pack_a(uint16_t* out, const uint16_t* A, int lda, bool ta,
                                                         int m0, int mc, int k0, int kc) {
  const int pairs = (kc + 1) / 2, full = kc / 2, slivers = (mc + kMr - 1) / kMr;
  for (int s = 0; s < slivers; s++) {
    uint32_t* o = reinterpret_cast<uint32_t*>(out + (int64_t)s * pairs * kMr * 2);
    const int rows = std::min(kMr, mc - s * kMr), ms = m0 + s * kMr;
    if (!ta) {  // a row's K pair is one 32-bit word of A's row
      for (int r = 0; r < kMr; r++) {
        if (r >= rows) {
          for (int p = 0; p < pairs; p++) o[p * kMr + r] = 0;
          continue;
        }
        const uint16_t* src = A + (int64_t)(ms + r) * lda + k0;
        for (int p = 0; p < full; p++) o[p * kMr + r] = load32(src + 2 * p);
        if (full < pairs) o[full * kMr + r] = src[2 * full];
      }
    } else {  // op(A)(m, k) = A[k][m]: two rows of A interleaved, kMr (12) columns of each
      const __m512i idx = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38,
                                           6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
      const __mmask32 in = (__mmask32)((1u << rows) - 1);
      for (int p = 0; p < pairs; p++) {
        const uint16_t* r0 = A + (int64_t)(k0 + 2 * p) * lda + ms;
        const __m512i lo = _mm512_maskz_loadu_epi16(in, r0);
        const __m512i hi = 2 * p + 1 < kc ? _mm512_maskz_loadu_epi16(in, r0 + lda) : _mm512_setzero_si512();
        _mm512_mask_storeu_epi16(o + p * kMr, (__mmask32)((1u << (2 * kMr)) - 1),
                                 _mm512_permutex2var_epi16(lo, idx, hi));
      }
    }
  }
}

// r[q] = word q of each of r[0..15] (row i of the 16 x 16 matrix of 32-bit words becomes column
// i): 32-bit then 64-bit interleaves within 128-bit lanes, then two rounds of lane shuffles.
__attribute__((target("avx512f"))) inline void transpose16(__m512i r[16]) {
  __m512i t[16], u[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // u[4g + m], lane L: word 4L + m of rows 4g .. 4g+3
#pragma GCC unroll 4
  for (int g = 0; g < 4; g++) {
    u[4 * g] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
#pragma GCC unroll 4
  for (int m = 0; m < 4; m++) {
    const __m512i x0 = _mm512_shuffle_i32x4(u[m], u[4 + m], 0x44), x1 = _mm512_shuffle_i32x4(u[m], u[4 + m], 0xEE);
    const __m512i y0 = _mm512_shuffle_i32x4(u[8 + m], u[12 + m], 0x44);
    const __m512i y1 = _mm512_shuffle_i32x4(u[8 + m], u[12 + m], 0xEE);
    r[m] = _mm512_shuffle_i32x4(x0, y0, 0x88);
    r[4 + m] = _mm512_shuffle_i32x4(x0, y0, 0xDD);
    r[8 + m] = _mm512_shuffle_i32x4(x1, y1, 0x88);
    r[12 + m] = _mm512_shuffle_i32x4(x1, y1, 0xDD);
  }
}

// op(B) K [k0, k0+kc), columns [n0, n0+nc) into panels of kNr columns: panel j, pair p, column c
// holds (K 2p, 2p+1) of column c side by side. Columns past nc and K past kc are 0.
__attribute__((target("avx512f,avx512bw"))) void pack_b(uint16_t* out, const uint16_t* B, int ldb, bool tb,
                                                         int k0, int kc, int n0, int nc) {
  const int pairs = (kc + 1) / 2, full = kc / 2, panels = (nc + kNr - 1) / kNr;
  for (int j = 0; j < panels; j++) {
    uint32_t* o = reinterpret_cast<uint32_t*>(out + (int64_t)j * pairs * kNr * 2);
    const int cols = std::min(kNr, nc - j * kNr);
    if (tb) {  // op(B)(k, n) = B[n][k]: a column's K pair is one 32-bit word of B's row n
      // 16 pairs of 16 columns at a time, a 16 x 16 transpose of 32-bit words; the rest one by one
      const int vec = full / 16 * 16;
      for (int h = 0; h < kNr; h += 16)
        for (int p0 = 0; p0 < vec; p0 += 16) {
          __m512i r[16];
#pragma GCC unroll 16
          for (int i = 0; i < 16; i++)
            r[i] = h + i < cols ? _mm512_loadu_si512(B + (int64_t)(n0 + j * kNr + h + i) * ldb + k0 + 2 * p0)
                                : _mm512_setzero_si512();
          transpose16(r);
#pragma GCC unroll 16
          for (int q = 0; q < 16; q++) _mm512_storeu_si512(o + (int64_t)(p0 + q) * kNr + h, r[q]);
        }
      for (int c = 0; c < kNr; c++) {
        if (c >= cols) {
          for (int p = vec; p < pairs; p++) o[p * kNr + c] = 0;
          continue;
        }
        const uint16_t* src = B + (int64_t)(n0 + j * kNr + c) * ldb + k0;
        for (int p = vec; p < full; p++) o[p * kNr + c] = load32(src + 2 * p);
        if (full < pairs) o[full * kNr + c] = src[2 * full];
      }
    } else {  // op(B)(k, n) = B[k][n]: two rows of B interleaved, 16 columns per vector
      const __m512i idx_lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7,
                                              38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
      const __m512i idx_hi = _mm512_add_epi16(idx_lo, _mm512_set1_epi16(16));
      const __mmask32 in = cols >= 32 ? ~(__mmask32)0 : (__mmask32)((1u << cols) - 1);
      for (int p = 0; p < pairs; p++) {
        const uint16_t* r0 = B + (int64_t)(k0 + 2 * p) * ldb + n0 + j * kNr;
        const __m512i lo = _mm512_maskz_loadu_epi16(in, r0);
        const __m512i hi = 2 * p + 1 < kc ? _mm512_maskz_loadu_epi16(in, r0 + ldb) : _mm512_setzero_si512();
        _mm512_storeu_si512(o + p * kNr, _mm512_permutex2var_epi16(lo, idx_lo, hi));
        _mm512_storeu_si512(o + p * kNr + 16, _mm512_permutex2var_epi16(lo, idx_hi, hi));
      }
    }
  }
}

// C[0..rows) x [0..cols) (+)= the packed sliver a times the packed panel b over `pairs` K pairs.
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void micro(int pairs, const uint16_t* a,
                                                                  const uint16_t* b, float* C, int ldc,
                                                                  int rows, int cols, bool add) {
  __m512 acc[kMr][2];  // every loop over r fully unrolled, so the accumulators stay in registers
#pragma GCC unroll 12
  for (int r = 0; r < kMr; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  const uint32_t* a32 = reinterpret_cast<const uint32_t*>(a);
  if (add)  // the C tile this sum ends in, on its way while the sum runs (a pass over C ago, it left the cache)
    for (int r = 0; r < rows; r++) {
      _mm_prefetch(reinterpret_cast<const char*>(C + (int64_t)r * ldc), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(C + (int64_t)r * ldc + 16), _MM_HINT_T0);
    }
  for (int p = 0; p < pairs; p++) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + p * kNr * 2);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + p * kNr * 2 + 32);
#pragma GCC unroll 12
    for (int r = 0; r < kMr; r++) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32((int)a32[p * kMr + r]);
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, b1);
    }
  }
  if (cols == kNr) {  // a whole tile: plain loads and stores
#pragma GCC unroll 12
    for (int r = 0; r < kMr; r++) {
      if (r >= rows) break;
      float* c = C + (int64_t)r * ldc;
      __m512 v0 = acc[r][0], v1 = acc[r][1];
      if (add) v0 = _mm512_add_ps(_mm512_loadu_ps(c), v0), v1 = _mm512_add_ps(_mm512_loadu_ps(c + 16), v1);
      _mm512_storeu_ps(c, v0);
      _mm512_storeu_ps(c + 16, v1);
    }
    return;
  }
  const __mmask16 m0 = cols >= 16 ? 0xffff : (__mmask16)((1u << cols) - 1);
  const __mmask16 m1 = cols >= 32 ? 0xffff : cols <= 16 ? 0 : (__mmask16)((1u << (cols - 16)) - 1);
#pragma GCC unroll 12
  for (int r = 0; r < kMr; r++) {
    if (r >= rows) break;
    float* c = C + (int64_t)r * ldc;
    __m512 v0 = acc[r][0], v1 = acc[r][1];
    if (add) {
      v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, c), v0);
      v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, c + 16), v1);
    }
    _mm512_mask_storeu_ps(c, m0, v0);
    _mm512_mask_storeu_ps(c + 16, m1, v1);
  }
}

// One job: C rows [m0, m1) x columns [n0, n1). Per K block, the smaller of the job's two operands
// is packed in chunks of at most kWholeBytes (often whole), each chunk once; the other a block at a
// time (kMc rows of A, or kNc columns of B), each block meeting the whole chunk. So what stays
// packed is bounded (the LM head's dweight packs B's 512 columns, not A's 32000 rows), and each
// operand is packed once per K block, the larger once more per chunk of the smaller.
// How a job of rows x cols x K is blocked, and the packing buffers it needs (bf16 elements).
struct Blocking {
  bool a_whole;    // A is the operand packed in chunks, often whole (else B)
  int kstep;       // K block
  int chunk;       // rows (A) or columns (B) per chunk of the chunked operand
  int64_t a_size, b_size;
};
Blocking blocking(int rows, int cols, int K) {
  Blocking b;
  b.a_whole = rows <= cols;
  // K in blocks of equal even size of at most kKc, so most of the model's shapes sum in one block
  // and pass over C once (bench/kernels/gemm_engines_bench, Zen 5: K 704 and 1376 in blocks of 256
  // ran at 0.54-0.60x oneDNN, in one block 0.81-0.87x; the panels stream from L2).
  const int kblocks = (K + kKc - 1) / kKc;
  b.kstep = ((K + kblocks - 1) / kblocks + 1) / 2 * 2;
  const int64_t line = (int64_t)b.kstep + 1;  // bf16 per packed row or column, with an odd K's pad
  const int unit = b.a_whole ? kMr : kNr;
  b.chunk = (int)std::max<int64_t>(1, kWholeBytes / (2 * line * unit)) * unit;
  const int arows = b.a_whole ? std::min(rows, b.chunk) : std::min(rows, kMc);
  const int bcols = b.a_whole ? std::min(cols, kNc) : std::min(cols, b.chunk);
  b.a_size = (int64_t)(arows + kMr - 1) / kMr * kMr * line;
  b.b_size = (int64_t)(bcols + kNr - 1) / kNr * kNr * line;
  return b;
}

void job(bool ta, bool tb, int m0, int m1, int n0, int n1, int K, const uint16_t* A, int lda,
         const uint16_t* B, int ldb, float beta, float* C, int ldc) {
  thread_local std::vector<uint16_t> abuf, bbuf;
  const Blocking bl = blocking(m1 - m0, n1 - n0, K);
  const bool a_whole = bl.a_whole;
  const int kstep = bl.kstep, chunk = bl.chunk;
  if ((int64_t)abuf.size() < bl.a_size) abuf.resize((size_t)bl.a_size);
  if ((int64_t)bbuf.size() < bl.b_size) bbuf.resize((size_t)bl.b_size);
  for (int k0 = 0; k0 < K; k0 += kstep) {
    const int kc = std::min(kstep, K - k0), pairs = (kc + 1) / 2;
    const int64_t sliver = (int64_t)pairs * kMr * 2, panel = (int64_t)pairs * kNr * 2;
    const bool add = k0 > 0 || beta != 0.0f;
    // C rows [r0, r1) x columns [c0, c1) from the packed A rows starting at ar and B columns at bc
    auto block = [&](int r0, int r1, int ar, int c0, int c1, int bc) {
      for (int c = c0; c < c1; c += kNr)
        for (int r = r0; r < r1; r += kMr)
          micro(pairs, abuf.data() + (r - ar) / kMr * sliver, bbuf.data() + (c - bc) / kNr * panel,
                C + (int64_t)r * ldc + c, ldc, std::min(kMr, r1 - r), std::min(kNr, c1 - c), add);
    };
    if (a_whole) {
      for (int ma = m0; ma < m1; ma += chunk) {
        const int me = std::min(m1, ma + chunk);
        pack_a(abuf.data(), A, lda, ta, ma, me - ma, k0, kc);
        for (int nb = n0; nb < n1; nb += kNc) {
          const int nc = std::min(kNc, n1 - nb);
          pack_b(bbuf.data(), B, ldb, tb, k0, kc, nb, nc);
          for (int mb = ma; mb < me; mb += kMc) block(mb, std::min(me, mb + kMc), ma, nb, nb + nc, nb);
        }
      }
    } else {
      for (int na = n0; na < n1; na += chunk) {
        const int ne = std::min(n1, na + chunk);
        pack_b(bbuf.data(), B, ldb, tb, k0, kc, na, ne - na);
        for (int mb = m0; mb < m1; mb += kMc) {
          const int mc = std::min(kMc, m1 - mb);
          pack_a(abuf.data(), A, lda, ta, mb, mc, k0, kc);
          for (int nb = na; nb < ne; nb += kNc) block(mb, mb + mc, mb, nb, std::min(ne, nb + kNc), na);
        }
      }
    }
  }
}
}  // namespace

int64_t gemm_bf16_packed_scratch_bytes(int M, int N, int K) {
  if (M <= 0 || N <= 0 || K <= 0) return 0;
  const Blocking b = blocking(M, N, K);  // the whole of C on one thread: the largest job
  return 2 * (b.a_size + b.b_size);
}

bool gemm_bf16_packed_available() {
  static const bool ok = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
  return ok;
}

void gemm_bf16_packed(bool ta, bool tb, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B,
                      int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  beta = gemm_bf16_prescale(beta, M, N, C, ldc);
  if (K <= 0) {
    if (beta == 0.0f)
      for (int i = 0; i < M; i++) std::memset(C + (int64_t)i * ldc, 0, sizeof(float) * N);
    return;
  }
  // Jobs: C cut into a grid of about one job per thread, rows first (they are the most numerous:
  // tokens), on multiples of kMr rows and kNc columns. Inside a team (a caller's tile), one job
  // on this thread. The cut changes which thread sums an element, never the order of its sum.
  const int team = omp_in_parallel() ? 1 : omp_get_max_threads();
  const int row_units = (M + kMr - 1) / kMr, col_units = (N + kNc - 1) / kNc;
  const int mparts = std::min(team, row_units);
  const int nparts = std::min(col_units, (team + mparts - 1) / mparts);
  const int mstep = (row_units + mparts - 1) / mparts * kMr, nstep = (col_units + nparts - 1) / nparts * kNc;
  const int per_n = (M + mstep - 1) / mstep, jobs = per_n * ((N + nstep - 1) / nstep);
#pragma omp parallel for schedule(dynamic, 1) if (team > 1 && jobs > 1)
  for (int q = 0; q < jobs; q++) {
    const int m0 = q % per_n * mstep, n0 = q / per_n * nstep;
    job(ta, tb, m0, std::min(M, m0 + mstep), n0, std::min(N, n0 + nstep), K, A, lda, B, ldb, beta, C, ldc);
  }
}

}  // namespace smelt
