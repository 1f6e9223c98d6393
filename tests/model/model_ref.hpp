// Shared by the model's tests against PyTorch (model_test, lora_test): the relative error, a
// batch with optional document masks and positions, the reference run (tests/reference/llama_ref.py
// on the model's weights, and its adapters when LoRA is on), the tiny config. Not product code.
#pragma once
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "smelt/model/model.hpp"
#include "smelt/train/optimizer.hpp"
#include "smtn.hpp"

namespace smelt::test {

// max|a-b| / max|b|
inline double rel_err(const float* a, const std::vector<float>& b) {
  double m = 0, s = 1e-30;
  for (size_t i = 0; i < b.size(); i++) {
    s = std::max(s, (double)std::fabs(b[i]));
    m = std::max(m, (double)std::fabs(a[i] - b[i]));
  }
  return m / s;
}

// Every gradient of `lay` (in grads) against the reference's "grad.NAME": each within tol; an
// empty reference gradient fails when nonzero_ref (the check would be empty). The worst error
// and its tensor's name.
struct GradErr {
  double worst = 0;
  std::string name;
};
inline GradErr expect_grads_near(const ParamLayout& lay, const float* grads, TensorMap& ref, double tol,
                                 bool nonzero_ref = false) {
  GradErr w;
  for (const auto& t : lay.tensors) {
    const auto& g = ref["grad." + t.name].f;
    EXPECT_EQ((int64_t)g.size(), t.size()) << t.name;
    if ((int64_t)g.size() != t.size()) continue;
    const double e = rel_err(grads + t.offset, g);
    EXPECT_LT(e, tol) << t.name;
    if (nonzero_ref) {
      double norm = 0;
      for (float v : g) norm += (double)v * v;
      EXPECT_GT(norm, 0.0) << t.name << ": the reference's gradient is zero, the check would be empty";
    }
    if (e > w.worst) w = {e, t.name};
  }
  return w;
}

inline Batch make_batch(int B, int T, int V, bool segments, bool positions, uint64_t seed) {
  Batch b;
  b.B = B;
  b.T = T;
  std::mt19937_64 g(seed);
  for (int n = 0; n < B * T; n++) {
    b.inputs.push_back((int32_t)(g() % V));
    b.targets.push_back(n % 11 == 5 ? -1 : (int32_t)(g() % V));  // some positions carry no loss
  }
  if (segments || positions) {
    for (int r = 0; r < B; r++) {
      int cut = T / 3 + r;  // a document boundary inside each row
      for (int t = 0; t < T; t++) {
        if (segments) b.segments.push_back(t < cut ? 0 : 1);
        if (positions) b.positions.push_back(t < cut ? t : t - cut);
      }
    }
  }
  return b;
}

// Writes weights + batch, runs the reference, reads its answers.
// With LoRA on, the base's weights and the adapters (PEFT names) with their scale; `extra` tensors
// (the dropout masks) are passed as they are.
inline TensorMap run_reference(Model& m, const Batch& b, int steps, const AdamWConfig& h, const std::string& tag,
                               bool bf16 = false, std::vector<std::pair<std::string, Tensor>> extra = {}) {
  const ModelConfig& c = m.config();
  std::vector<std::pair<std::string, Tensor>> ts;
  ts.push_back({"config.int", {{}, {c.vocab_size, c.d_model, c.n_layers, c.n_heads, c.n_kv_heads,
                                    c.ffn_hidden, c.tie_embeddings ? 1 : 0, b.B, b.T, steps,
                                    b.segments.empty() ? 0 : 1, b.positions.empty() ? 0 : 1},
                               {12}}});
  ts.push_back({"config.float", {{(float)c.rope_theta, (float)c.norm_eps, h.lr, h.beta1, h.beta2,
                                  h.eps, h.weight_decay, h.grad_clip}, {}, {8}}});
  if (bf16) ts.push_back({"precision.bf16", {{}, {1}, {1}}});
  if (c.head_dim || c.qkv_bias || c.qk_norm || c.rope_scaling != RopeScaling::kNone) {
    ts.push_back({"config.ext", {{}, {c.head_dim, c.qkv_bias ? 1 : 0, c.qk_norm ? 1 : 0, (int)c.rope_scaling,
                                      c.rope_original_max_seq_len}, {5}}});
    ts.push_back({"config.rope", {{(float)c.rope_factor, (float)c.rope_low_freq_factor,
                                   (float)c.rope_high_freq_factor}, {}, {3}}});
  }
  ts.push_back({"inputs", {{}, b.inputs, {b.B, b.T}}});
  ts.push_back({"targets", {{}, b.targets, {b.B, b.T}}});
  if (!b.segments.empty()) ts.push_back({"segments", {{}, b.segments, {b.B, b.T}}});
  if (!b.positions.empty()) ts.push_back({"positions", {{}, b.positions, {b.B, b.T}}});
  auto add = [&ts](const ParamLayout& lay, const float* p) {
    for (const auto& t : lay.tensors) {
      Tensor x;
      x.f.assign(p + t.offset, p + t.offset + t.size());
      x.dims = t.cols == 1 ? std::vector<int64_t>{t.rows} : std::vector<int64_t>{t.rows, t.cols};
      ts.push_back({t.name, std::move(x)});
    }
  };
  add(m.base_layout(), m.base_params());
  if (m.lora_on()) {
    add(m.layout(), m.params());
    ts.push_back({"config.lora", {{m.lora_config().scale()}, {}, {1}}});
  }
  for (auto& e : extra) ts.push_back(std::move(e));
  std::string dir = ::testing::TempDir();
  std::string in = dir + "smelt_model_" + tag + "_" + std::to_string(getpid()) + ".in";
  std::string out = dir + "smelt_model_" + tag + "_" + std::to_string(getpid()) + ".out";
  write_smtn(in, ts);
  std::string cmd = std::string("/usr/bin/python3 ") + SMELT_SOURCE_DIR +
                    "/tests/reference/llama_ref.py " + in + " " + out;
  int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << cmd;
  TensorMap r = read_smtn(out);
  std::remove(in.c_str());
  std::remove(out.c_str());
  return r;
}

inline ModelConfig tiny(int nkv, bool tied, bool recompute) {
  ModelConfig c;
  c.vocab_size = 512;
  c.d_model = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = nkv;
  c.ffn_hidden = 176;
  c.max_seq_len = 128;
  c.tie_embeddings = tied;
  c.recompute = recompute;
  c.init_std = 0.1;  // larger than 0.02 so attention is far from uniform and every term matters
  return c;
}

}  // namespace smelt::test
