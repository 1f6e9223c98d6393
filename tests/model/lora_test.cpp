// LoRA adapters on every target (q, k, v, o, gate, up, down) against the PyTorch reference
// (tests/reference/llama_ref.py, float64 autograd, PEFT's definition y = x W^T + scale (drop(x)
// A^T) B^T): the logits, the loss and every adapter's gradient, in fp32 and bf16, with GQA, q/k/v
// biases, recompute and dropout (its masks passed to the reference). Also: PEFT's initial values
// leave the model as the base; the base is frozen (backward leaves its weights' gradients alone
// and touches only the adapters'); evaluation forwards do not drop; one and two threads agree bit
// for bit; the config's refusals.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "smelt/model/lora.hpp"
#include "smelt/model/model.hpp"
#include "model_ref.hpp"

using namespace smelt;
using test::make_batch;
using test::rel_err;
using test::run_reference;
using test::Tensor;
using test::TensorMap;
using test::tiny;

namespace {

LoraConfig lora(int rank, double dropout = 0.0, std::vector<std::string> targets = {"q", "k", "v", "o", "gate", "up", "down"}) {
  LoraConfig l;
  l.rank = rank;
  l.alpha = 2.0 * rank + 3;  // a scale that is not 1 or 2
  l.dropout = dropout;
  l.targets = std::move(targets);
  l.seed = 5;
  return l;
}

// PEFT starts B at zero (then A's gradient is zero too): random B so every product counts.
void randomize_b(Model& m) {
  std::mt19937_64 g(3);
  std::normal_distribution<float> z(0.0f, 0.2f);
  for (const auto& t : m.layout().tensors)
    if (t.name.find("lora_B") != std::string::npos)
      for (int64_t i = 0; i < t.size(); i++) m.params()[t.offset + i] = z(g);
}

// The dropout factors the model used in its last training forward, as the reference reads them.
std::vector<std::pair<std::string, Tensor>> masks(const Model& m, int N) {
  std::vector<std::pair<std::string, Tensor>> out;
  const LoraConfig& l = m.lora_config();
  if (l.dropout <= 0) return out;
  for (int layer = 0; layer < m.config().n_layers; layer++)
    for (int t = 0; t < kLoraTargets; t++) {
      const LoraSlot& s = m.lora_layout().layers[layer][t];
      if (s.a < 0) continue;
      Tensor x;
      x.dims = {N, s.in};
      for (int n = 0; n < N; n++)
        for (int i = 0; i < s.in; i++) x.f.push_back(lora_keep(l.seed, m.lora_counter(), layer, t, n, i, l.dropout));
      out.push_back({fmt::format("lora_mask.model.layers.{}.{}", layer, lora_module_name(t)), std::move(x)});
    }
  return out;
}

struct Case {
  const char* name;
  ModelConfig cfg;
  int B, T;
  double dropout;
  bool bf16;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

ModelConfig with_bias(ModelConfig c) {
  c.qkv_bias = true;
  return c;
}

class LoraVsPyTorch : public ::testing::TestWithParam<Case> {};

}  // namespace

TEST_P(LoraVsPyTorch, LogitsLossAndEveryAdapterGradient) {
  const Case& k = GetParam();
  Model m;
  if (k.bf16) m.set_precision(Precision::kBf16);
  m.set_lora(lora(4, k.dropout));
  ASSERT_TRUE(m.init(k.cfg, k.B, k.T, 2, 42).is_ok());
  ASSERT_EQ(m.layout().tensors.size(), (size_t)(2 * kLoraTargets * k.cfg.n_layers)) << "every target, A and B";
  randomize_b(m);
  const Batch b = make_batch(k.B, k.T, k.cfg.vocab_size, true, true, 7);
  float loss = 0;
  ASSERT_TRUE(m.forward(b, loss).is_ok());
  TensorMap ref = run_reference(m, b, 0, AdamWConfig{}, std::string("lora_") + k.name, k.bf16, masks(m, k.B * k.T));
  ASSERT_TRUE(ref.count("logits") && ref.count("loss"));
  const double tol_logits = k.bf16 ? 1e-2 : 1e-4, tol_grad = k.bf16 ? 4e-2 : 1e-3;
  const double e_logits = rel_err(m.acts().logits, ref["logits"].f);
  EXPECT_LT(e_logits, tol_logits);
  EXPECT_NEAR(loss, ref["loss"].f[0], (k.bf16 ? 2e-3 : 1e-4) * std::fabs(ref["loss"].f[0]));
  // The base's gradients are not made: a marker in them survives the backward.
  std::vector<float> base_before(m.base_params(), m.base_params() + m.base_layout().total);
  m.zero_grad();
  m.backward();
  double worst = 0;
  std::string worst_name;
  for (const auto& t : m.layout().tensors) {
    const auto& g = ref["grad." + t.name].f;
    ASSERT_EQ((int64_t)g.size(), t.size()) << t.name;
    const double e = rel_err(m.grads() + t.offset, g);
    EXPECT_LT(e, tol_grad) << t.name;
    double norm = 0;
    for (float v : g) norm += (double)v * v;
    EXPECT_GT(norm, 0.0) << t.name << ": the reference's gradient is zero, the check would be empty";
    if (e > worst) worst = e, worst_name = t.name;
  }
  EXPECT_EQ(std::memcmp(base_before.data(), m.base_params(), sizeof(float) * base_before.size()), 0);
  std::printf("[lora %s] loss %.6f (torch %.6f), logits err %.2e, worst adapter gradient err %.2e (%s)\n", k.name,
              loss, ref["loss"].f[0], e_logits, worst, worst_name.c_str());
}

INSTANTIATE_TEST_SUITE_P(
    Model, LoraVsPyTorch,
    ::testing::Values(Case{"gqa_untied_T37", tiny(2, false, false), 2, 37, 0.0, false},
                      Case{"qkv_bias_recompute_T40", with_bias(tiny(1, true, true)), 2, 40, 0.0, false},
                      Case{"dropout_recompute_T33", tiny(2, true, true), 2, 33, 0.25, false},
                      Case{"bf16_gqa_T37", tiny(2, false, false), 2, 37, 0.0, true},
                      Case{"bf16_dropout_T30", tiny(4, true, false), 2, 30, 0.1, true}),
    [](const auto& info) { return std::string(info.param.name); });

// PEFT's initial values (B = 0) leave the model as the base, bit for bit; a subset of targets has
// only those adapters; an evaluation forward does not drop, a training forward does.
TEST(Lora, StartsAsTheBaseAndDropsOnlyWhenTraining) {
  const ModelConfig c = tiny(2, false, false);
  const Batch b = make_batch(2, 24, c.vocab_size, false, false, 9);
  Model base, adapted;
  ASSERT_TRUE(base.init(c, 2, 24, 1, 42).is_ok());
  adapted.set_lora(lora(8, 0.3, {"q", "v", "down"}));
  ASSERT_TRUE(adapted.init(c, 2, 24, 1, 42).is_ok());
  ASSERT_EQ(adapted.layout().tensors.size(), (size_t)(2 * 3 * c.n_layers));
  for (const auto& t : adapted.layout().tensors)
    EXPECT_TRUE(t.name.find("q_proj") != std::string::npos || t.name.find("v_proj") != std::string::npos ||
                t.name.find("down_proj") != std::string::npos) << t.name;
  EXPECT_EQ(adapted.layout().tensors[0].name, "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
  float l0 = 0, l1 = 0, l2 = 0;
  ASSERT_TRUE(base.forward(b, l0).is_ok());
  ASSERT_TRUE(adapted.forward(b, l1).is_ok());
  EXPECT_EQ(l0, l1) << "B = 0: the adapted model is the base";
  randomize_b(adapted);
  ASSERT_TRUE(adapted.forward_loss(b, l1).is_ok());
  ASSERT_TRUE(adapted.forward_loss(b, l2).is_ok());
  EXPECT_EQ(l1, l2) << "evaluation: no dropout, the same loss each time";
  ASSERT_TRUE(adapted.forward(b, l2).is_ok());
  EXPECT_NE(l1, l2) << "a training forward drops the adapters' inputs";
  const uint64_t counter = adapted.lora_counter();
  float l3 = 0;
  adapted.set_lora_counter(counter - 1);
  ASSERT_TRUE(adapted.forward(b, l3).is_ok());
  EXPECT_EQ(l2, l3) << "the same counter draws the same masks";
}

// The adapters' gradients do not depend on the thread count (fixed tiles).
TEST(Lora, OneAndTwoThreadsGiveIdenticalGradients) {
  const ModelConfig c = tiny(2, false, false);
  const Batch b = make_batch(3, 100, c.vocab_size, false, false, 4);  // 300 rows: several tiles
  std::vector<float> g[2];
  for (int threads : {1, 2}) {
    Model m;
    m.set_lora(lora(4, 0.1));
    ASSERT_TRUE(m.init(c, 3, 100, threads, 42).is_ok());
    randomize_b(m);
    float loss = 0;
    ASSERT_TRUE(m.forward(b, loss).is_ok());
    m.zero_grad();
    m.backward();
    g[threads - 1].assign(m.grads(), m.grads() + m.layout().total);
  }
  EXPECT_EQ(g[0], g[1]);
}

TEST(Lora, ConfigRefusalsNameTheKey) {
  struct Bad {
    LoraConfig l;
    const char* says;
  };
  LoraConfig ok = lora(4);
  EXPECT_TRUE(lora_config_validate(ok).is_ok());
  std::vector<Bad> bad;
  bad.push_back({lora(0), "rank"});
  LoraConfig a = ok;
  a.alpha = 0;
  bad.push_back({a, "alpha"});
  LoraConfig d = ok;
  d.dropout = 1.0;
  bad.push_back({d, "dropout"});
  bad.push_back({lora(4, 0, {"q", "qq"}), "unknown target \"qq\""});
  bad.push_back({lora(4, 0, {"q", "q"}), "named twice"});
  bad.push_back({lora(4, 0, {}), "targets is empty"});
  for (const Bad& x : bad) {
    const Status s = lora_config_validate(x.l);
    ASSERT_FALSE(s.is_ok()) << x.says;
    EXPECT_NE(s.message().find(x.says), std::string::npos) << s.message();
  }
  // A model split over ranks is refused with LoRA, naming what the rank holds.
  Model m;
  m.set_lora(ok);
  ModelShard tp;
  tp.tp = 2;
  const Status s = m.init(tiny(2, false, false), tp, 1, 8, 1, 1, 0, 1, 1);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("[lora]"), std::string::npos) << s.message();
}
