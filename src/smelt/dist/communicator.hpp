// The communicator the trainer talks to (docs/dist.md): rank and size, barrier, deterministic
// sums, the max, and point-to-point messages between stages, behind one small interface with an
// MPI implementation and a single-process one, so `smelt train` runs the same code with or without
// mpirun. Not the trainer's policy (what is reduced when) and no model knowledge.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "smelt/common/enum_names.hpp"
#include "smelt/common/status.hpp"

namespace smelt {

enum class AllReduceAlgo { kFlat, kHierarchical };  // [dist] allreduce
inline constexpr EnumName<AllReduceAlgo> kAllReduceAlgoNames[] = {{AllReduceAlgo::kFlat, "flat"},
                                                                  {AllReduceAlgo::kHierarchical, "hierarchical"}};
inline std::span<const EnumName<AllReduceAlgo>> enum_names(AllReduceAlgo) { return kAllReduceAlgoNames; }

enum class GradCompression { kNone, kTopk };  // [dist.compression] type
inline constexpr EnumName<GradCompression> kGradCompressionNames[] = {{GradCompression::kNone, "none"},
                                                                      {GradCompression::kTopk, "topk"}};
inline std::span<const EnumName<GradCompression>> enum_names(GradCompression) { return kGradCompressionNames; }

struct DistConfig {                // [dist]
  AllReduceAlgo allreduce = AllReduceAlgo::kFlat;
  int ranks_per_node = 0;          // hierarchical: 0 = ranks sharing memory form a node; N > 0 groups
                                   // ranks [k*N, (k+1)*N) (emulates nodes on one machine)
  double timeout_s = 600;          // a collective waiting longer ends the job (a hung rank)
  bool deterministic = true;       // rank-ordered sums (bit-identical to one process); false: the MPI
                                   // library's all-reduce (its own order and algorithm, flat only)
  int zero = 0;                    // 1: ZeRO-1, the AdamW moments sharded over the ranks
  bool overlap = true;             // gradient buckets reduced while backward still runs
  double bucket_mb = 4;            // bucket size for the overlapped reduction, in MiB (2^20 bytes)
  GradCompression compression = GradCompression::kNone;  // [dist.compression] type
  double topk_ratio = 0.01;          // [dist.compression] ratio: fraction of gradient entries sent
  // The defaults are the settings bench/RESULTS.md found to keep top-k within 0.1% of dense
  // ("top-k momentum correction"); 0 and 0 give plain top-k with error feedback.
  int64_t topk_warmup_steps = 30;    // [dist.compression] warmup_steps: the ratio falls geometrically
                                     // from 1 to `ratio` over these steps (as Deep Gradient Compression)
  double topk_momentum = 0.9;        // [dist.compression] momentum: > 0 accumulates a local velocity
                                     // (momentum correction) and selects from it
  int inject_hang_rank = -1;       // fault injection (tests): this rank stops responding ...
  int64_t inject_hang_step = 0;    // ... at this step (the trainer acts on it)
  int inject_delay_rank = -1;      // fault injection (tests): this rank reaches each reduction ...
  double inject_delay_ms = 0;      // ... this much later ...
  int64_t inject_delay_step = 1;   // ... from this step on (a straggler)
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int nodes() const = 0;         // node count of the hierarchical reduction (1 when flat)
  virtual const char* algorithm() const = 0;  // "flat" | "hierarchical" | "local"
  virtual Status barrier() = 0;
  // In-place sum of n floats over the ranks, every rank getting the same bits: element i is
  // ((x_0[i] + x_1[i]) + x_2[i]) + ... in rank order, whatever the rank count, so a run on N ranks
  // equals one process that adds N micro-batch gradients in the same order. (Each rank reduces one
  // slice of the buffer from every rank's copy, then the slices are gathered: 2 (N-1)/N n floats
  // sent per rank, the bandwidth of a ring all-reduce.)
  virtual Status allreduce_sum(float* data, int64_t n) = 0;
  // Hierarchical ("hierarchical"): reduce-scatter inside each node (local ranks in order), then the
  // slices summed across nodes (node order) by the ranks holding the same slice, then all-gather
  // inside the node: element i is (node_0 sum) + (node_1 sum) + ..., each node's sum in local rank
  // order. Deterministic; with one rank per node, or one node, the same bits as flat; otherwise the
  // same sum associated by node (fp32 rounding apart). Only the inter-node step crosses nodes, with
  // 2 (nodes-1)/nodes of a slice per rank.
  // Same for doubles (losses, token counts), rank order (always flat).
  virtual Status allreduce_sum(double* data, int64_t n) = 0;
  // Ends every rank of the job (a failed rank must not leave the others waiting in a collective).
  [[noreturn]] virtual void abort(int code) = 0;
  // Every rank's (index, value) pairs, concatenated in rank order; counts[r] = rank r's pair count.
  virtual Status allgather_sparse(const int64_t* idx, const float* val, int count, std::vector<int64_t>& all_idx,
                                  std::vector<float>& all_val, std::vector<int>& counts) = 0;
  // Element-wise maximum of n floats over the ranks, in place (the tensor-parallel cross-entropy's
  // max over vocabulary shards). Exact: the result is one of the inputs, so every rank gets the
  // same bits, with two exceptions where MPI_MAX's comparison cannot choose: -0 and +0 compare
  // equal (a rank may get either), and a NaN may or may not win (a NaN logit makes the loss's
  // later sum NaN on every rank anyway).
  virtual Status allreduce_max(float* data, int64_t n) = 0;
  // Bytes this rank has sent in collectives and point-to-point messages (for metrics).
  virtual uint64_t bytes_sent() const = 0;

