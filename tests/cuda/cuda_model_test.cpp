// The decoder on the GPU (model/cuda/) against the CPU model: the loss and every gradient of a
// batch with document masking, grouped-query attention and ignored targets; 50 AdamW steps whose
// losses follow the CPU run's; the parameters coming back to a CPU model that gives the GPU's
// loss. fp32 and bf16. Skipped without a CUDA device.
#include <cmath>
#include <random>

#include <unistd.h>

#include "cuda/cuda_test_util.hpp"
#include <filesystem>
#include <sstream>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/kernels/kernels.hpp"
#include "smelt/model/cuda/cuda_model.hpp"
#include "smelt/model/model.hpp"

namespace smelt {
namespace {

using test::norm_err;
using test::report;

ModelConfig small_config() {
  ModelConfig c;
  c.vocab_size = 384;
  c.d_model = 128;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_hidden = 352;
  c.max_seq_len = 128;
  return c;
}

// Rows of random documents: segments, positions restarting at each document, the document's
// last target ignored (-1), as the loader's document masking makes them.
Batch make_batch(int B, int T, int V, uint64_t seed) {
  std::mt19937_64 g(seed);
  Batch b;
  b.B = B, b.T = T;
  const int N = B * T;
  b.inputs.resize(N), b.targets.resize(N), b.segments.resize(N), b.positions.resize(N);
  for (int r = 0; r < B; r++) {
    int seg = 0, p = 0, len = 5 + (int)(g() % 40);
    for (int t = 0; t < T; t++) {
      const int n = r * T + t;
      b.inputs[n] = (int32_t)(g() % (uint64_t)V);
      b.targets[n] = (int32_t)(g() % (uint64_t)V);
      b.segments[n] = seg;
      b.positions[n] = p++;
      if (p == len) {
        b.targets[n] = -1;
        seg++, p = 0, len = 5 + (int)(g() % 40);
      }
    }
  }
  return b;
}

struct Pair {
  Model cpu;
  CudaModel gpu;
};

void init_pair(Pair& m, const ModelConfig& c, int B, int T, Precision p) {
  m.cpu.set_precision(p);
  ASSERT_TRUE(m.cpu.init(c, B, T, 2, 1234).is_ok());
  auto s = m.gpu.init(c, B, T, p);
  ASSERT_TRUE(s.is_ok()) << s.message();
  m.gpu.upload_params(m.cpu.params());
}

void check_loss_and_grads(Precision p, double loss_bound, double grad_bound) {
  const ModelConfig c = small_config();
  const int B = 2, T = 96;
  Pair m;
  init_pair(m, c, B, T, p);
  std::printf("device memory:\n%s\n", m.gpu.memory_report().c_str());
  const Batch b = make_batch(B, T, c.vocab_size, 7);
  float lc = 0, lg = 0;
  ASSERT_TRUE(m.cpu.forward(b, lc).is_ok());
  ASSERT_TRUE(m.gpu.forward(b, lg).is_ok());
  const char* name = p == Precision::kBf16 ? "bf16" : "fp32";
  const double hc = m.cpu.prediction_entropy(128), hg = m.gpu.prediction_entropy(128);
  report(std::string(name) + " prediction entropy", std::fabs(hg - hc) / hc, p == Precision::kBf16 ? 2e-3 : 1e-5);
  m.cpu.zero_grad();
  m.cpu.backward();
  m.gpu.zero_grad();
  m.gpu.backward();
  ASSERT_EQ(m.gpu.sync(), "");
  report(std::string(name) + " loss", std::fabs(lg - lc) / lc, loss_bound);
  const auto tl = m.gpu.token_losses();
  report(std::string(name) + " token losses", norm_err(tl.data(), m.cpu.token_losses(), tl.size()), loss_bound);
  std::vector<float> g(m.gpu.layout().total);
  m.gpu.download_grads(g.data());
  for (const ParamTensor& t : m.gpu.layout().tensors)
    report(std::string(name) + " grad " + t.name, norm_err(g.data() + t.offset, m.cpu.grads() + t.offset, t.size()),
           grad_bound);
}

TEST(CudaModel, Fp32LossAndEveryGradientMatchTheCpuModel) {
  SMELT_REQUIRE_CUDA_DEVICE();
  check_loss_and_grads(Precision::kFp32, 1e-5, 1e-4);
}

// bf16: both sides round the same operands to bf16 and sum in fp32, in different orders; an
// activation that differs in its last fp32 bits can round to the other bf16 neighbour, so the
// bound is bf16's: 2^-8 relative per element, 1e-2 normwise.
TEST(CudaModel, Bf16LossAndEveryGradientMatchTheCpuModel) {
  SMELT_REQUIRE_CUDA_DEVICE();
  check_loss_and_grads(Precision::kBf16, 2e-3, 1e-2);
}

// A CPU model trained with the CPU's AdamW applied tensor by tensor, as the trainer does (global
// norm clipping, decay only where ParamTensor::decay).
struct CpuRun {
  Model m;
  std::vector<float> mm, vv;
  void init(const ModelConfig& c, int B, int T, Precision p) {
    m.set_precision(p);
    ASSERT_TRUE(m.init(c, B, T, 2, 1234).is_ok());
    mm.assign(m.layout().total, 0.0f), vv.assign(m.layout().total, 0.0f);
  }
  float step(const Batch& b, const CudaAdamW& o, int s, double& norm) {
    float loss = 0;
    EXPECT_TRUE(m.forward(b, loss).is_ok());
    m.zero_grad();
    m.backward();
    const ParamLayout& lay = m.layout();
    norm = std::sqrt(grad_norm_squared(m.grads(), lay.total));
    const float scale = grad_clip_scale(norm, o.grad_clip);
    for (const ParamTensor& t : lay.tensors)
      adamw_step(m.params() + t.offset, mm.data() + t.offset, vv.data() + t.offset, m.grads() + t.offset, t.size(),
                 o.lr, o.beta1, o.beta2, o.eps, t.decay ? o.weight_decay : 0.0f, scale, s);
    return loss;
  }
};

Batch training_batch(int s, int V) { return make_batch(2, 96, V, 100 + s % 4); }  // 4 batches seen again

// 50 AdamW steps on the GPU beside the CPU.
// fp32: the GPU's loss follows the CPU fp32 run's within 1e-3 relative at every step.
// bf16: two bf16 runs that differ only in summation order drift apart (they round different
// values to bf16), so the GPU's bf16 run is held to the CPU fp32 run by the bf16 noise measured
// in the same test: its worst gap to the fp32 run at most twice the CPU bf16 run's worst gap, plus
// 0.01 nats. (On the CPU, oneDNN's and the portable bf16 GEMMs measured 0.0034 apart at lr 1e-3,
// each about 0.005 from fp32.)
void check_training(Precision p) {
  const ModelConfig c = small_config();
  const int B = 2, T = 96, steps = 50;
  const bool bf16 = p == Precision::kBf16;
  CpuRun exact, same;
  exact.init(c, B, T, Precision::kFp32);
  if (bf16) same.init(c, B, T, p);
  CudaModel gpu;
  auto st = gpu.init(c, B, T, p);
  ASSERT_TRUE(st.is_ok()) << st.message();
  gpu.upload_params(exact.m.params());
  CudaAdamW o;
  o.lr = bf16 ? 1e-3f : 3e-3f;
  double worst_gpu = 0, worst_cpu16 = 0, first = 0, last = 0;
  for (int s = 1; s <= steps; s++) {
    const Batch b = training_batch(s, c.vocab_size);
    double norm = 0, norm16 = 0;
    const float l32 = exact.step(b, o, s, norm);
    const float l16 = bf16 ? same.step(b, o, s, norm16) : l32;
    float lg = 0;
    ASSERT_TRUE(gpu.forward(b, lg).is_ok());
    gpu.zero_grad();
    gpu.backward();
    const double gnorm = gpu.optimizer_step(o, s);
    ASSERT_EQ(gpu.sync(), "");
    worst_gpu = std::max(worst_gpu, bf16 ? std::fabs((double)lg - l32) : std::fabs((double)lg - l32) / l32);
    worst_cpu16 = std::max(worst_cpu16, std::fabs((double)l16 - l32));
    if (s == 1) first = l32;
    last = l32;
    if (s % 10 == 0 || s == 1)
      std::printf("  step %2d  cpu fp32 %.6f%s  gpu %.6f  norm cpu %.5f gpu %.5f\n", s, l32,
                  bf16 ? (" cpu bf16 " + std::to_string(l16)).c_str() : "", lg, norm, gnorm);
  }
  if (bf16) report("bf16 50 steps, worst |gpu bf16 - cpu fp32| (nats)", worst_gpu, 2 * worst_cpu16 + 0.01);
  else report("fp32 50 steps, worst relative |gpu - cpu|", worst_gpu, 1e-3);
  EXPECT_LT(last, first - 0.5) << "the loss did not fall";
  // The parameters back on a CPU model: its loss on a new batch is the GPU's.
  std::vector<float> params(gpu.layout().total);
  gpu.download_params(params.data());
  Model back;
  back.set_precision(p);
  ASSERT_TRUE(back.init(c, B, T, 2, 99).is_ok());
  std::copy(params.begin(), params.end(), back.params());
  const Batch b = make_batch(B, T, c.vocab_size, 555);
  float lb = 0, lg = 0;
  ASSERT_TRUE(back.forward(b, lb).is_ok());
  ASSERT_TRUE(gpu.forward(b, lg).is_ok());
  report("parameters GPU -> CPU, loss", std::fabs(lb - lg) / lg, bf16 ? 2e-3 : 1e-5);
}

TEST(CudaModel, Fp32TrainingFollowsTheCpuFor50Steps) {
  SMELT_REQUIRE_CUDA_DEVICE();
  check_training(Precision::kFp32);
}

TEST(CudaModel, Bf16TrainingFollowsTheCpuFor50Steps) {
  SMELT_REQUIRE_CUDA_DEVICE();
  check_training(Precision::kBf16);
}

// Saves the GPU model's parameters and AdamW moments as the trainer names them (the tensor's
// name; optim.m.NAME, optim.v.NAME) through the checkpoint writer.
void save_gpu_checkpoint(CudaModel& g, const std::string& run, int64_t step, std::vector<float>& p,
                         std::vector<float>& m, std::vector<float>& v) {
  const ParamLayout& lay = g.layout();
  p.resize(lay.total), m.resize(lay.total), v.resize(lay.total);
  g.download_params(p.data());
  g.download_moments(m.data(), v.data());
  CkptSaveRequest r;
  r.step = step;
  toml::table root;
  root.insert("model", model_config_to_toml(g.config()));
  std::ostringstream cfg;
  cfg << root;
  r.config_toml = cfg.str();
  for (const ParamTensor& t : lay.tensors) {
    const std::vector<int64_t> shape = t.cols > 1 ? std::vector<int64_t>{t.rows, t.cols} : std::vector<int64_t>{t.rows};
    r.tensors.push_back({t.name, shape, p.data() + t.offset});
    r.tensors.push_back({"optim.m." + t.name, shape, m.data() + t.offset});
    r.tensors.push_back({"optim.v." + t.name, shape, v.data() + t.offset});
  }
  ASSERT_TRUE(ckpt_save(run, r).is_ok());
}

// GPU -> checkpoint files -> CPU: the CPU model loaded from the files gives the GPU's loss; and
// files -> a new GPU model: the resumed run's next steps have the bits of the run that went on.
void check_checkpoint_round_trip(Precision p) {
  const ModelConfig c = small_config();
  const int B = 2, T = 96;
  const std::string run = (std::filesystem::temp_directory_path() /
                           ("smelt_cuda_ckpt_" + std::to_string(::getpid()) + (p == Precision::kBf16 ? "_bf16" : "")))
                              .string();
  std::filesystem::remove_all(run);
  Model init;
  ASSERT_TRUE(init.init(c, B, T, 2, 1234).is_ok());
  CudaModel a;
  ASSERT_TRUE(a.init(c, B, T, p).is_ok());
  a.upload_params(init.params());
  CudaAdamW o;
  float loss = 0;
  for (int s = 1; s <= 5; s++) {
    ASSERT_TRUE(a.forward(training_batch(s, c.vocab_size), loss).is_ok());
    a.zero_grad();
    a.backward();
    (void)a.optimizer_step(o, s);
  }
  std::vector<float> pa, ma, va;
  save_gpu_checkpoint(a, run, 5, pa, ma, va);
  const std::string dir = ckpt_step_dir(run, 5);
  ASSERT_TRUE(ckpt_verify(dir).is_ok());

  ModelConfig loaded_cfg;
  std::vector<float> loaded;
  CkptManifest man;
  ASSERT_TRUE(ckpt_load_model(dir, loaded_cfg, loaded, &man).is_ok());
  ASSERT_EQ(loaded, pa);
  Model cpu;
  cpu.set_precision(p);
  ASSERT_TRUE(cpu.init(loaded_cfg, B, T, 2, 7).is_ok());
  std::copy(loaded.begin(), loaded.end(), cpu.params());
  const Batch probe = make_batch(B, T, c.vocab_size, 777);
  float lc = 0, lg = 0;
  ASSERT_TRUE(cpu.forward(probe, lc).is_ok());
  ASSERT_TRUE(a.forward(probe, lg).is_ok());
  report("checkpoint GPU -> files -> CPU, loss", std::fabs(lc - lg) / lg, p == Precision::kBf16 ? 2e-3 : 1e-5);

  std::vector<float> m(loaded.size()), v(loaded.size());
  for (const ParamTensor& t : a.layout().tensors) {
    ASSERT_TRUE(ckpt_load_tensor(dir, man, "optim.m." + t.name, m.data() + t.offset, t.size()).is_ok());
    ASSERT_TRUE(ckpt_load_tensor(dir, man, "optim.v." + t.name, v.data() + t.offset, t.size()).is_ok());
  }
  ASSERT_EQ(m, ma);
  ASSERT_EQ(v, va);
  CudaModel b;
  ASSERT_TRUE(b.init(c, B, T, p).is_ok());
  b.upload_params(loaded.data());
  b.upload_moments(m.data(), v.data());
  for (int s = 6; s <= 8; s++) {
    float l1 = 0, l2 = 0;
    const Batch bt = training_batch(s, c.vocab_size);
    ASSERT_TRUE(a.forward(bt, l1).is_ok());
    ASSERT_TRUE(b.forward(bt, l2).is_ok());
    EXPECT_EQ(l1, l2) << "step " << s;
    for (CudaModel* g : {&a, &b}) {
      g->zero_grad();
      g->backward();
      (void)g->optimizer_step(o, s);
    }
  }
  std::vector<float> p1(loaded.size()), p2(loaded.size());
  a.download_params(p1.data());
  b.download_params(p2.data());
  EXPECT_EQ(p1, p2) << "the resumed run's parameters differ from the uninterrupted run's";
  std::filesystem::remove_all(run);
}

TEST(CudaModel, Fp32CheckpointRoundTripGpuToCpuAndResume) {
  SMELT_REQUIRE_CUDA_DEVICE();
  check_checkpoint_round_trip(Precision::kFp32);
}

TEST(CudaModel, Bf16CheckpointRoundTripGpuToCpuAndResume) {
  SMELT_REQUIRE_CUDA_DEVICE();
  check_checkpoint_round_trip(Precision::kBf16);
}

// Same inputs, same bits: two GPU models taking the same steps end with identical parameters.
TEST(CudaModel, TrainingIsDeterministic) {
  SMELT_REQUIRE_CUDA_DEVICE();
  const ModelConfig c = small_config();
  Model init;
  ASSERT_TRUE(init.init(c, 2, 96, 2, 1234).is_ok());
  std::vector<float> out[2];
  for (auto& params : out) {
    CudaModel g;
    ASSERT_TRUE(g.init(c, 2, 96, Precision::kBf16).is_ok());
    g.upload_params(init.params());
    for (int s = 1; s <= 5; s++) {
      float loss = 0;
      ASSERT_TRUE(g.forward(training_batch(s, c.vocab_size), loss).is_ok());
      g.zero_grad();
      g.backward();
      (void)g.optimizer_step(CudaAdamW{}, s);
    }
    params.resize(g.layout().total);
    g.download_params(params.data());
  }
  EXPECT_EQ(out[0], out[1]);
}

TEST(CudaModel, InitWithoutADeviceSaysWhy) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "a device is present";
  CudaModel m;
  const Status s = m.init(small_config(), 2, 32, Precision::kFp32);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("[cuda]"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace smelt
