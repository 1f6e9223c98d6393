// LoRA adapters on every target (q, k, v, o, gate, up, down) against the PyTorch reference
// (tests/reference/llama_ref.py, float64 autograd, PEFT's definition y = x W^T + scale (drop(x)
// A^T) B^T): the logits, the loss and every adapter's gradient, in fp32 and bf16, with GQA, q/k/v
// biases, recompute and dropout (its masks passed to the reference). Also: PEFT's initial values
// leave the model as the base; the base is frozen (backward leaves its weights' gradients alone
// and touches only the adapters'); evaluation forwards do not drop; one and two threads agree bit
// for bit; the config's refusals; the merge (W + scale B A) equals the adapters' forward, and the
// serving decoder with the adapters unmerged equals the training forward and the merged decoder
// and keeps its batch invariance; a base held in bf16 gives the bf16 run's bits and one in q8_0 its
// dequantized weights' results, each in the memory its plan says.
#include <malloc.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "smelt/model/decoder.hpp"
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
  const test::GradErr w = test::expect_grads_near(m.layout(), m.grads(), ref, tol_grad, true);
  EXPECT_EQ(std::memcmp(base_before.data(), m.base_params(), sizeof(float) * base_before.size()), 0);
  std::printf("[lora %s] loss %.6f (torch %.6f), logits err %.2e, worst adapter gradient err %.2e (%s)\n", k.name,
              loss, ref["loss"].f[0], e_logits, w.worst, w.name.c_str());
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

namespace {
// The adapters of a model with LoRA on, as a merge or a decoder reads them.
LoraAdapters adapters_of(const Model& m) {
  LoraAdapters a;
  a.config = m.lora_config();
  a.layout = m.lora_layout();
  a.params.assign(m.params(), m.params() + m.layout().total);
  return a;
}
// The base with every target's adapter merged in, as the export does it (by the base tensor's name).
std::vector<float> merged(const Model& m, const LoraAdapters& a, int* targets) {
  std::vector<float> w(m.base_params(), m.base_params() + m.base_layout().total);
  *targets = 0;
  for (const auto& t : m.base_layout().tensors) {
    int layer = -1, target = -1;
    if (!lora_target_of(a, t.name, layer, target)) continue;
    EXPECT_EQ(t.name, fmt::format("model.layers.{}.{}.weight", layer, lora_module_name(target)));
    lora_merge_into(a, layer, target, w.data() + t.offset);
    ++*targets;
  }
  return w;
}
// The last position's logits of `ids` through a one-slot decoder: prefill all but the last, then one step.
std::vector<float> decode_logits(const ModelConfig& c, const float* params, const LoraAdapters* a,
                                 const std::vector<int32_t>& ids, WeightFormat f = WeightFormat::kF32) {
  Decoder d;
  DecoderOptions o;
  o.max_rows = 64;
  o.format = f;
  o.lora = a;
  EXPECT_TRUE(d.init(c, params, o).is_ok());
  std::vector<DecodeRow> rows;
  for (size_t i = 0; i + 1 < ids.size(); i++) rows.push_back({0, ids[i], false});
  EXPECT_TRUE(d.step(rows.data(), (int)rows.size(), nullptr).is_ok());
  std::vector<float> out((size_t)c.vocab_size);
  DecodeRow last{0, ids.back(), true};
  EXPECT_TRUE(d.step(&last, 1, out.data()).is_ok());
  return out;
}
}  // namespace

