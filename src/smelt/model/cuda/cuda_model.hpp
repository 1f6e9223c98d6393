// The Llama-style decoder trained on one NVIDIA GPU (docs/cuda.md): the CPU Model's parameter
// layout (params.hpp), forward and backward, op for op on the CUDA kernels (kernels/cuda/), with
// its parameters, gradients, AdamW moments and activations carved from one device allocation
// planned at init; nothing is allocated on the device in a step. fp32 (the exact path: cuBLAS
// without TF32) or bf16 mixed precision (bf16 GEMM inputs, fp32 sums, fp32 master weights and
// AdamW state; bf16 has fp32's exponent range, so no loss scaling). Without a CUDA build, init
// fails with a message. Not the trainer (train/), not tensor or pipeline parallel, no
// recomputation.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "smelt/common/batch.hpp"
#include "smelt/common/status.hpp"
#include "smelt/kernels/cuda/cuda_kernels.hpp"
#include "smelt/model/config.hpp"
#include "smelt/model/params.hpp"

namespace smelt {

struct CudaAdamW {
  float lr = 3e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
  float grad_clip = 1.0f;  // <= 0: no clipping
  bool decay_all = false;  // also decay norms and embeddings
};

class CudaModel {
 public:
  CudaModel() = default;
  CudaModel(const CudaModel&) = delete;
  CudaModel& operator=(const CudaModel&) = delete;
  ~CudaModel();

  // Plans and allocates everything for batches of at most B*T rows, T <= Tmax, on `device`.
  // Parameters start at zero: upload_params sets them (from a CPU Model's init or a checkpoint).
  Status init(const ModelConfig& c, int B, int T, Precision precision, int device = 0);
  void upload_params(const float* host);        // layout().total floats
  void download_params(float* host);            // synchronises
  void download_grads(float* host);             // synchronises
  void download_moments(float* m, float* v);    // AdamW's first and second moments; synchronises
  void upload_moments(const float* m, const float* v);

  // Mean loss over targets != -1 (synchronises: the loss is read back). The batch must stay
  // unchanged until backward (its tokens were uploaded; the host copy is read for the embedding's
  // backward order).
  Status forward(const Batch& b, float& loss);
  // Parameter gradients ADD into the device gradients; dloss 0: 1 / (targets != -1).
  void backward(float dloss = 0.0f);
  void zero_grad();
  // The global L2 norm of the gradients (synchronises).
  double grad_norm();
  // Clips by `norm` and takes one AdamW step t (from 1) on every tensor, weight decay where
  // ParamTensor::decay is set (or decay_all).
  void adamw(const CudaAdamW& o, double norm, int64_t t);
  double optimizer_step(const CudaAdamW& o, int64_t t);  // grad_norm, then adamw; returns the norm
  // Mean entropy (nats) of the last forward's predicted distributions over up to max_rows evenly
  // spaced rows with a target (the CPU model's prediction_entropy; synchronises).
  double prediction_entropy(int max_rows = 128);
  // Per-token losses of the last forward (N floats; forward already synchronised).
  std::vector<float> token_losses();
  const float* last_token_losses() const { return h_losses_.data(); }
  // Waits for the device; the error of anything queued (empty when fine).
  std::string sync();

  const ModelConfig& config() const { return cfg_; }
  const ParamLayout& layout() const { return layout_; }
  Precision precision() const { return precision_; }
  int64_t device_bytes() const { return bytes_; }
  // The allocation's table: one line per slice, in MiB.
  std::string memory_report() const;

  // Per-op-family GPU time (CUDA events between the ops), summed over the steps since
  // set_profiling(true); read after sync(). Off by default (no event is recorded).
  void set_profiling(bool on);
  std::vector<std::pair<std::string, double>> profile_ms() const;

 private:
  struct LayerBufs {
    float *ln1, *rstd1, *qkv, *att, *lse, *xmid, *ln2, *rstd2, *gu, *sw;
  };
  void layer_forward(int l, int B, int T);
  void layer_backward(int l, int B, int T);
  void linear_forward(float* out, const float* inp, int64_t w, int N, int IC, int OC, float beta);
  void linear_backward(float* dinp, int64_t w, const float* dout, const float* inp, int N, int IC, int OC);
  // Carves `count` elements of `bytes_each` from the allocation (256-byte aligned); plan_ only
  // records when base_ is null (the first of init's two passes).
  void* carve(const char* name, int64_t count, int64_t bytes_each);
  void plan_buffers();
  void mark(int op);       // an event after an op of family op (-1: a start, attributed to nothing)
  void collect_marks();    // adds the recorded intervals to prof_ms_ (the stream has been synchronised)

  ModelConfig cfg_;
  ParamLayout layout_;
  Precision precision_ = Precision::kFp32;
  int Bmax_ = 0, Tmax_ = 0;
  cuda::Stream stream_ = nullptr;
  cuda::Blas* blas_ = nullptr;
  char* base_ = nullptr;
  int64_t bytes_ = 0, at_ = 0;
  std::vector<std::pair<std::string, int64_t>> slices_;

  float *params_ = nullptr, *grads_ = nullptr, *m_ = nullptr, *v_ = nullptr;
  uint16_t *w16_ = nullptr, *x16_ = nullptr, *d16_ = nullptr;
  uint16_t *qkv16_ = nullptr, *dout16_ = nullptr;  // bf16 attention's operand copies
  bool attn16_ = false;                            // bf16 precision on the tensor-core attention
  std::vector<float*> resid_;
  std::vector<LayerBufs> layers_;
  float *lnf_ = nullptr, *rstdf_ = nullptr, *logits_ = nullptr, *losses_ = nullptr, *lse_ce_ = nullptr;
  float *dres_ = nullptr, *dln_ = nullptr, *dqkv_ = nullptr, *datt_ = nullptr, *dgu_ = nullptr, *dsw_ = nullptr;
  float *delta_ = nullptr, *norm_scratch_ = nullptr, *rope_ = nullptr;
  double* norm_partials_ = nullptr;
  int32_t *inputs_ = nullptr, *targets_ = nullptr, *segments_ = nullptr, *positions_ = nullptr;
  int32_t *emb_order_ = nullptr, *emb_starts_ = nullptr, *emb_tokens_ = nullptr;
  int32_t* entropy_rows_ = nullptr;
  float* entropy_ = nullptr;

  // The last forward's batch shape and what the backward needs from it.
  int B_ = 0, T_ = 0, U_ = 0;
  bool has_seg_ = false, has_pos_ = false;
  int64_t valid_ = 0;
  std::vector<int32_t> h_order_, h_starts_, h_tokens_, h_count_;  // embedding order, built on the host
  std::vector<float> h_losses_;
  std::vector<double> h_norm_;      // the gradient norm's block partials, read back
  std::vector<int32_t> h_targets_;  // the last forward's targets (entropy rows)
  cuda::Marks* marks_ = nullptr;
  std::vector<int> mark_ops_;
  int nmarks_ = 0;
  std::vector<double> prof_ms_;
};

}  // namespace smelt
