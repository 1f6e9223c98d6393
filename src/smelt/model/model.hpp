// The Llama-style decoder for training on CPU: parameters, gradients and activations planned once
// at init, forward(batch) -> loss, backward() accumulating parameter gradients, optional per-layer
// recomputation. Not the optimizer (train/optimizer.hpp), not the training loop (train/), not
// inference with a KV cache.
#pragma once
#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "smelt/common/batch.hpp"
#include "smelt/common/page_buffer.hpp"
#include "smelt/common/status.hpp"
#include "smelt/kernels/decode_linear.hpp"
#include "smelt/model/activations.hpp"
#include "smelt/model/config.hpp"
#include "smelt/model/lora.hpp"
#include "smelt/model/params.hpp"
#include "smelt/model/shard.hpp"

namespace smelt {

// The collectives a tensor-parallel shard calls (the trainer gives them over its TP group). Every
// TP rank calls them in the same order; a failure ends the job inside them.
struct TpCollectives {
  std::function<void(float*, int64_t)> sum;  // in-place sum over the TP ranks
  std::function<void(float*, int64_t)> max;  // in-place element-wise maximum over the TP ranks
};

// The batch checks of a forward, before any buffer is touched: the shape fits the planned Bmax x
// Tmax, the buffers hold B*T entries, tokens and targets lie in the vocabulary, RoPE positions
// below max_seq_len. Errors start with `who` ("[model]", "[cuda]") and name the position.
Status model_batch_check(const char* who, const Batch& b, const ModelConfig& c, int Bmax, int Tmax);

class Model {
 public:
  // Plans memory for batches of at most B*T rows with length at most T, logs the plan, refuses when it exceeds budget_bytes
  // (<= 0: no limit), then allocates everything and initialises the weights from seed. The plan
  // also counts the optimizer's moments (train/optimizer.hpp), sharded over optimizer_shards ranks
  // under ZeRO-1; the model does not hold them.
  Status init(const ModelConfig& c, int B, int T, int threads, uint64_t seed,
              int64_t budget_bytes = 0, int optimizer_shards = 1);
  // One shard of the model (shard.hpp): its tensors (layout()), each initialised with the values
  // the whole model gives that box, and `slots` activation sets (use_slot). A TP shard (tp > 1)
  // needs set_tp(). A stage without the embedding takes its input in stage_input(); one without
  // the head ends its forward at stage_output() and takes its output's gradient in
  // stage_output_grad() before backward.
  Status init(const ModelConfig& c, const ModelShard& shard, int B, int T, int threads, uint64_t seed,
              int64_t budget_bytes, int optimizer_shards, int slots);
  void set_tp(TpCollectives tp) { tp_ = std::move(tp); }
  const ModelShard& shard() const { return shard_; }
  const ShardDims& dims() const { return d_; }
  // Activation sets: a pipeline stage keeps one per micro-batch in flight. forward and backward
  // of one micro-batch use the same slot; the batch of each slot stays alive until its backward.
  int slots() const { return (int)slots_.size(); }
  void use_slot(int i);
  float* stage_input() { return acts_.resid[0]; }             // (N, C)
  const float* stage_output() const { return acts_.resid[d_.L]; }
  float* stage_output_grad() { return acts_.dres; }           // (N, C), before backward
  const float* stage_input_grad() const { return acts_.dres; }  // (N, C), after backward

  // Forward pass: logits (acts().logits; not kept by a bf16 forward with grad_dloss) and the mean
  // loss over targets != -1. The batch must
  // stay alive and unchanged until backward() (it is read again there). Uses
  // batch.segments (document masking, when batch.mask_segments) and batch.positions (RoPE) when
  // they are non-empty.
  // grad_dloss > 0 (training, followed by backward(grad_dloss)): under bf16 the LM head's output
  // gradient is made here while the logits are in cache (cross_entropy_forward_grad_bf16).
  Status forward(const Batch& batch, float& loss, float grad_dloss = 0.0f);
  // The loss and token_losses() only (an evaluation); no backward may follow. Under bf16 the LM
  // head and the cross-entropy run in blocks of rows and no (N,V) logits are kept
  // (prediction_entropy as after a fused forward).
  Status forward_loss(const Batch& batch, float& loss);
  // Backward of the last forward: parameter gradients ADD into grads() (call zero_grad first).
  // dloss: gradient of the objective per token loss; 0 means 1 / (targets != -1) of the batch
  // (the gradient of the mean). Turns acts().logits into dlogits (in bf16 precision they stay
  // logits: the dlogits go to bf16 scratch).
  void backward(float dloss = 0.0f);
  // Called by backward() each time the gradient of a flat range [begin, end) of grads() is final
  // for this backward: the untied LM head, the final norm, each layer from the last, the embedding
  // (with a tied head the embedding and head are one range, final at the end). Ranges come in
  // decreasing order and cover the buffer. A data-parallel trainer starts reducing them while
  // backward goes on. Empty function: not called.
  void set_grad_ready(std::function<void(int64_t begin, int64_t end)> f) { grad_ready_ = std::move(f); }
  // Called between the parts of forward() and backward(): after each layer's attention block and
  // MLP block; after the LM head's GEMM where it is one whole-matrix product (fp32, no TP) and
  // after its backward. A pipeline stage moves its outgoing messages along there
  // (Communicator::progress). Empty function: not called.
  void set_between_blocks(std::function<void()> f) { between_blocks_ = std::move(f); }
  void zero_grad();
  // Numerics of the linear layers (call before init; Precision in hw/precision.hpp). bf16 keeps
  // the fp32 parameters as master weights and rounds them into a bf16 copy at each forward.
  void set_precision(Precision p) { precision_ = p; }
  Precision precision() const { return precision_; }
  // Health signals of the last forward (read them before backward(), which overwrites the logits):
  // mean entropy (nats) of the predicted next-token distribution over up to max_rows evenly spaced
  // rows with a target; the fraction of attention weights below `threshold` for up to max_queries
  // evenly spaced (row, head) queries per layer (every layer, or only the last with recompute on,
  // since recompute keeps one layer's activations).
  // After a forward with grad_dloss under bf16 the logits are not kept: the entropy is the one the
  // forward took over set_entropy_rows() rows (default 128), whatever max_rows says.
  double prediction_entropy(int max_rows = 128) const;
  void set_entropy_rows(int n) { entropy_rows_ = n; }
  double attention_sparsity(int max_queries = 64, float threshold = 1e-3f) const;
  // Per-token losses of the last forward (N = B*T; 0 where the target is -1; a stage without the
  // head has none).
  const float* token_losses() const { return acts_.losses; }

