// Softmax cross-entropy over the vocabulary, fused: one streaming pass for the loss (online
// max/sum, chunked over V), one in-place pass turning logits into dlogits. Not the LM head GEMM.
#include <cmath>
#include <limits>

#include "smelt/kernels/kernels.hpp"

namespace smelt {

namespace {
constexpr int kChunk = 2048;  // vocabulary chunk: the running max is rescaled once per chunk
}

void cross_entropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                           int N, int V) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* l = logits + (int64_t)n * V;
    float m = -std::numeric_limits<float>::infinity(), s = 0.0f;
    for (int v0 = 0; v0 < V; v0 += kChunk) {
      int v1 = v0 + kChunk < V ? v0 + kChunk : V;
      float cm = m;
      for (int v = v0; v < v1; v++) cm = l[v] > cm ? l[v] : cm;
      float cs = 0.0f;
#pragma omp simd reduction(+ : cs)
      for (int v = v0; v < v1; v++) cs += std::exp(l[v] - cm);
      s = s * std::exp(m - cm) + cs;
      m = cm;
    }
    float z = m + std::log(s);
    lse[n] = z;
    int t = targets[n];
    losses[n] = t < 0 ? 0.0f : z - l[t];
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
    float z = lse[n];
#pragma omp simd
    for (int v = 0; v < V; v++) l[v] = std::exp(l[v] - z) * dloss;
    l[t] -= dloss;
  }
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
