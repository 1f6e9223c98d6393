// Softmax cross-entropy over the vocabulary, fused: one streaming pass for the loss (online
// max/sum, chunked over V), one in-place pass turning logits into dlogits. Not the LM head GEMM.
#include <cmath>
#include <cstdint>
#include <limits>

#include "smelt/kernels/cpu/vec_math.hpp"
#include "smelt/kernels/kernels.hpp"

namespace smelt {

namespace {
constexpr int kChunk = 2048;  // vocabulary chunk: the running max is rescaled once per chunk

// One row's log-sum-exp: online max and sum over chunks.
inline float row_lse(const float* l, int V) {
  float m = -std::numeric_limits<float>::infinity(), s = 0.0f;
  for (int v0 = 0; v0 < V; v0 += kChunk) {
    int v1 = v0 + kChunk < V ? v0 + kChunk : V;
    float cm = vmath::max_of(l + v0, v1 - v0, m);
    float cs = vmath::exp_sub_sum(l + v0, cm, v1 - v0);
    s = s * vmath::exp1(m - cm) + cs;
    m = cm;
  }
  return m + std::log(s);
}

// One row's dlogits in bf16: dloss * (softmax - onehot(t)); zeros when t < 0.
inline void row_grad_bf16(uint16_t* d, const float* l, float z, int t, float dloss, int V) {
  if (t < 0) {
    for (int v = 0; v < V; v++) d[v] = 0;
    return;
  }
  const __m256 vz = _mm256_set1_ps(z), vd = _mm256_set1_ps(dloss);
  int v = 0;
  for (; v + 16 <= V; v += 16) {
    __m256 a = _mm256_mul_ps(vmath::exp8(_mm256_sub_ps(_mm256_loadu_ps(l + v), vz)), vd);
    __m256 b = _mm256_mul_ps(vmath::exp8(_mm256_sub_ps(_mm256_loadu_ps(l + v + 8), vz)), vd);
    _mm256_storeu_si256((__m256i*)(d + v), vmath::bf16_pack16(a, b));
  }
  for (; v < V; v++) d[v] = vmath::bf16_round(vmath::exp1(l[v] - z) * dloss);
  d[t] = vmath::bf16_round(vmath::exp1(l[t] - z) * dloss - dloss);  // exp1 = exp8's bits
}
}  // namespace

void cross_entropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                           int N, int V) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* l = logits + (int64_t)n * V;
    const float z = row_lse(l, V);
    lse[n] = z;
    int t = targets[n];
    losses[n] = t < 0 ? 0.0f : z - l[t];
  }
}

void cross_entropy_forward_grad_bf16(float* losses, float* lse, uint16_t* dlogits16, float* logits,
                                     const int32_t* targets, float dloss, int N, int V) {
  constexpr int kMaxChunks = 64;  // V up to 131072 in chunks; larger vocabularies take two passes
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    float* l = logits + (int64_t)n * V;
    uint16_t* d = dlogits16 + (int64_t)n * V;
    const int t = targets[n];
    if (V > kMaxChunks * kChunk) {
      const float z = row_lse(l, V);
      lse[n] = z;
      losses[n] = t < 0 ? 0.0f : z - l[t];
      row_grad_bf16(d, l, z, t, dloss, V);
      continue;
    }
    const float lt = t < 0 ? 0.0f : l[t];
    float cmax[kMaxChunks], csum[kMaxChunks];
    float m = -std::numeric_limits<float>::infinity();
    int k = 0;
    for (int v0 = 0; v0 < V; v0 += kChunk, k++) {  // e^(l - chunk max), kept in place
      const int v1 = v0 + kChunk < V ? v0 + kChunk : V;
      cmax[k] = vmath::max_of(l + v0, v1 - v0, -std::numeric_limits<float>::infinity());
      csum[k] = vmath::exp_sub_sum(l + v0, l + v0, cmax[k], v1 - v0);
      m = cmax[k] > m ? cmax[k] : m;
    }
    double s = 0.0;
    for (int i = 0; i < k; i++) s += (double)csum[i] * vmath::exp1(cmax[i] - m);
    const float z = m + (float)std::log(s);
    lse[n] = z;
    losses[n] = t < 0 ? 0.0f : z - lt;
    if (t < 0) {
      for (int v = 0; v < V; v++) d[v] = 0;
      continue;
    }
    k = 0;
    for (int v0 = 0; v0 < V; v0 += kChunk, k++) {
      const int v1 = v0 + kChunk < V ? v0 + kChunk : V;
      const float f = vmath::exp1(cmax[k] - z) * dloss;
      const __m256 vf = _mm256_set1_ps(f);
      int v = v0;
      for (; v + 16 <= v1; v += 16)
        _mm256_storeu_si256((__m256i*)(d + v), vmath::bf16_pack16(_mm256_mul_ps(_mm256_loadu_ps(l + v), vf),
                                                                   _mm256_mul_ps(_mm256_loadu_ps(l + v + 8), vf)));
      for (; v < v1; v++) d[v] = vmath::bf16_round(l[v] * f);
      if (t >= v0 && t < v1) d[t] = vmath::bf16_round(l[t] * f - dloss);
    }
  }
}

