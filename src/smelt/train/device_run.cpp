// The trainer's GPU steps (device_run.hpp): a thin layer between the trainer's calls and the
// CudaModel, plus the GEMM rate measured on the device for the MFU.
#include "smelt/train/device_run.hpp"

#include <fmt/format.h>

#include "smelt/kernels/cuda/cuda_kernels.hpp"

namespace smelt {

namespace {
// GFLOP/s of a 4096^3 GEMM at the run's precision on the device (the best of 5 after 2 warm-ups):
// the rate the model's GEMMs could reach, as the CPU trainer measures its GEMM back end.
double measure_gemm_gflops(bool bf16) {
  const int n = 4096;
  const int64_t elems = (int64_t)n * n;
  cuda::Stream s = cuda::stream_create();
  cuda::Blas* blas = cuda::blas_create(s);
  void* a = cuda::device_alloc(elems * 4);
  void* b = cuda::device_alloc(elems * 4);
  auto* c = static_cast<float*>(cuda::device_alloc(elems * 4));
  double best = 0;
  if (blas && a && b && c) {
    cuda::memset_device(a, 0x3c, elems * 4, s);  // finite values (bf16 0x3c3c, fp32 ~0.0115)
    cuda::memset_device(b, 0x3c, elems * 4, s);
    cuda::Timer* t = cuda::timer_create();
    for (int i = 0; i < 7; i++) {
      cuda::timer_start(t, s);
      if (bf16)
        cuda::gemm_bf16(blas, false, true, n, n, n, static_cast<uint16_t*>(a), n, static_cast<uint16_t*>(b), n, 0.0f,
                        c, n);
      else
        cuda::gemm_f32(blas, false, true, n, n, n, 1.0f, static_cast<float*>(a), n, static_cast<float*>(b), n, 0.0f,
                       c, n);
      const double sec = cuda::timer_stop_seconds(t, s);
      if (i >= 2 && sec > 0) best = std::max(best, 2.0 * n * n * (double)n / sec / 1e9);
    }
    cuda::timer_destroy(t);
  }
  cuda::device_free(a), cuda::device_free(b), cuda::device_free(c);
  cuda::blas_destroy(blas);
  cuda::stream_destroy(s);
  return best;
}
}  // namespace

Status DeviceRun::open(const ModelConfig& c, const Model& host, int B, int T, Precision precision,
                       std::unique_ptr<DeviceRun>& out) {
  auto d = std::make_unique<DeviceRun>();
  if (Status s = d->gpu_.init(c, B, T, precision); !s)
    return Status::error(fmt::format("[train] device = \"cuda\": {}", s.message()));
  d->gpu_.upload_params(host.params());
  if (auto e = d->gpu_.sync(); !e.empty()) return Status::error("[train] device = \"cuda\": " + e);
  d->name_ = cuda::device_name(0);
  d->gemm_gflops_ = measure_gemm_gflops(precision == Precision::kBf16);
  out = std::move(d);
  return Status::ok();
}

void DeviceRun::backward(float dloss, bool first_micro) {
  if (first_micro) gpu_.zero_grad();
  gpu_.backward(dloss);
}

void DeviceRun::step(const AdamWConfig& h, double norm, int64_t t) {
  CudaAdamW o;
  o.lr = h.lr, o.beta1 = h.beta1, o.beta2 = h.beta2, o.eps = h.eps, o.weight_decay = h.weight_decay;
  o.grad_clip = h.grad_clip, o.decay_all = h.decay_all;
  gpu_.adamw(o, norm, t);
}

Status DeviceRun::sync() {
  if (auto e = gpu_.sync(); !e.empty()) return Status::error("[cuda] " + e);
  return Status::ok();
}

void DeviceRun::to_host(Model& m, AdamW& opt) {
  gpu_.download_params(m.params());
  gpu_.download_moments(opt.m(), opt.v());
}

void DeviceRun::from_host(const Model& m, AdamW& opt) {
  gpu_.upload_params(m.params());
  gpu_.upload_moments(opt.m(), opt.v());
}

}  // namespace smelt
