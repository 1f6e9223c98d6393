// The whole decoder against an independent PyTorch reference (tests/reference/llama_ref.py, run
// by Debian's /usr/bin/python3 in float64): logits, loss and every parameter gradient for several
// configs, and the first AdamW steps vs torch.optim.AdamW; plus recompute == no recompute and
// 1 thread == 2 threads bit for bit, and the memory plan.
//
// Tolerances (compared as max|c++ - torch| / max|torch| per tensor): the C++ side is fp32, the
// reference fp64, so the error is fp32 rounding (2^-24 ~ 6e-8) grown through ~20 dependent ops
// and sums of up to V = 512 terms: measured ~1e-6 for logits and ~1e-5 for the worst gradient.
// We allow 1e-4 for logits and loss and 1e-3 for gradients (about 10-100x the measured error,
// far below what a real bug gives: a wrong mask, RoPE pairing or missing term moves a gradient
// by O(1) relative). After AdamW steps, Adam divides each gradient by its own RMS, so tiny
// gradients whose fp32 noise is relatively large can move by up to ~lr: parameters are compared
// with an absolute tolerance of lr * steps * 0.05 (see docs/model.md).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <ostream>
#include <random>
#include <string>

#include <gtest/gtest.h>
#include <unistd.h>

#include "smelt/common/config.hpp"
#include "smelt/model/model.hpp"
#include "smelt/train/optimizer.hpp"
#include "model_ref.hpp"
#include "smtn.hpp"

using namespace smelt;

