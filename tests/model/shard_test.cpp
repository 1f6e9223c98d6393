// The decoder split by tensor and pipeline parallelism (model/shard.hpp), in one process: TP ranks
// are threads whose collectives are rank-ordered sums over shared buffers, pipeline stages hand
// their activations and gradients over by copy. Against the whole model on the same batch:
// - every shard starts from the whole model's values of its boxes (bit for bit);
// - pipeline stages alone compute exactly the whole model's loss and gradients (same kernels on
//   the same rows, nothing summed differently), bit for bit; but a tied embedding's gradient,
//   whose two parts (the head's, the lookup's) are added in the other order;
// - tensor parallel (attention heads, SwiGLU units and the vocabulary split; KV heads split or
//   replicated) gives the loss and every gradient box within fp32 rounding (its sums are
//   associated per rank), and TP x PP likewise;
// - the layout checks refuse what the model does not allow, with the numbers.
#include <barrier>
#include <memory>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "smelt/kernels/kernels.hpp"
#include "smelt/model/model.hpp"

using namespace smelt;

namespace {

ModelConfig tiny(int nkv, bool tied) {
  ModelConfig c;
  c.vocab_size = 250;  // not a multiple of 4: uneven vocabulary rows per rank
  c.d_model = 64;
  c.n_layers = 4;
  c.n_heads = 4;
  c.n_kv_heads = nkv;
  c.ffn_hidden = 96;
  c.max_seq_len = 64;
  c.tie_embeddings = tied;
  c.init_std = 0.1;
  return c;
}

Batch make_batch(int B, int T, int V, uint64_t seed) {
  Batch b;
  b.B = B, b.T = T;
  std::mt19937_64 g(seed);
  for (int n = 0; n < B * T; n++) {
    b.inputs.push_back((int32_t)(g() % V));
    b.targets.push_back(n % 7 == 3 ? -1 : (int32_t)(g() % V));
  }
  return b;
}

// Rank-ordered in-place sum / max over `ranks` threads (the MPI communicator's contract).
class ThreadGroup {
 public:
  explicit ThreadGroup(int ranks) : ranks_(ranks), bar_(ranks), ptr_(ranks) {}
  void sum(int r, float* x, int64_t n) { combine(r, x, n, false); }
  void max(int r, float* x, int64_t n) { combine(r, x, n, true); }

 private:
  void combine(int r, float* x, int64_t n, bool is_max) {
    ptr_[r] = x;
    bar_.arrive_and_wait();
    std::vector<float> out(ptr_[0], ptr_[0] + n);
    for (int q = 1; q < ranks_; q++)
      for (int64_t i = 0; i < n; i++) out[i] = is_max ? std::max(out[i], ptr_[q][i]) : out[i] + ptr_[q][i];
    bar_.arrive_and_wait();  // every rank has read every buffer
    std::copy(out.begin(), out.end(), x);
    bar_.arrive_and_wait();
  }
  int ranks_;
  std::barrier<> bar_;
  std::vector<float*> ptr_;
};

struct Full {
  Model m;
  float loss = 0;
  Full(const ModelConfig& c, const Batch& b) {
    EXPECT_TRUE(m.init(c, b.B, b.T, 1, 42).is_ok());
    EXPECT_TRUE(m.forward(b, loss).is_ok());
    m.zero_grad();
    m.backward();
  }
  // The box of the full tensor `t` describes, from the whole model's buffer.
  std::vector<float> box(const float* buf, const ParamTensor& t) const {
    const ParamLayout& L = m.layout();
    const ParamTensor* f = nullptr;
    for (const auto& x : L.tensors)
      if (x.name == t.name) f = &x;
    EXPECT_NE(f, nullptr) << t.name;
    std::vector<float> out;
    for (int64_t r = 0; r < t.rows; r++)
      for (int64_t k = 0; k < t.cols; k++) out.push_back(buf[f->offset + (t.row0 + r) * f->cols + t.col0 + k]);
    return out;
  }
};

double max_rel(const std::vector<float>& a, const float* b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); i++) {
    num = std::max(num, (double)std::fabs(a[i] - b[i]));
    den = std::max(den, (double)std::fabs(a[i]));
  }
  return den > 0 ? num / den : num;
}

