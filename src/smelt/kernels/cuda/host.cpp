// The host-side helpers of the CUDA backend that need no CUDA (cuda_kernels.hpp): built with or
// without the CUDA compiler.
#include <cstring>

#include "smelt/kernels/cuda/cuda_kernels.hpp"

namespace smelt::cuda {

// A stable counting sort of the rows by token: each distinct token's rows stay in row order, so
// embedding_backward adds them in the order the CPU kernel does.
int embedding_order(int32_t* order, int32_t* starts, int32_t* tokens, int32_t* count, const int32_t* inp, int N,
                    int V) {
  std::memset(count, 0, sizeof(int32_t) * V);
  for (int n = 0; n < N; n++) count[inp[n]]++;
  int U = 0, at = 0;
  for (int v = 0; v < V; v++) {
    if (!count[v]) continue;
    tokens[U] = v;
    starts[U++] = at;
    const int c = count[v];
    count[v] = at;  // now the next free place of token v's run
    at += c;
  }
  starts[U] = at;
  for (int n = 0; n < N; n++) order[count[inp[n]]++] = n;
  return U;
}

}  // namespace smelt::cuda