namespace {

using test::Tensor;
using test::TensorMap;
using test::read_smtn;
using test::write_smtn;
using test::rel_err;
using test::make_batch;
using test::run_reference;
using test::tiny;

// The open-weight families' features (docs/import.md) on the tiny model.
ModelConfig qwen2(bool recompute) {  // q/k/v biases, GQA
  ModelConfig c = tiny(2, true, recompute);
  c.qkv_bias = true;
  return c;
}
ModelConfig qwen3() {  // QK-norm and a head size that is not d_model / n_heads (4 x 32 = 128 != 64)
  ModelConfig c = tiny(2, false, false);
  c.qk_norm = true;
  c.head_dim = 32;
  c.norm_eps = 1e-6;
  return c;
}
ModelConfig llama31(RopeScaling kind) {  // Llama 3.1 RoPE scaling with a short original context so it acts at T=64
  ModelConfig c = tiny(1, true, false);
  c.rope_scaling = kind;
  c.rope_factor = 8.0;
  c.rope_low_freq_factor = 1.0;
  c.rope_high_freq_factor = 4.0;
  c.rope_original_max_seq_len = 16;
  return c;
}
ModelConfig everything() {
  ModelConfig c = qwen3();
  c.qkv_bias = true;
  c.recompute = true;
  c.rope_scaling = RopeScaling::kLlama3;
  c.rope_factor = 4.0;
  c.rope_original_max_seq_len = 32;
  return c;
}

// Biases start at 0 and norms at 1, where a wrong use of them would not show: random values.
void perturb_extras(Model& m) {
  std::mt19937_64 g(11);
  std::normal_distribution<float> z(0.0f, 1.0f);
  for (const auto& t : m.layout().tensors) {
    const bool bias = t.name.find(".bias") != std::string::npos, qk = t.name.find("_norm.weight") != std::string::npos;
    if (!bias && !(qk && t.name.find("self_attn") != std::string::npos)) continue;
    for (int64_t i = 0; i < t.size(); i++) m.params()[t.offset + i] = bias ? 0.5f * z(g) : 1.0f + 0.3f * z(g);
  }
}

struct Case {
  const char* name;
  ModelConfig cfg;
  int B, T;
  bool segments, positions;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }  // readable ctest names

class VsPyTorch : public ::testing::TestWithParam<Case> {};

TEST_P(VsPyTorch, LogitsLossAndEveryGradient) {
  const Case& k = GetParam();
  Model m;
  ASSERT_TRUE(m.init(k.cfg, k.B, k.T, 2, 42).is_ok());
  perturb_extras(m);
  Batch b = make_batch(k.B, k.T, k.cfg.vocab_size, k.segments, k.positions, 7);
  TensorMap ref = run_reference(m, b, 0, AdamWConfig{}, k.name);
  ASSERT_TRUE(ref.count("logits") && ref.count("loss"));

  float loss = 0;
  ASSERT_TRUE(m.forward(b, loss).is_ok());
  double e_logits = rel_err(m.acts().logits, ref["logits"].f);
  EXPECT_LT(e_logits, 1e-4);
  EXPECT_NEAR(loss, ref["loss"].f[0], 1e-4 * std::fabs(ref["loss"].f[0]));
  m.zero_grad();
  m.backward();
  const test::GradErr w = test::expect_grads_near(m.layout(), m.grads(), ref, 1e-3);
  std::printf("[%s] loss %.6f (torch %.6f), logits err %.2e, worst gradient err %.2e (%s)\n",
              k.name, loss, ref["loss"].f[0], e_logits, w.worst, w.name.c_str());
}

INSTANTIATE_TEST_SUITE_P(
    Model, VsPyTorch,
    ::testing::Values(
        Case{"gqa_tied_T37", tiny(2, true, false), 2, 37, false, false},
        Case{"mha_untied_T64_docmask", tiny(4, false, false), 2, 64, true, true},
        Case{"mqa_untied_T70_recompute", tiny(1, false, true), 1, 70, false, false},
        Case{"qwen2_qkv_bias_T48", qwen2(false), 2, 48, false, false},
        Case{"qwen2_qkv_bias_recompute_docmask", qwen2(true), 2, 40, true, true},
        Case{"qwen3_qk_norm_head_dim32_T45", qwen3(), 2, 45, false, false},
        Case{"llama3_rope_scaling_T64", llama31(RopeScaling::kLlama3), 2, 64, false, false},
        Case{"linear_rope_scaling_T64", llama31(RopeScaling::kLinear), 1, 64, false, true},
        Case{"every_feature_T50_docmask", everything(), 2, 50, true, true}),
    [](const auto& info) { return std::string(info.param.name); });

// bf16 mixed precision against the same PyTorch reference with its linear layers in bf16
// (llama_ref.py's Bf16Linear: inputs and incoming gradients rounded to bf16, exact sums). Both
// round at the same places (llama_ref.py also rounds the attention products: Bf16Matmul); what
// differs is fp32 against fp64 upstream of each rounding, which now and then moves a value across
// a bf16 rounding edge (one bf16 ulp, 2^-8 relative), and D = dO . O for the softmax gradient
// where autograd sums P dP: measured 7e-8 to 6.4e-3 for logits and 5.5e-3 to 7.2e-3 for the
// worst gradient. Tolerances 1e-2 and 4e-2. The same Smelt numbers against the fp32 reference are further away (8e-3 and 1.3e-2 to
// 1.5e-2: bf16 rounding everywhere), checked too, so the test fails if the bf16 path were fp32.
TEST_P(VsPyTorch, Bf16LogitsLossAndEveryGradient) {
  const Case& k = GetParam();
  Model m;
  m.set_precision(Precision::kBf16);
  ASSERT_TRUE(m.init(k.cfg, k.B, k.T, 2, 42).is_ok());
  perturb_extras(m);
  Batch b = make_batch(k.B, k.T, k.cfg.vocab_size, k.segments, k.positions, 7);
  TensorMap ref = run_reference(m, b, 0, AdamWConfig{}, std::string(k.name) + "_bf16", true);
  TensorMap ref32 = run_reference(m, b, 0, AdamWConfig{}, std::string(k.name) + "_fp32");
  float loss = 0;
  ASSERT_TRUE(m.forward(b, loss).is_ok());
  const double e_logits = rel_err(m.acts().logits, ref["logits"].f);
  const double e_logits32 = rel_err(m.acts().logits, ref32["logits"].f);
  EXPECT_LT(e_logits, 1e-2);
  EXPECT_GT(e_logits32, e_logits) << "bf16 Smelt is as close to fp32 as to bf16 PyTorch";
  EXPECT_NEAR(loss, ref["loss"].f[0], 2e-3 * std::fabs(ref["loss"].f[0]));
  m.zero_grad();
  m.backward();
  double worst = 0, worst32 = 0;
  for (const auto& t : m.layout().tensors) {
    double e = rel_err(m.grads() + t.offset, ref["grad." + t.name].f);
    EXPECT_LT(e, 4e-2) << t.name;
    worst = std::max(worst, e);
    worst32 = std::max(worst32, rel_err(m.grads() + t.offset, ref32["grad." + t.name].f));
  }
  std::printf("[%s bf16] loss %.6f (torch bf16 %.6f, fp32 %.6f), logits err %.2e (vs fp32 %.2e), worst "
              "gradient err %.2e (vs fp32 %.2e)\n", k.name, loss, ref["loss"].f[0], ref32["loss"].f[0], e_logits, e_logits32,
              worst, worst32);
  // With the attention extras (biases of N(0, 0.5), QK-norm) the gradients that sum over every
  // row and nearly cancel (a key bias shared by all keys leaves the softmax unchanged but for
  // RoPE; the q projection's under document masks) carry bf16 rounding noise as large against
  // either reference (measured 1.5e-2 and 2e-2 against both): the contrast is the logits' there.
  const ModelConfig& c = k.cfg;
  if (!c.qkv_bias && !c.qk_norm) {
    EXPECT_GT(worst32, 1.5 * worst);
  }
}

// Recomputation reruns the same kernels on the same inputs: gradients are bit-identical.
TEST(Model, RecomputeGivesIdenticalGradients) {
  std::vector<float> grads[2];
  float losses[2];
  int64_t act_bytes[2];
  for (int r = 0; r < 2; r++) {
    Model m;
    ASSERT_TRUE(m.init(tiny(2, false, r == 1), 2, 64, 2, 3).is_ok());
    Batch b = make_batch(2, 64, 512, true, true, 9);
    ASSERT_TRUE(m.forward(b, losses[r]).is_ok());
    m.zero_grad();
    m.backward();
    grads[r].assign(m.grads(), m.grads() + m.layout().total);
    act_bytes[r] = m.plan().activation_bytes;
  }
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_TRUE(grads[0] == grads[1]);
  EXPECT_LT(act_bytes[1], act_bytes[0]);
}

// The end of a run frees the step's buffers (at least the planned activations, and the bf16
// copies under bf16); the parameters stay, and forward refuses every batch afterwards.
TEST(Model, ReleaseStepBuffersFreesTheActivationsAndRefusesBatches) {
  for (Precision p : {Precision::kFp32, Precision::kBf16}) {
    Model m;
    m.set_precision(p);
    ASSERT_TRUE(m.init(tiny(2, false, false), 2, 64, 2, 3).is_ok());
    Batch b = make_batch(2, 64, 512, false, false, 9);
    float loss = 0;
    ASSERT_TRUE(m.forward(b, loss).is_ok());
    const std::vector<float> params(m.params(), m.params() + m.layout().total);
    const int64_t freed = m.release_step_buffers();
    EXPECT_GE(freed, m.plan().activation_bytes) << precision_name(p);
    EXPECT_TRUE(std::equal(params.begin(), params.end(), m.params()));
    EXPECT_EQ(m.release_step_buffers(), 0);  // nothing left to free
    Status s = m.forward(b, loss);
    EXPECT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find("does not fit"), std::string::npos) << s.message();
  }
}