// One pipeline of `pp` stages (in this thread) over a TP group of `tp` threads: each (stage, TP
// rank) model's loss and gradients; stage hand-over by copy, all TP ranks of a stage in step.
struct Split {
  std::vector<std::vector<Model>> m;  // [stage][tp rank]
  std::vector<float> loss;            // [tp rank] the last stage's
  Split(const ModelConfig& c, const Batch& b, int tp, int pp) : m(pp), loss(tp) {
    std::vector<int> bounds;
    EXPECT_TRUE(stage_bounds(c.n_layers, pp, {}, bounds).is_ok());
    std::vector<std::unique_ptr<ThreadGroup>> groups;
    for (int s = 0; s < pp; s++) groups.push_back(std::make_unique<ThreadGroup>(tp));
    for (int s = 0; s < pp; s++) {
      m[s] = std::vector<Model>(tp);
      for (int r = 0; r < tp; r++) {
        Model& x = m[s][r];
        EXPECT_TRUE(x.init(c, model_shard(tp, r, pp, s, bounds), b.B, b.T, 1, 42, 0, 1, 1).is_ok());
        ThreadGroup* g = groups[s].get();
        x.set_tp({[g, r](float* p, int64_t n) { g->sum(r, p, n); }, [g, r](float* p, int64_t n) { g->max(r, p, n); }});
      }
    }
    const int64_t NC = (int64_t)b.B * b.T * c.d_model;
    auto on_tp = [&](int s, auto f) {  // f(rank) on every TP rank of stage s at once
      std::vector<std::thread> ts;
      for (int r = 0; r < tp; r++) ts.emplace_back([&, r] { f(r); });
      for (auto& t : ts) t.join();
    };
    for (int s = 0; s < pp; s++) {
      on_tp(s, [&](int r) {
        Model& x = m[s][r];
        if (s > 0) std::copy(m[s - 1][r].stage_output(), m[s - 1][r].stage_output() + NC, x.stage_input());
        float l = 0;
        EXPECT_TRUE(x.forward(b, l).is_ok());
        if (s == pp - 1) loss[r] = l;
      });
    }
    for (int s = pp - 1; s >= 0; s--) {
      on_tp(s, [&](int r) {
        Model& x = m[s][r];
        if (s < pp - 1) std::copy(m[s + 1][r].stage_input_grad(), m[s + 1][r].stage_input_grad() + NC, x.stage_output_grad());
        x.zero_grad();
        // The whole model's dloss: 1 / (targets with a loss) of the batch.
        int64_t valid = 0;
        for (int32_t t : b.targets) valid += t >= 0;
        x.backward(1.0f / (float)valid);
      });
    }
  }
};

// The gradient of a box as the trainer reduces it: KV projections shared by several TP ranks and
// the two ends of a tied embedding summed (rank order; stage order).
std::vector<float> reduced_grad(Split& sp, int s, int r, const ParamTensor& t) {
  std::vector<float> g(sp.m[s][r].grads() + t.offset, sp.m[s][r].grads() + t.offset + t.size());
  const int tp = (int)sp.m[s].size(), pp = (int)sp.m.size();
  if (t.kv_shared) {
    g.assign(t.size(), 0.0f);
    for (int q = 0; q < tp; q++) {
      const ParamTensor* o = nullptr;
      for (const auto& x : sp.m[s][q].layout().tensors)
        if (x.name == t.name && x.row0 == t.row0) o = &x;
      if (!o) continue;
      for (int64_t i = 0; i < t.size(); i++) g[i] += sp.m[s][q].grads()[o->offset + i];
    }
  }
  if (t.tied_copy) {
    const int other = s == 0 ? pp - 1 : 0;
    const ParamLayout& L = sp.m[other][r].layout();
    const int64_t off = other == 0 ? L.wte : L.lm_head;
    std::vector<float> sum(t.size());
    const float* first = s == 0 ? g.data() : sp.m[other][r].grads() + off;
    const float* last = s == 0 ? sp.m[other][r].grads() + off : g.data();
    for (int64_t i = 0; i < t.size(); i++) sum[i] = first[i] + last[i];
    g = sum;
  }
  return g;
}

struct Layout {
  const char* name;
  int nkv;
  bool tied;
  int tp, pp;
  double tol;  // max relative gradient error per box (0: bit for bit)
  bool extras = false;  // q/k/v biases, QK-norm, head_dim 32 (4 x 32 != d_model), llama3 RoPE scaling
};