  const ModelConfig& config() const { return cfg_; }
  // The trained parameters: the whole model's, or with LoRA on (set_lora) the adapters' alone,
  // so that the optimizer, the gradient reduction and the checkpoints see only what trains.
  const ParamLayout& layout() const { return lora_on() ? lora_.params : layout_; }
  float* params() { return lora_on() ? lp_.data() : params_.data(); }
  const float* params() const { return lora_on() ? lp_.data() : params_.data(); }
  float* grads() { return lora_on() ? lg_.data() : grads_.data(); }
  // The base model's weights (the same as layout()/params() without LoRA; frozen with it). With a
  // compact base ([lora] base_dtype bf16 or q8_0) the layer matrices are not in base_params()
  // (their part of it stays zero and takes no memory): write the base through set_base_tensor.
  const ParamLayout& base_layout() const { return layout_; }
  float* base_params() {  // (a write to the base: its bf16 copy is made again at the next forward)
    base16_stale_ = true;
    return params_.data();
  }
  const float* base_params() const { return params_.data(); }
  // One whole tensor t of base_layout() from v (t.size() floats): copied, or held as the base's
  // dtype when t is a compact layer matrix.
  void set_base_tensor(const ParamTensor& t, const float* v);
  // Whether t is held in the base's compact dtype (a layer matrix of a bf16 or q8_0 base).
  bool compact(const ParamTensor& t) const;

  // LoRA adapters (model/lora.hpp) on the linear layers; call before init. With them the base is
  // frozen: backward computes the adapters' gradients and the input gradients, none of the base's
  // weights. One whole model only (no TP or PP shard).
  void set_lora(const LoraConfig& l) { lcfg_ = l; }
  bool lora_on() const { return lcfg_.enabled(); }
  const LoraConfig& lora_config() const { return lcfg_; }
  const LoraLayout& lora_layout() const { return lora_; }
  // The dropout masks' counter of the next training forward (each forward then adds one); a
  // resumed run sets it so that its masks continue the interrupted run's.
  void set_lora_counter(uint64_t c) { lora_counter_ = c; }
  uint64_t lora_counter() const { return lora_counter_; }
  const Activations& acts() const { return acts_; }
  const MemoryPlan& plan() const { return plan_; }
  void set_threads(int threads) { threads_ = threads; }
  // Frees the step's buffers: the activations (every slot's), the bf16 operand copies and scratch.
  // For the end of a run: the model keeps its parameters and gradients but takes no batch again
  // (forward refuses every batch) until init. Returns the bytes freed.
  int64_t release_step_buffers();
  // Runs every op on its naive `_ref` kernel (the oracle; slow, allocates its (T,T) and (N,V)
  // scratch here, once). For tests and for checking a new backend, never for training.
  void set_reference(bool on);

  // Op-family timing for benchmarks (bench/train/model_bench): wall seconds per op, forward and
  // backward apart, summed over the steps since profile_reset(). Off by default; when on, one
  // clock read per op (no allocation).
  void set_profiling(bool on) { profiling_ = on; }
  void profile_reset();
  static int profile_count();
  static const char* profile_name(int op);
  double profile_seconds(int op) const { return prof_[op]; }