// Merged weights give the adapted model's logits (to fp32 rounding: W + s B A is rounded once), and
// a merge touches exactly the targets' weights; the serving decoder with the adapters unmerged
// gives the training forward's logits and the merged decoder's.
TEST(Lora, MergedWeightsAndTheUnmergedDecoderGiveTheAdaptedModel) {
  const ModelConfig c = with_bias(tiny(2, false, false));
  const int T = 29;
  const Batch b = make_batch(1, T, c.vocab_size, false, false, 12);
  Model adapted, plain;
  adapted.set_lora(lora(4, 0.0, {"q", "v", "o", "gate", "up", "down"}));  // k without an adapter
  ASSERT_TRUE(adapted.init(c, 1, T, 1, 42).is_ok());
  randomize_b(adapted);
  const LoraAdapters a = adapters_of(adapted);
  int targets = 0;
  const std::vector<float> w = merged(adapted, a, &targets);
  EXPECT_EQ(targets, 6 * c.n_layers);
  ASSERT_TRUE(plain.init(c, 1, T, 1, 42).is_ok());
  std::copy(w.begin(), w.end(), plain.params());
  float la = 0, lp = 0;
  ASSERT_TRUE(adapted.forward_loss(b, la).is_ok());
  const std::vector<float> want(adapted.acts().logits + (size_t)(T - 1) * c.vocab_size,
                                adapted.acts().logits + (size_t)T * c.vocab_size);
  ASSERT_TRUE(plain.forward_loss(b, lp).is_ok());
  EXPECT_LT(rel_err(plain.acts().logits + (size_t)(T - 1) * c.vocab_size, want), 1e-5);
  std::vector<float> base_logits;
  {
    Model base;
    ASSERT_TRUE(base.init(c, 1, T, 1, 42).is_ok());
    ASSERT_TRUE(base.forward_loss(b, lp).is_ok());
    base_logits.assign(base.acts().logits + (size_t)(T - 1) * c.vocab_size, base.acts().logits + (size_t)T * c.vocab_size);
  }
  EXPECT_GT(rel_err(base_logits.data(), want), 1e-2) << "the adapters change the logits, so the checks above mean something";

  const std::vector<int32_t> ids(b.inputs.begin(), b.inputs.end());
  const std::vector<float> unmerged = decode_logits(c, adapted.base_params(), &a, ids);
  EXPECT_LT(rel_err(unmerged.data(), want), 1e-5);
  const std::vector<float> merged_dec = decode_logits(c, w.data(), nullptr, ids);
  EXPECT_LT(rel_err(unmerged.data(), merged_dec), 1e-5);
  // q8_0 base, fp32 adapters: as close to the adapted model as the q8_0 base is to the fp32 base.
  const std::vector<float> q8 = decode_logits(c, adapted.base_params(), &a, ids, WeightFormat::kQ8_0);
  EXPECT_LT(rel_err(q8.data(), want), 0.15);
}

// With adapters the serving decoder stays batch invariant: a sequence's logits are the same bits
// alone and beside another sequence's rows, with one thread and two.
TEST(Lora, TheUnmergedDecoderIsBatchInvariant) {
  const ModelConfig c = tiny(2, false, false);
  Model adapted;
  adapted.set_lora(lora(4));
  ASSERT_TRUE(adapted.init(c, 1, 8, 1, 42).is_ok());
  randomize_b(adapted);
  const LoraAdapters a = adapters_of(adapted);
  auto run = [&](bool together, int threads) {
    Decoder d;
    DecoderOptions o;
    o.slots = 2;
    o.max_rows = 64;
    o.threads = threads;
    o.batch_invariant = true;
    o.lora = &a;
    EXPECT_TRUE(d.init(c, adapted.base_params(), o).is_ok());
    std::vector<DecodeRow> rows;
    for (int i = 0; i < 40; i++) rows.push_back({0, (int32_t)(7 * i % c.vocab_size), i == 39});
    if (together)
      for (int i = 0; i < 23; i++) rows.push_back({1, (int32_t)(5 * i % c.vocab_size), false});
    std::vector<float> out((size_t)c.vocab_size);
    EXPECT_TRUE(d.step(rows.data(), (int)rows.size(), out.data()).is_ok());
    return out;
  };
  const std::vector<float> alone = run(false, 1);
  EXPECT_EQ(alone, run(true, 1));
  EXPECT_EQ(alone, run(true, 2));
}

namespace {
LoraConfig with_base(LoraConfig l, const char* dtype) {
  l.base_dtype = dtype;
  return l;
}
// Forward and backward of a batch: the logits and the adapters' gradients.
void run_step(Model& m, const Batch& b, std::vector<float>& logits, std::vector<float>& grads) {
  float loss = 0;
  ASSERT_TRUE(m.forward(b, loss).is_ok());
  logits.assign(m.acts().logits, m.acts().logits + (size_t)b.B * b.T * m.config().vocab_size);
  m.zero_grad();
  m.backward();
  grads.assign(m.grads(), m.grads() + m.layout().total);
}
}  // namespace