ModelConfig layout_config(const Layout& k) {
  ModelConfig c = tiny(k.nkv, k.tied);
  if (k.extras) {
    c.qkv_bias = c.qk_norm = true;
    c.head_dim = 32;
    c.rope_scaling = RopeScaling::kLlama3;
    c.rope_factor = 8;
    c.rope_original_max_seq_len = 16;
  }
  return c;
}

class Sharded : public ::testing::TestWithParam<Layout> {};

TEST_P(Sharded, InitLossAndEveryGradientBoxMatchTheWholeModel) {
  const Layout& k = GetParam();
  kernels_set_threads(1);
  const ModelConfig c = layout_config(k);
  const Batch b = make_batch(2, 24, c.vocab_size, 5);
  Full full(c, b);
  // Initial values: the whole model's, box for box (a fresh shard, before any step).
  std::vector<int> bounds;
  ASSERT_TRUE(stage_bounds(c.n_layers, k.pp, {}, bounds).is_ok());
  int64_t held = 0;
  for (int s = 0; s < k.pp; s++)
    for (int r = 0; r < k.tp; r++) {
      Model x;
      ASSERT_TRUE(x.init(c, model_shard(k.tp, r, k.pp, s, bounds), b.B, b.T, 1, 42, 0, 1, 1).is_ok());
      for (const auto& t : x.layout().tensors) {
        EXPECT_EQ(full.box(full.m.params(), t), std::vector<float>(x.params() + t.offset, x.params() + t.offset + t.size()))
            << t.name << " stage " << s << " rank " << r;
        if (!t.replica) held += t.size();
      }
    }
  EXPECT_EQ(held, full.m.layout().total) << "the owned boxes cover the model once";

  Split sp(c, b, k.tp, k.pp);
  for (int r = 0; r < k.tp; r++) {
    if (k.tol == 0) EXPECT_EQ(sp.loss[r], full.loss) << "rank " << r;
    else EXPECT_NEAR(sp.loss[r], full.loss, 1e-5 * std::fabs(full.loss)) << "rank " << r;
  }
  double worst = 0;
  for (int s = 0; s < k.pp; s++)
    for (int r = 0; r < k.tp; r++)
      for (const auto& t : sp.m[s][r].layout().tensors) {
        const std::vector<float> want = full.box(full.m.grads(), t);
        const std::vector<float> got = reduced_grad(sp, s, r, t);
        if (k.tol == 0 && !t.tied_copy) {
          EXPECT_EQ(got, want) << t.name << " stage " << s << " rank " << r;
        } else if (k.tol == 0) {
          // The two ends of a tied embedding: the head's and the lookup's parts added in the
          // other order than one model adds them (fp32 rounding).
          EXPECT_LT(max_rel(want, got.data()), 1e-6) << t.name << " stage " << s << " rank " << r;
        } else {
          const double e = max_rel(want, got.data());
          worst = std::max(worst, e);
          EXPECT_LT(e, k.tol) << t.name << " stage " << s << " rank " << r;
        }
      }
  std::printf("[%s] loss %.7f (whole %.7f), worst gradient box error %.2e\n", k.name, sp.loss[0], full.loss, worst);
}