 private:
  void prof_start();
  void prof_mark(int op);
  void layer_forward(int l, int B, int T);
  void layer_backward(int l, int B, int T);
  // The attention input's extras after the q/k/v GEMM: bias, QK-norm, RoPE (and their backward,
  // from the attention's dqkv back to the GEMM's output gradient).
  void qkv_extras_forward(int l, int T);
  void qkv_extras_backward(int l, int T);
  // One linear layer, out (N,OC) = beta out + inp (N,IC) @ W^T with W at params offset w, in the
  // model's precision (and on the references in reference mode); its backward likewise.
  void linear_forward(float* out, const float* inp, int64_t w, int N, int IC, int OC, float beta);
  void linear_backward(float* dinp, int64_t w, const float* dout, const float* inp, int N, int IC, int OC);
  // LoRA (model_lora.cpp): the buffers; the adapters of targets [first, last] of layer l added to
  // a GEMM's output (N, ldo) from its input x, and their backward from that output's gradient.
  Status lora_alloc(int B, int T);
  void lora_forward(int l, int first, int last, float* out, int ldo, const float* x, int N);
  void lora_backward(int l, int first, int last, float* dinp, const float* dout, int ldo, const float* x, int N);
  LoraOp lora_op(int l, int t);

  // Tensor parallel: the embedding lookup and the LM head with its cross-entropy over this
  // rank's vocabulary rows.
  void embed_forward_tp(const Batch& b);
  void embed_backward_tp(const Batch& b);
  void cross_entropy_tp(const Batch& b);
  void cross_entropy_backward_tp(const Batch& b, float dloss);
  void tp_sum(float* x, int64_t n) const {
    if (shard_.tp > 1) tp_.sum(x, n);
  }
  // A q8_0 base: wq_ sized and q_at_ filled for its compact matrices (else both empty).
  void alloc_q8_base();
  // The parameters' initial values: every element as the whole model draws it (init RNG at the
  // element's place in the whole model's sequence), whatever box of it this shard holds.
  void init_params(uint64_t seed);

  ModelConfig cfg_;
  ModelShard shard_;
  ShardDims d_;
  TpCollectives tp_;
  std::vector<float> tp_ce_;  // the vocabulary-parallel cross-entropy's per-row scratch (3N)
  struct Slot {  // an activation set not in use, with its forward's batch
    Activations acts;
    const Batch* batch = nullptr;
    int64_t valid = 0;
    float fused_dloss = 0.0f;
    double block_entropy = -1.0;
  };
  std::vector<Slot> slots_;
  int slot_ = 0;
  ParamLayout layout_;
  MemoryPlan plan_;
  Activations acts_;
  // Lazily mapped under LoRA (PageBuffer): a frozen base's compact matrices never touch params_,
  // and its gradient buffer only where the norms' gradients are written.
  PageBuffer<float> params_, grads_;
  std::vector<float> rope_;  // (max_seq_len, HS/2, 2)
  std::vector<double> inv_freq_;  // (HS/2) RoPE's frequencies, scaled (rope_inv_freq)
  mutable std::vector<float> sparsity_scratch_;  // (Tmax) attention_sparsity's scores
  int Bmax_ = 0, Tmax_ = 0, threads_ = 1;
  bool reference_ = false;
  Precision precision_ = Precision::kFp32;
  float fused_dloss_ = 0.0f;  // the dloss d16_ already holds the LM head's gradient for (0: none)
  std::vector<float> head_block_;  // bf16: one block of kHeadRows rows of logits (training, forward_loss)
  int entropy_rows_ = 128;
  double block_entropy_ = -1.0;    // the fused forward's prediction entropy (-1: none, logits kept)
  static std::vector<int> entropy_sample(const Batch& b, int max_rows);
  Status forward(const Batch& b, float& loss, float grad_dloss, bool loss_only);
  PageBuffer<uint16_t> w16_;               // bf16: the weights' copy (params layout; a bf16 base: its matrices)
  std::vector<uint16_t> x16_, d16_;        // bf16: GEMM operand scratch
  std::vector<BlockQ8_0> wq_;              // a q8_0 base: its matrices' blocks
  std::unordered_map<int64_t, int64_t> q_at_;  // a q8_0 base: a matrix's params offset -> its first block
  std::vector<uint16_t> qkv16_;            // bf16: attention's copy of one layer's qkv
  std::vector<float> attn16_scratch_;      // bf16: attention's per-thread block scratch
  std::vector<float> ref_scratch_, ref_logits_;  // reference mode only
  bool profiling_ = false;
  double prof_[32] = {};  // [op] seconds
  double prof_last_ = 0;
  std::function<void(int64_t, int64_t)> grad_ready_;
  std::function<void()> between_blocks_;
  LoraConfig lcfg_;
  LoraLayout lora_;
  std::vector<float> lp_, lg_;       // the adapters and their gradients (lora_.params layout)
  std::vector<float> lu_;            // [layer][target] (Bmax*Tmax, rank): drop(x) A^T, for the backward
  std::vector<float> lxd_, ldu_, ldxd_;  // scratch: the dropped input, du, its input gradient
  uint64_t lora_counter_ = 0;        // the dropout masks' forward number
  bool lora_drop_ = false;           // this forward trains (dropout on)
  bool base16_stale_ = true;         // bf16 under LoRA: the frozen base's copy is older than the base
  const Batch* batch_ = nullptr;  // of the last forward
  int64_t valid_ = 0;             // targets != -1 in the last forward
};

}  // namespace smelt