  // Point to point (pipeline stages: activations forward, their gradients back). send_async
  // starts sending n floats to rank `peer` of this communicator with `tag` (0 to 32767, the range
  // MPI guarantees) and returns at once; data must stay unchanged until wait_sends() has returned.
  // recv blocks (polled, with [dist] timeout_s like the collectives) until n floats from `peer`
  // with `tag` have arrived in data; a message of another length is consumed and reported as an
  // error naming both lengths. wait_sends completes every started send. Messages between two ranks
  // with one tag arrive in the order sent. Above 2^29 - 1 floats a message travels as several MPI
  // messages (MPI counts are int; bytes kept within int too), split and reassembled here. Like the
  // collectives, not while sum_async's sums run. A rank has no messages to itself: peer == rank()
  // is an error, and so is every send_async and recv of the single-process communicator ("no peer
  // on one process"; its wait_sends has nothing to wait for, its recv wait is 0).
  virtual Status send_async(const float* data, int64_t n, int peer, int tag) = 0;
  virtual Status recv(float* data, int64_t n, int peer, int tag) = 0;
  virtual Status wait_sends() = 0;
  // Moves the started sends along without waiting (MPI tests them). A large message travels in
  // fragments that the sender hands over only inside MPI calls (shared memory without single-copy
  // transfers: btl_vader_single_copy_mechanism none), so a stage that computes without calling
  // MPI holds back the message its neighbour waits for; the trainer calls this between a
  // pipeline stage's layers. A no-op without started sends.
  virtual void progress() = 0;
  // Time (ms) this rank spent blocked in recv since the last call (reset by the call): a pipeline
  // stage's wait for its neighbour (its bubble).
  virtual double take_recv_wait_ms() = 0;

  // ZeRO-1. `bounds` (size()+1 entries) gives rank r the range [bounds[r], bounds[r+1]) of a flat
  // buffer; `data` holds that buffer's elements [base, base + n). reduce_scatter_sum leaves the
  // rank-ordered sum (the same bits as allreduce_sum) in this rank's part of [base, base + n); the
  // rest of data is left as it was. allgather_ranges copies every rank's range of the whole buffer
  // (data = element 0) to every rank.
  virtual Status reduce_scatter_sum(float* data, int64_t base, int64_t n, const std::vector<int64_t>& bounds) = 0;
  virtual Status allgather_ranges(float* data, const std::vector<int64_t>& bounds) = 0;

  // Overlap: sum_async queues the float sum of [data, data + n) (allreduce_sum, or with bounds the
  // reduce_scatter_sum above) on a communication thread and returns; the caller computes on other
  // memory meanwhile and calls no other collective until wait_async, which blocks until every
  // queued sum is done and returns the first failure. busy_ms: the communication thread's time in
  // the sums since the last wait_async. Without thread support in MPI the sum runs at once.
  virtual void sum_async(float* data, int64_t base, int64_t n, const std::vector<int64_t>* bounds) = 0;
  virtual Status wait_async(double* busy_ms) = 0;

  // Says that this rank reached `step`'s gradient reduction. When a collective then times out,
  // rank 0 names the ranks that never arrived (host and rank), and the others name rank 0 if it is
  // the one missing.
  virtual void arrive(int64_t step) = 0;

  // Sub-groups (the data-, tensor- and pipeline-parallel groups of a rank grid): the ranks that
  // pass the same color (>= 0) form one communicator, ranked by key (ties by rank here), which
  // reduces flat with this one's other settings. Every rank must call it (a collective). A group
  // must be destroyed before its parent. The single-process communicator gives another one.
  virtual Status split(int color, int key, std::unique_ptr<Communicator>& out) = 0;
};

// One process (rank 0 of 1), or MPI when started by mpirun/srun (MPI_Init here, MPI_Finalize when
// the communicator is destroyed).
Status dist_create(const DistConfig& c, std::unique_ptr<Communicator>& out);
// The rules between [dist] keys (each key's own range is checked where it is read: train_config.cpp).
Status dist_config_validate(const DistConfig& c);
// The gradient elements in one overlapped-reduction bucket of bucket_mb MiB (at least 1): the
// reducer's bucket and the memory plan's.
int64_t dist_bucket_elements(double bucket_mb);
// True when this process was started by mpirun or srun.
bool dist_launched_by_mpi();

}  // namespace smelt