INSTANTIATE_TEST_SUITE_P(
    Model, Sharded,
    ::testing::Values(Layout{"pp2_tied", 2, true, 1, 2, 0}, Layout{"pp4_untied", 4, false, 1, 4, 0},
                      Layout{"tp2_gqa_tied", 2, true, 2, 1, 1e-4}, Layout{"tp4_kv_replicated_untied", 2, false, 4, 1, 1e-4},
                      Layout{"tp2_pp2_tied", 4, true, 2, 2, 1e-4}, Layout{"tp4_pp2_mqa_tied", 1, true, 4, 2, 1e-4},
                      Layout{"pp2_extras", 2, true, 1, 2, 0, true}, Layout{"tp2_extras", 2, true, 2, 1, 1e-4, true},
                      Layout{"tp4_kv_replicated_extras_untied", 2, false, 4, 1, 1e-4, true}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Shard, LayoutsTheModelDoesNotAllowAreRefusedWithTheNumbers) {
  ModelConfig c = tiny(2, true);
  auto refuse = [&](int tp, int pp, std::vector<int> layers, const char* says) {
    std::vector<int> bounds;
    Status s = stage_bounds(c.n_layers, pp, layers, bounds);
    if (s) s = shard_validate(c, model_shard(tp, 0, pp, 0, bounds));
    ASSERT_FALSE(s.is_ok()) << "tp " << tp << " pp " << pp;
    EXPECT_NE(s.message().find(says), std::string::npos) << s.message();
  };
  refuse(3, 1, {}, "must divide n_heads = 4");
  refuse(1, 5, {}, "pp = 5 stages but the model has n_layers = 4");
  refuse(1, 2, {1, 2}, "stage_layers sum to 3 but the model has n_layers = 4");
  refuse(1, 2, {4, 0}, "stage_layers[1] = 0");
  c.ffn_hidden = 90;
  refuse(4, 1, {}, "must divide ffn_hidden = 90");
  c.ffn_hidden = 96;
  c.n_heads = 8, c.n_kv_heads = 4;
  c.d_model = 64;
  std::vector<int> bounds;
  ASSERT_TRUE(stage_bounds(4, 1, {}, bounds).is_ok());
  EXPECT_TRUE(shard_validate(c, model_shard(8, 0, 1, 0, bounds)).is_ok()) << "KV heads replicated";
  EXPECT_TRUE(shard_validate(c, model_shard(2, 0, 1, 0, bounds)).is_ok()) << "KV heads split";
  ASSERT_TRUE(stage_bounds(4, 3, {}, bounds).is_ok());
  EXPECT_EQ(bounds, (std::vector<int>{0, 2, 3, 4})) << "even, the remainder to the first stages";
}

}  // namespace

namespace {

// Activation slots: a stage runs forward of micro-batch 1 between forward and backward of
// micro-batch 0 (1F1B); each backward gives the gradient of its own batch, as if alone.
TEST(Shard, SlotsKeepEachMicroBatchForItsBackward) {
  kernels_set_threads(1);
  const ModelConfig c = tiny(2, false);
  std::vector<int> bounds;
  ASSERT_TRUE(stage_bounds(c.n_layers, 2, {}, bounds).is_ok());
  const ModelShard first = model_shard(1, 0, 2, 0, bounds);
  const Batch a = make_batch(2, 24, c.vocab_size, 1), b = make_batch(2, 24, c.vocab_size, 2);
  const int64_t NC = 2 * 24 * c.d_model;
  std::vector<float> da(NC), db(NC);
  for (int64_t i = 0; i < NC; i++) da[i] = 1e-3f * (float)((i * 7) % 13 - 6), db[i] = 1e-3f * (float)((i * 5) % 11 - 5);
  auto alone = [&](const Batch& x, const std::vector<float>& d) {
    Model m;
    EXPECT_TRUE(m.init(c, first, 2, 24, 1, 42, 0, 1, 1).is_ok());
    float l = 0;
    EXPECT_TRUE(m.forward(x, l).is_ok());
    std::vector<float> out(m.stage_output(), m.stage_output() + NC);
    std::copy(d.begin(), d.end(), m.stage_output_grad());
    m.zero_grad();
    m.backward(0.01f);
    std::vector<float> g(m.grads(), m.grads() + m.layout().total);
    g.insert(g.end(), out.begin(), out.end());
    return g;
  };
  const std::vector<float> ga = alone(a, da), gb = alone(b, db);
  Model m;
  ASSERT_TRUE(m.init(c, first, 2, 24, 1, 42, 0, 1, 2).is_ok());
  ASSERT_EQ(m.slots(), 2);
  float l = 0;
  m.use_slot(0);
  ASSERT_TRUE(m.forward(a, l).is_ok());
  std::vector<float> out_a(m.stage_output(), m.stage_output() + NC);
  m.use_slot(1);
  ASSERT_TRUE(m.forward(b, l).is_ok());
  std::vector<float> out_b(m.stage_output(), m.stage_output() + NC);
  for (auto [slot, d, want, out] : {std::tuple{0, &da, &ga, &out_a}, std::tuple{1, &db, &gb, &out_b}}) {
    m.use_slot(slot);
    std::copy(d->begin(), d->end(), m.stage_output_grad());
    m.zero_grad();
    m.backward(0.01f);
    std::vector<float> g(m.grads(), m.grads() + m.layout().total);
    g.insert(g.end(), out->begin(), out->end());
    EXPECT_EQ(g, *want) << "slot " << slot;
  }
}

}  // namespace