// Segments mask attention only when the batch asks for it (the loader sets mask_segments from
// [data] doc_mask): with it off the logits are those of the same batch without segments; with it
// on they differ (the second document no longer sees the first).
TEST(Model, SegmentsMaskAttentionOnlyWhenAsked) {
  Model m;
  ASSERT_TRUE(m.init(tiny(2, false, false), 2, 64, 2, 3).is_ok());
  const Batch with = make_batch(2, 64, 512, true, false, 9);
  Batch plain = with, spans = with;
  plain.segments.clear();
  spans.mask_segments = false;
  float loss = 0;
  std::vector<float> logits[3];
  const Batch* bs[3] = {&plain, &spans, &with};
  for (int i = 0; i < 3; i++) {
    ASSERT_TRUE(m.forward(*bs[i], loss).is_ok());
    logits[i].assign(m.acts().logits, m.acts().logits + (size_t)2 * 64 * 512);
  }
  EXPECT_TRUE(logits[1] == logits[0]) << "mask_segments = false must attend across documents";
  EXPECT_FALSE(logits[2] == logits[0]) << "mask_segments = true must keep attention inside a document";
}

// The switch that runs every op on its naive `_ref` kernel (the oracle for new backends) gives
// the same loss and gradients up to fp32 rounding (the references accumulate in double).
TEST(Model, ReferenceKernelsMatchFastKernels) {
  Batch b = make_batch(2, 70, 512, true, true, 17);
  std::vector<float> grads[2], logits[2];
  float losses[2];
  for (int r = 0; r < 2; r++) {
    Model m;
    ASSERT_TRUE(m.init(tiny(2, false, false), 2, 70, 2, 8).is_ok());
    m.set_reference(r == 1);
    ASSERT_TRUE(m.forward(b, losses[r]).is_ok());
    logits[r].assign(m.acts().logits, m.acts().logits + 2 * 70 * 512);
    m.zero_grad();
    m.backward();
    grads[r].assign(m.grads(), m.grads() + m.layout().total);
    for (const auto& t : m.layout().tensors) {
      if (r == 0) continue;
      std::vector<float> fast(grads[0].begin() + t.offset, grads[0].begin() + t.offset + t.size());
      EXPECT_LT(rel_err(m.grads() + t.offset, fast), 1e-4) << t.name;
    }
  }
  EXPECT_NEAR(losses[0], losses[1], 1e-5);
  EXPECT_LT(rel_err(logits[0].data(), logits[1]), 1e-5);
}

