// KV-cache decoding speed: random weights of a [model] config, prefill P tokens, then N one-token
// steps (greedy), reporting tokens/s and the weight bandwidth one step implies (every weight read
// once per token). Usage: generate_bench CONFIG.toml [--threads N] [--prompt-tokens P]
// [--new-tokens N] [--precision fp32|bf16] (bf16: the weights read in bf16, half the bytes). Not a test and not `smelt generate` (no checkpoint, no tokenizer).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "smelt/common/config.hpp"
#include "smelt/model/inference.hpp"
#include "smelt/model/params.hpp"
#include "smelt/serve/sampling.hpp"

using namespace smelt;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: generate_bench CONFIG.toml [--threads N] [--prompt-tokens P] [--new-tokens N]\n");
    return 2;
  }
  int threads = 1, P = 512, N = 64;
  Precision precision = Precision::kFp32;
  for (int i = 2; i < argc; i++) {
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--prompt-tokens") && i + 1 < argc) P = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--new-tokens") && i + 1 < argc) N = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--precision") && i + 1 < argc)
      precision = !std::strcmp(argv[++i], "bf16") ? Precision::kBf16 : Precision::kFp32;
    else { std::fprintf(stderr, "generate_bench: unknown argument %s\n", argv[i]); return 2; }
  }
  toml::table root;
  if (auto s = config_load(argv[1], root); !s) { std::fprintf(stderr, "%s\n", s.message().c_str()); return 1; }
  root.erase("bench");
  ModelConfig c;
  if (auto s = model_config_read(root, c); !s) { std::fprintf(stderr, "%s\n", s.message().c_str()); return 1; }
  if (P + N > c.max_seq_len) c.max_seq_len = P + N;  // random weights: any RoPE length will do
  ParamLayout layout = param_layout(c);
  std::vector<float> params((size_t)layout.total);
  for (size_t i = 0; i < params.size(); i++) params[i] = (float)((int)((i * 2654435761u) % 1001) - 500) * 4e-5f;
  InferenceSession s;
  if (auto st = s.init(c, params.data(), P + N, threads, precision); !st) { std::fprintf(stderr, "%s\n", st.message().c_str()); return 1; }
  std::vector<int32_t> ids(P);
  for (int i = 0; i < P; i++) ids[i] = (int32_t)((i * 977u) % (unsigned)c.vocab_size);
  std::vector<float> logits(c.vocab_size);
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  if (auto st = s.prefill(ids.data(), P, logits.data()); !st) { std::fprintf(stderr, "%s\n", st.message().c_str()); return 1; }
  auto t1 = clock::now();
  for (int i = 0; i < N; i++)
    if (auto st = s.step(sampling_argmax(logits.data(), c.vocab_size), logits.data()); !st) {
      std::fprintf(stderr, "%s\n", st.message().c_str());
      return 1;
    }
  auto t2 = clock::now();
  const double a = std::chrono::duration<double>(t1 - t0).count(), b = std::chrono::duration<double>(t2 - t1).count();
  const double weight_gb = layout.total * (precision == Precision::kBf16 ? 2.0 : 4.0) / 1e9;
  std::printf("%s %s threads %d: %.1f MB weights, cache+scratch %.1f MiB; prefill %d tokens %.2f s (%.0f tokens/s); "
              "decode %d tokens at positions %d..%d %.2f s (%.1f tokens/s, %.1f GB/s of weights)\n",
              argv[1], precision_name(precision), threads, weight_gb * 1e3, s.bytes() / 1048576.0, P, a, P / a, N, P, P + N - 1, b, N / b,
              weight_gb * N / b);
  return 0;
}
