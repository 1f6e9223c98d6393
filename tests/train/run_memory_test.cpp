// The memory plan's reduction scratch against the reducer it sizes: with [dist] bucket_mb (MiB)
// the planner's largest data-parallel message equals the largest bucket DenseReducer sends when a
// real backward reports its gradient ranges.
#include "smelt/train/run_memory.hpp"

#include <algorithm>

#include <gtest/gtest.h>

#include "smelt/dist/communicator.hpp"
#include "smelt/dist/grad_reducer.hpp"
#include "smelt/model/model.hpp"
#include "smelt/model/params.hpp"
#include "smelt/ckpt/async_writer.hpp"
#include "smelt/ckpt/safetensors.hpp"
#include "smelt/train/optimizer.hpp"
#include "smelt/train/train_state.hpp"

namespace smelt {
namespace {

// Two ranks as far as the reducer can tell; records the size of every bucket sum it starts.
class RecordingComm : public Communicator {
 public:
  std::vector<int64_t> sums;
  int rank() const override { return 0; }
  int size() const override { return 2; }
  int nodes() const override { return 1; }
  const char* algorithm() const override { return "flat"; }
  Status barrier() override { return Status::ok(); }
  Status allreduce_sum(float*, int64_t) override { return Status::ok(); }
  Status allreduce_sum(double*, int64_t) override { return Status::ok(); }
  [[noreturn]] void abort(int code) override { std::exit(code); }
  Status allgather_sparse(const int64_t*, const float*, int, std::vector<int64_t>&, std::vector<float>&,
                          std::vector<int>&) override {
    return Status::ok();
  }
  Status allreduce_max(float*, int64_t) override { return Status::ok(); }
  uint64_t bytes_sent() const override { return 0; }
  Status send_async(const float*, int64_t, int, int) override { return Status::ok(); }
  Status recv(float*, int64_t, int, int) override { return Status::ok(); }
  Status wait_sends() override { return Status::ok(); }
  void progress() override {}
  double take_recv_wait_ms() override { return 0; }
  Status reduce_scatter_sum(float*, int64_t, int64_t, const std::vector<int64_t>&) override { return Status::ok(); }
  Status allgather_ranges(float*, const std::vector<int64_t>&) override { return Status::ok(); }
  void sum_async(float*, int64_t, int64_t n, const std::vector<int64_t>*) override { sums.push_back(n); }
  Status wait_async(double*) override { return Status::ok(); }
  void arrive(int64_t) override {}
  Status split(int, int, std::unique_ptr<Communicator>&) override { return Status::error("not here"); }
};

// The largest bucket an overlapped reducer sends in one real backward of model config c.
int64_t reducer_largest_bucket(const ModelConfig& c, const DistConfig& d) {
  const int B = 1, T = 8;
  Model m;
  EXPECT_TRUE(m.init(c, B, T, 1, 3).is_ok());
  RecordingComm comm;
  auto reducer = grad_reducer_create(d, comm, m.layout().total, {}, 1);
  EXPECT_TRUE(reducer && reducer->overlaps());
  if (!reducer) return -1;
  Batch b;
  b.B = B, b.T = T;
  for (int t = 0; t < T; t++) b.inputs.push_back(t + 1), b.targets.push_back(t + 2);
  b.target_tokens = T;
  m.set_grad_ready([&](int64_t lo, int64_t hi) { reducer->ready(lo, hi); });
  reducer->begin_step(m.grads(), nullptr, 1);
  float loss = 0;
  EXPECT_TRUE(m.forward(b, loss, 1.0f).is_ok());
  m.backward(1.0f);
  reducer->backward_done();
  return comm.sums.empty() ? -1 : *std::max_element(comm.sums.begin(), comm.sums.end());
}

TEST(RunMemory, ReductionScratchIsTheReducersLargestBucket) {
  for (bool tied : {true, false})
    for (double mb : {0.01, 0.05, 0.1312, 0.2, 4.0}) {  // 0.1312: MB and MiB split an untied model apart
      ModelConfig c;
      c.tie_embeddings = tied;
      DistConfig d;
      d.bucket_mb = mb;
      RunMemoryInput in;
      in.B = 1, in.T = 8, in.dp = 2, in.dist = d;
      const RunMemory plan = run_memory_plan(c, ModelShard{}, in);
      EXPECT_EQ(plan.reduce_bytes, 4 * reducer_largest_bucket(c, d)) << "bucket_mb " << mb << " tied " << tied;
    }
}

// The staging row is what the checkpoint writer copies: the tensors a save hands it, one buffer for
// a run that saves only at its end, two with periodic saves, none when it saves neither.
TEST(RunMemory, StagingIsTheSavedTensors) {
  for (bool tied : {true, false}) {
    ModelConfig c;
    c.tie_embeddings = tied;
    Model m;
    ASSERT_TRUE(m.init(c, 1, 8, 1, 3).is_ok());
    AdamW opt;
    opt.init(m.layout(), 1);
    CkptSaveRequest r;
    train_state_add_tensors(TrainTensors{m, opt}, false, r);
    int64_t floats = 0;
    for (const auto& t : r.tensors) {
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
      floats += n;
    }
    RunMemoryInput in;
    in.B = 1, in.T = 8;
    EXPECT_EQ(run_memory_plan(c, ModelShard{}, in).staging_bytes, 0);
    in.save_at_end = true;
    const int64_t buffer = ckpt_staging_bytes(floats);
    EXPECT_GE(buffer, 4 * floats);
    EXPECT_LT(buffer, 4 * floats + (2 << 20));  // rounded to 2 MiB (huge pages)
    EXPECT_EQ(run_memory_plan(c, ModelShard{}, in).staging_bytes, buffer) << "tied " << tied;
    EXPECT_EQ(run_memory_plan(c, ModelShard{}, in).writer_bytes, safetensors_writer_bytes());
    in.checkpoints = true;
    EXPECT_EQ(run_memory_plan(c, ModelShard{}, in).staging_bytes, 2 * buffer) << "tied " << tied;
    in.staged = false;  // [ckpt] async = false on one rank: ckpt_save writes from the tensors
    EXPECT_EQ(run_memory_plan(c, ModelShard{}, in).staging_bytes, 0);
  }
}

// The rows add up: the process and the model, then the larger of the GEMM probe and the step's
// buffers; the one-line summary names the total and the largest rows.
TEST(RunMemory, TotalAndSummary) {
  ModelConfig c;
  RunMemoryInput in;
  in.B = 2, in.T = 16, in.save_at_end = true, in.eval_bytes = 1 << 20, in.process_bytes = 20 << 20;
  const RunMemory rm = run_memory_plan(c, ModelShard{}, in);
  EXPECT_EQ(rm.eval_bytes, 1 << 20);
  EXPECT_EQ(rm.total(), (20 << 20) + rm.model.total() + std::max(rm.gemm_probe_bytes, rm.step_bytes()));
  EXPECT_EQ(rm.step_bytes(), rm.staging_bytes + rm.writer_bytes + (1 << 20));
  const std::string s = rm.summary(3);
  EXPECT_EQ(s.rfind("run total ", 0), 0u) << s;
  EXPECT_NE(s.find("process 20.0 MiB"), std::string::npos) << s;
  EXPECT_NE(rm.report().find("eval tasks"), std::string::npos) << rm.report();
}

TEST(RunMemory, BucketMbIsMebibytes) {
  EXPECT_EQ(dist_bucket_elements(4) * (int64_t)sizeof(float), 4 << 20);
  EXPECT_EQ(dist_bucket_elements(0.25) * (int64_t)sizeof(float), 1 << 18);
  EXPECT_EQ(dist_bucket_elements(1e-9), 1);  // never an empty bucket
}

}  // namespace
}  // namespace smelt