// A bf16 base holds the bf16 copy a bf16 run makes of an fp32 base: the same logits and adapter
// gradients, bit for bit, without the fp32 matrices (their part of base_params() stays zero).
TEST(Lora, ABf16BaseGivesTheBf16RunsBits) {
  const ModelConfig c = tiny(2, false, false);
  const Batch b = make_batch(2, 33, c.vocab_size, true, false, 5);
  std::vector<float> logits[2], grads[2];
  for (int i = 0; i < 2; i++) {
    Model m;
    m.set_precision(Precision::kBf16);
    m.set_lora(with_base(lora(4, 0.1), i ? "bf16" : "fp32"));
    ASSERT_TRUE(m.init(c, 2, 33, 1, 42).is_ok());
    randomize_b(m);
    run_step(m, b, logits[i], grads[i]);
    if (i) {
      for (const auto& t : m.base_layout().tensors)
        if (m.compact(t)) {
          EXPECT_EQ(m.base_params()[t.offset], 0.0f) << t.name << " has an fp32 copy";
        }
      int held = 0;
      for (const auto& t : m.base_layout().tensors) held += m.compact(t);
      EXPECT_EQ(held, 7 * c.n_layers) << "q, k, v, o, gate, up, down";
    }
  }
  EXPECT_EQ(logits[0], logits[1]);
  EXPECT_EQ(grads[0], grads[1]);
  Model fp32_run;
  fp32_run.set_lora(with_base(lora(4), "bf16"));
  EXPECT_FALSE(fp32_run.init(c, 2, 33, 1, 42).is_ok()) << "a bf16 base needs bf16 precision";
}

// In a bf16 LoRA run the frozen fp32 base's bf16 copy is made once, not every forward; a write to
// the base after a forward (base_params(), as the trainer's loader writes, or set_base_tensor)
// reaches the next forward: the logits are those of a model that held the new base from the start.
TEST(Lora, AWriteToTheBaseReachesTheNextBf16Forward) {
  const ModelConfig c = tiny(2, false, false);
  const Batch b = make_batch(2, 33, c.vocab_size, true, false, 5);
  auto model = [&](Model& m, uint64_t seed) {
    m.set_precision(Precision::kBf16);
    m.set_lora(lora(4));
    ASSERT_TRUE(m.init(c, 2, 33, 1, seed).is_ok());
    randomize_b(m);
  };
  Model other;
  ASSERT_NO_FATAL_FAILURE(model(other, 43));
  std::vector<float> want, g;
  run_step(other, b, want, g);
  const ParamLayout& lay = other.base_layout();
  const float* ob = static_cast<const Model&>(other).base_params();
  for (int path = 0; path < 2; path++) {
    Model m;
    ASSERT_NO_FATAL_FAILURE(model(m, 42));
    std::vector<float> before, after;
    run_step(m, b, before, g);
    if (path == 0) {
      std::copy(ob, ob + lay.total, m.base_params());
    } else {
      for (const auto& t : lay.tensors) m.set_base_tensor(t, ob + t.offset);
    }
    run_step(m, b, after, g);
    EXPECT_NE(before, want);
    EXPECT_EQ(after, want) << (path ? "set_base_tensor" : "base_params()");
  }
}

