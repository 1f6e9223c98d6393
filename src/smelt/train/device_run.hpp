// The trainer's steps on a GPU ([train] device = "cuda", docs/cuda.md): the model's forward,
// backward, gradient norm and AdamW run in a CudaModel; the host Model and AdamW keep the layout
// and receive the parameters and moments only when a checkpoint is written (to_host), and give
// them back after a resume or a rollback (from_host). One process, one GPU: no tensor, pipeline or
// data parallelism yet. Not the training loop (trainer.cpp), not the kernels (kernels/cuda/).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "smelt/common/batch.hpp"
#include "smelt/common/status.hpp"
#include "smelt/model/cuda/cuda_model.hpp"
#include "smelt/model/model.hpp"
#include "smelt/train/optimizer.hpp"

namespace smelt {

class DeviceRun {
 public:
  // Refuses what the GPU path does not do yet, naming it; plans the device model for batches of
  // B x T and copies the host model's initial parameters to it; measures the device's GEMM rate at
  // the run's precision (the MFU denominator).
  static Status open(const ModelConfig& c, const Model& host, int B, int T, Precision precision,
                     std::unique_ptr<DeviceRun>& out);

  Status forward(const Batch& b, float& loss) { return gpu_.forward(b, loss); }
  // The last forward's per-token losses (host memory, N floats) and its prediction entropy.
  const float* token_losses() const { return gpu_.last_token_losses(); }
  double entropy(int rows) { return rows > 0 ? gpu_.prediction_entropy(rows) : 0.0; }
  // A micro-batch's backward: the first of a step starts the gradients from zero, the others add.
  void backward(float dloss, bool first_micro);
  double grad_norm() { return gpu_.grad_norm(); }
  // One AdamW step t with the norm already taken.
  void step(const AdamWConfig& h, double norm, int64_t t);
  Status sync();

  void to_host(Model& m, AdamW& opt);    // parameters and moments (the whole buffer)
  void from_host(const Model& m, AdamW& opt);

  const std::string& device_name() const { return name_; }
  double gemm_gflops() const { return gemm_gflops_; }
  std::string memory_report() const { return gpu_.memory_report(); }
  int64_t device_bytes() const { return gpu_.device_bytes(); }

 private:
  CudaModel gpu_;
  std::string name_;
  double gemm_gflops_ = 0;
};

}  // namespace smelt