void cross_entropy_backward(float* logits, const float* lse, const int32_t* targets, float dloss,
                            int N, int V) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    float* l = logits + (int64_t)n * V;
    int t = targets[n];
    if (t < 0) {
      for (int v = 0; v < V; v++) l[v] = 0.0f;
      continue;
    }
    const float z = lse[n];
    const __m256 vz = _mm256_set1_ps(z), vd = _mm256_set1_ps(dloss);
    int v = 0;
    for (; v + 8 <= V; v += 8)
      _mm256_storeu_ps(l + v, _mm256_mul_ps(vmath::exp8(_mm256_sub_ps(_mm256_loadu_ps(l + v), vz)), vd));
    for (; v < V; v++) l[v] = vmath::exp1(l[v] - z) * dloss;
    l[t] -= dloss;
  }
}

void cross_entropy_backward_bf16(uint16_t* dlogits16, const float* logits, const float* lse,
                                 const int32_t* targets, float dloss, int N, int V) {
  // The fp32 kernel's values, rounded to bf16 as they are made: one read of the logits and one
  // half-size write, instead of an fp32 write and a conversion pass over it.
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++)
    row_grad_bf16(dlogits16 + (int64_t)n * V, logits + (int64_t)n * V, lse[n], targets[n], dloss, V);
}

double softmax_entropy(const float* z, int V) {
  const float m = vmath::max_of(z, V, -std::numeric_limits<float>::infinity());
  const __m256 vm = _mm256_set1_ps(m);
  double sum = 0.0, sz = 0.0;
  for (int v0 = 0; v0 < V; v0 += kChunk) {
    const int v1 = v0 + kChunk < V ? v0 + kChunk : V;
    __m256 as = _mm256_setzero_ps(), az = _mm256_setzero_ps();
    int v = v0;
    for (; v + 8 <= v1; v += 8) {
      const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(z + v), vm);
      const __m256 e = vmath::exp8(d);
      as = _mm256_add_ps(as, e);
      az = _mm256_fmadd_ps(e, d, az);
    }
    float cs = vmath::hsum8(as), cz = vmath::hsum8(az);
    for (; v < v1; v++) {
      const float d = z[v] - m, e = vmath::exp1(d);
      cs += e, cz += e * d;
    }
    sum += cs, sz += cz;
  }
  return std::log(sum) - sz / sum;
}

void cross_entropy_forward_ref(float* losses, const float* logits, const int32_t* targets, int N,
                               int V) {
  for (int n = 0; n < N; n++) {
    const float* l = logits + (int64_t)n * V;
    double m = l[0];
    for (int v = 0; v < V; v++) m = l[v] > m ? l[v] : m;
    double s = 0;
    for (int v = 0; v < V; v++) s += std::exp(l[v] - m);
    losses[n] = targets[n] < 0 ? 0.0f : (float)(m + std::log(s) - l[targets[n]]);
  }
}

void cross_entropy_backward_ref(float* dlogits, const float* logits, const int32_t* targets,
                                float dloss, int N, int V) {
  for (int n = 0; n < N; n++) {
    const float* l = logits + (int64_t)n * V;
    double m = l[0];
    for (int v = 0; v < V; v++) m = l[v] > m ? l[v] : m;
    double s = 0;
    for (int v = 0; v < V; v++) s += std::exp(l[v] - m);
    for (int v = 0; v < V; v++) {
      double p = std::exp(l[v] - m) / s;
      dlogits[(int64_t)n * V + v] =
          targets[n] < 0 ? 0.0f : (float)(dloss * (p - (v == targets[n] ? 1.0 : 0.0)));
    }
  }
}

}  // namespace smelt
