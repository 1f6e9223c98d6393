// Forward+backward(+AdamW) throughput of the decoder on random tokens: tokens/s per thread count.
// Usage: model_bench CONFIG.toml [--threads N] [--steps S] [--no-optim]
// CONFIG has [model] and [bench] batch, seq_len (configs/bench-small.toml). Not a trainer.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "smelt/common/config.hpp"
#include "smelt/model/model.hpp"

using namespace smelt;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: model_bench CONFIG.toml [--threads N] [--steps S] [--no-optim]\n");
    return 2;
  }
  int threads = 1, steps = 5;
  bool optim = true;
  for (int i = 2; i < argc; i++) {
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--no-optim")) optim = false;
  }
  toml::table root;
  if (auto s = config_load(argv[1], root); !s) { std::fprintf(stderr, "%s\n", s.message().c_str()); return 1; }
  ModelConfig c;
  ConfigSection bs(root, "bench");
  int B = 4, T = 512;
  bs.get("batch", B);
  bs.get("seq_len", T);
  root.erase("bench");  // [model] reads only its own section; the rest belongs to the bench
  if (auto s = model_config_read(root, c); !s) { std::fprintf(stderr, "%s\n", s.message().c_str()); return 1; }
  Model m;
  if (auto s = m.init(c, B, T, threads, 1); !s) { std::fprintf(stderr, "%s\n", s.message().c_str()); return 1; }
  Batch b;
  b.B = B;
  b.T = T;
  std::mt19937_64 g(1);
  for (int n = 0; n < B * T; n++) {
    b.inputs.push_back((int32_t)(g() % c.vocab_size));
    b.targets.push_back((int32_t)(g() % c.vocab_size));
  }
  AdamWConfig h;
  double best = 1e30, total = 0;
  for (int s = 0; s <= steps; s++) {  // step 0 warms up
    auto t0 = std::chrono::steady_clock::now();
    float loss;
    if (auto st = m.forward(b, loss); !st) { std::fprintf(stderr, "%s\n", st.message().c_str()); return 1; }
    m.zero_grad();
    m.backward();
    if (optim) m.optimizer_step(h);
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0) { best = std::min(best, dt); total += dt; }
    std::printf("step %d loss %.4f %.3f s\n", s, loss, dt);
  }
  std::printf("threads %d batch %dx%d: mean %.0f tokens/s, best %.0f tokens/s (%s)\n", threads, B,
              T, B * T * steps / total, B * T / best, optim ? "fwd+bwd+adamw" : "fwd+bwd");
  return 0;
}