// bf16 precision on the fast kernels (oneDNN or the portable path) and on the references: the
// linear layers' references round as the fast ones do (double sums); attention's reference is
// the fp32 one (the bf16 attention kernel is checked against it in attention_test, and the whole
// bf16 model against PyTorch's bf16 attention above), so the two differ by bf16 attention
// rounding: measured up to 1.4e-2 per gradient, allowed 3e-2. And 1 vs 2 threads: same bits.
TEST(Model, Bf16ReferenceKernelsMatchFastKernelsAndThreadCountsAgree) {
  Batch b = make_batch(8, 128, 512, true, true, 17);
  std::vector<float> grads[3];
  float losses[3];
  for (int r = 0; r < 3; r++) {
    Model m;
    m.set_precision(Precision::kBf16);
    ASSERT_TRUE(m.init(tiny(2, false, false), 8, 128, r == 1 ? 1 : 2, 8).is_ok());
    EXPECT_GT(m.plan().bf16_bytes, 0);
    m.set_reference(r == 2);
    ASSERT_TRUE(m.forward(b, losses[r]).is_ok());
    m.zero_grad();
    m.backward();
    grads[r].assign(m.grads(), m.grads() + m.layout().total);
    if (r < 2) continue;
    for (const auto& t : m.layout().tensors) {
      std::vector<float> fast(grads[0].begin() + t.offset, grads[0].begin() + t.offset + t.size());
      EXPECT_LT(rel_err(m.grads() + t.offset, fast), 3e-2) << t.name;
    }
  }
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_TRUE(grads[0] == grads[1]);
  EXPECT_NEAR(losses[0], losses[2], 2e-3);
}

// Training's forward under bf16 makes the LM head's gradient while the logits are in cache
// (forward with grad_dloss): the loss and gradients of forward then backward, to the one bf16
// rounding of the output gradient that differs (kernels/cross_entropy_test).
TEST(Model, Bf16FusedHeadGradientEqualsTheSeparateBackward) {
  for (bool tied : {false, true}) {
    std::vector<float> grads[2];
    float losses[2];
    for (int r = 0; r < 2; r++) {
      Model m;
      m.set_precision(Precision::kBf16);
      ASSERT_TRUE(m.init(tiny(2, tied, false), 4, 64, 2, 8).is_ok());
      Batch b = make_batch(4, 64, 512, true, true, 21);
      const float dloss = 1.0f / 229;  // not a power of two
      m.zero_grad();
      ASSERT_TRUE(m.forward(b, losses[r], r == 1 ? dloss : 0.0f).is_ok());
      m.backward(dloss);
      grads[r].assign(m.grads(), m.grads() + m.layout().total);
    }
    EXPECT_NEAR(losses[0], losses[1], 1e-5 * losses[0]) << "tied " << tied;
    EXPECT_LT(rel_err(grads[1].data(), grads[0]), 5e-3) << "tied " << tied;
    EXPECT_GT(rel_err(grads[1].data(), grads[0]), 0.0) << "the fused path ran";
  }
}

// The fixed reduction orders make the whole step independent of the thread count.
TEST(Model, OneAndTwoThreadsGiveIdenticalGradients) {
  std::vector<float> grads[2];
  for (int k = 0; k < 2; k++) {
    Model m;
    // N = 1024 rows: the GEMMs over rows are cut in two tiles (kernels/cpu/matmul.cpp), so
    // threads really split the work; T = 128 is two attention tiles
    ASSERT_TRUE(m.init(tiny(2, true, false), 8, 128, k + 1, 5).is_ok());
    Batch b = make_batch(8, 128, 512, true, true, 11);
    float loss;
    ASSERT_TRUE(m.forward(b, loss).is_ok());
    m.zero_grad();
    m.backward();
    grads[k].assign(m.grads(), m.grads() + m.layout().total);
  }
  EXPECT_TRUE(grads[0] == grads[1]);
}