// A q8_0 base computes what an fp32 base holding its dequantized weights computes (up to the
// GEMMs' summation order), and its gradient-free matrices; a matrix whose rows are not whole
// blocks (down_proj here: 176 columns) stays fp32.
TEST(Lora, AQ8BaseEqualsItsDequantizedWeights) {
  const ModelConfig c = tiny(2, false, false);
  const Batch b = make_batch(2, 40, c.vocab_size, false, false, 6);
  Model q8, deq;
  q8.set_lora(with_base(lora(4), "q8_0"));
  deq.set_lora(lora(4));
  ASSERT_TRUE(q8.init(c, 2, 40, 2, 42).is_ok());
  ASSERT_TRUE(deq.init(c, 2, 40, 2, 42).is_ok());
  randomize_b(q8);
  randomize_b(deq);
  int held = 0;
  for (const auto& t : deq.base_layout().tensors) {
    if (!q8.compact(t)) continue;
    held++;
    EXPECT_EQ(t.cols % kQ8Block, 0) << t.name;
    float* w = deq.base_params() + t.offset;
    std::vector<BlockQ8_0> blk((size_t)t.size() / kQ8Block);
    quantize_row_q8_0(blk.data(), w, t.size());
    dequantize_row_q8_0(w, blk.data(), t.size());
  }
  EXPECT_EQ(held, 6 * c.n_layers) << "every layer matrix but down_proj (176 columns)";
  std::vector<float> lq, gq, ld, gd;
  run_step(q8, b, lq, gq);
  run_step(deq, b, ld, gd);
  EXPECT_LT(rel_err(lq.data(), ld), 1e-5);
  EXPECT_LT(rel_err(gq.data(), gd), 1e-4);
}

namespace {
int64_t rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return 0;
}
// What init and one training step add to this process's resident memory: large blocks are mapped
// (and unmapped when freed), and free heap pages are given back first, so the growth is the model's.
int64_t measured_bytes(const ModelConfig& c, const LoraConfig* l, Precision p, int B, int T) {
  mallopt(M_MMAP_THRESHOLD, 64 << 10);  // (a fixed threshold: glibc's dynamic one would move blocks to the heap)
  malloc_trim(0);
  const int64_t before = rss_bytes();
  Model m;
  m.set_precision(p);
  if (l) m.set_lora(*l);
  const Batch b = make_batch(B, T, c.vocab_size, false, false, 3);
  float loss = 0;
  if (!m.init(c, B, T, 1, 42).is_ok() || !m.forward(b, loss).is_ok()) return -1;
  m.zero_grad();
  m.backward();
  return rss_bytes() - before;
}
}  // namespace

// The memory plan of a LoRA model against what it takes: an fp32 base without its gradients, a
// bf16 base without its fp32 matrices, a q8_0 base in a quarter of fp32's bytes, each within 10%
// of its plan (the model: 12.6 M parameters, so the parameters dominate).
TEST(Lora, EachBaseDtypeTakesTheMemoryItsPlanSays) {
  ModelConfig c = tiny(8, false, false);
  c.d_model = 512, c.n_heads = 8, c.n_kv_heads = 8, c.ffn_hidden = 1408, c.n_layers = 4;
  const int B = 1, T = 32;
  struct Run {
    const char* base;
    Precision p;
  };
  int64_t got[4] = {};
  const Run runs[] = {{"full", Precision::kFp32}, {"fp32", Precision::kFp32}, {"bf16", Precision::kBf16}, {"q8_0", Precision::kFp32}};
  for (int i = 0; i < 4; i++) {
    const LoraConfig l = with_base(lora(8), runs[i].base);
    const bool full = i == 0;
    const MemoryPlan plan = memory_plan(c, ModelShard{}, B, T, 1, runs[i].p, 1, 1, full ? nullptr : &l);
    measured_bytes(c, full ? nullptr : &l, runs[i].p, B, T);  // (the first run warms the GEMM libraries' own caches)
    got[i] = measured_bytes(c, full ? nullptr : &l, runs[i].p, B, T);
    ASSERT_GT(got[i], 0) << runs[i].base;
    std::printf("[%s base] planned %.1f MiB (optimizer aside), measured %.1f MiB\n", runs[i].base,
                (plan.total() - plan.optimizer_bytes) / 1048576.0,
                got[i] / 1048576.0);
    // (the model holds no optimizer state: the trainer's AdamW does)
    const double want = (double)(plan.total() - plan.optimizer_bytes);
    EXPECT_NEAR((double)got[i], want, 0.1 * want) << runs[i].base << "\n" << plan.report();
  }
  EXPECT_LT(got[1], 0.6 * got[0]) << "no gradients for the frozen base";
  EXPECT_LT(got[3], 0.5 * got[1]) << "q8_0 matrices instead of fp32";
}