// Three full steps (forward, backward, clip, AdamW) vs torch.optim.AdamW + clip_grad_norm_.
TEST(Model, AdamWStepsMatchTorch) {
  for (bool tied : {true, false}) {
    Model m;
    ASSERT_TRUE(m.init(tiny(2, tied, false), 2, 37, 2, 21).is_ok());
    AdamW opt;
    opt.init(m.layout(), 2);
    Batch b = make_batch(2, 37, 512, false, false, 13);
    AdamWConfig h;
    h.lr = 1e-3f;
    h.weight_decay = 0.1f;
    h.grad_clip = 0.5f;  // below the initial norm, so clipping is exercised
    const int steps = 3;
    TensorMap ref = run_reference(m, b, steps, h, tied ? "adamw_tied" : "adamw_untied");
    for (int s = 0; s < steps; s++) {
      float loss;
      ASSERT_TRUE(m.forward(b, loss).is_ok());
      EXPECT_NEAR(loss, ref["loss.step" + std::to_string(s)].f[0], 1e-4) << "step " << s;
      m.zero_grad();
      m.backward();
      float norm = opt.step(m.params(), m.grads(), h);
      if (s == 0) {
        EXPECT_GT(norm, h.grad_clip);
      }
    }
    double worst_all = 0;
    for (const auto& t : m.layout().tensors) {
      const auto& p = ref["param." + t.name].f;
      ASSERT_EQ((int64_t)p.size(), t.size()) << t.name;
      double worst = 0;
      for (int64_t i = 0; i < t.size(); i++)
        worst = std::max(worst, (double)std::fabs(m.params()[t.offset + i] - p[i]));
      EXPECT_LT(worst, h.lr * steps * 0.05) << t.name << (tied ? " tied" : " untied");
      worst_all = std::max(worst_all, worst);
    }
    std::printf("[adamw %s] worst |param - torch| after %d steps: %.2e (lr %.0e)\n",
                tied ? "tied" : "untied", steps, worst_all, h.lr);
  }
}

TEST(Model, MemoryPlanAndPresets) {
  for (const char* name : {"tiny", "small", "125m", "125m-gqa", "350m", "1b", "7b"}) {
    toml::table root;
    std::string path = std::string(SMELT_SOURCE_DIR) + "/configs/model-" + name + ".toml";
    ASSERT_TRUE(config_load(path, root).is_ok()) << path;
    ModelConfig c;
    Status s = model_config_read(root, c);
    ASSERT_TRUE(s.is_ok()) << path << ": " << s.message();
    MemoryPlan p = memory_plan(c, 1, c.max_seq_len);
    EXPECT_GT(p.activation_bytes, 0);
    EXPECT_EQ(p.optimizer_bytes, 2 * p.param_bytes);
  }
  // 7B at batch 4 x 2048 does not fit 64 GiB: refused with the numbers, before any allocation.
  toml::table root;
  ASSERT_TRUE(config_load(std::string(SMELT_SOURCE_DIR) + "/configs/model-7b.toml", root).is_ok());
  ModelConfig c;
  ASSERT_TRUE(model_config_read(root, c).is_ok());
  Model m;
  Status s = m.init(c, 4, 2048, 1, 1, int64_t(64) << 30);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("MiB"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("parameters"), std::string::npos) << s.message();
  EXPECT_GT(memory_physical_bytes(), 0);
  // recompute lowers the activation bytes
  ModelConfig r = c;
  c.recompute = false;
  r.recompute = true;
  EXPECT_LT(memory_plan(r, 4, 2048).activation_bytes, memory_plan(c, 4, 2048).activation_bytes);
}

TEST(Model, ConfigErrorsNameKeyValueAndRule) {
  toml::table root = toml::parse("[model]\nd_model = 64\nn_heads = 4\nn_kv_heads = 3\n");
  ModelConfig c;
  Status s = model_config_read(root, c);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("n_kv_heads = 3"), std::string::npos) << s.message();
  root = toml::parse("[model]\nd_modle = 64\n");
  s = model_config_read(root, c);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("d_modle"), std::string::npos) << s.message();
}

}  // namespace
