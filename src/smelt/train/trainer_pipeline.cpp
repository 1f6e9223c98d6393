// The trainer's pipeline-parallel step (trainer_impl.hpp): the micro-batches in 1F1B order with the
// stages' messages, and an evaluation batch through the stages. Not the order itself (pipeline.hpp)
// nor the micro-batch's forward and backward (trainer.cpp).
#include <fmt/format.h>

#include "smelt/train/pipeline.hpp"
#include "smelt/train/trainer_impl.hpp"

namespace smelt::train_detail {

// The step's micro-batches through the pipeline in 1F1B order (train/pipeline.hpp). Each
// micro-batch keeps its activation set (slot) from its forward to its backward; a stage receives
// its input's activations before a forward and its output's gradient before a backward, and sends
// on without waiting (the sends complete by the step's end). Every stage reads the same batches
// (positions, masks, targets), so only activations and gradients travel.
Status Trainer::pipeline_step(StepStats& st) {
  Communicator& pp = *groups_.pp;
  const int stage = shard_.stage, P = shard_.pp, M = c_.train.grad_accum, S = model_.slots();
  const int64_t NC = (int64_t)B_ * T_ * c_.model.d_model;
  // An outgoing message is copied first: the buffer it came from (a slot's output, the shared
  // input gradient) is rewritten by the next op while the neighbour may not have taken it yet.
  size_t out_n = 0;
  auto send = [&](const float* data, int64_t n, int peer, int tag) {
    if (out_n == pipe_out_.size()) pipe_out_.emplace_back();
    std::vector<float>& buf = pipe_out_[out_n++];
    buf.assign(data, data + n);
    return pp.send_async(buf.data(), n, peer, tag);
  };
  // A message goes out only while its sender is inside MPI (Communicator::progress): between
  // blocks, so the neighbour does not wait for this stage's whole op (measured on bench-tiny's
  // pipeline of 2: the last stage waited 0.7-0.8 s of a 3.8 s step without it, docs/parallel.md).
  model_.set_between_blocks([&pp] { pp.progress(); });
  struct Unhook {
    Model& m;
    ~Unhook() { m.set_between_blocks({}); }
  } unhook{model_};
  for (const PipeOp& op : pipeline_1f1b(P, stage, M)) {
    const int slot = op.micro % S;
    model_.use_slot(slot);
    Batch& b = pipe_batches_[slot];
    const int tag = op.micro;
    if (op.forward) {
      b = fetch(st);
      const int64_t n = (int64_t)b.B * b.T * c_.model.d_model;
      if (n > NC) return Status::error(fmt::format("step {}: batch {}x{} larger than planned", step_ + 1, b.B, b.T));
      if (!shard_.first())
        if (Status s = pp.recv(model_.stage_input(), n, stage - 1, tag); !s) return s;
      if (Status s = forward_micro(b, op.micro, st); !s) return s;
      if (!shard_.last())
        if (Status s = send(model_.stage_output(), n, stage + 1, tag); !s) return s;
    } else {
      const int64_t n = (int64_t)b.B * b.T * c_.model.d_model;
      if (!shard_.last())
        if (Status s = pp.recv(model_.stage_output_grad(), n, stage + 1, tag); !s) return s;
      backward_micro(b, op.micro, st);
      if (!shard_.first())
        if (Status s = send(model_.stage_input_grad(), n, stage - 1, tag); !s) return s;
    }
  }
  if (Status s = pp.wait_sends(); !s) return s;
  model_.use_slot(0);
  return Status::ok();
}

// An evaluation batch: each stage receives its input, runs its layers and passes them on; the
// last stage's losses are the batch's (the evaluation's sums are taken from it, trainer_eval.cpp).
Status Trainer::pipeline_forward_loss(const Batch& b, float& loss) {
  Communicator& pp = *groups_.pp;
  const int stage = shard_.stage;
  const int64_t n = (int64_t)b.B * b.T * c_.model.d_model;
  if (!shard_.first())
    if (Status s = pp.recv(model_.stage_input(), n, stage - 1, 0); !s) return s;
  if (Status s = model_.forward_loss(b, loss); !s) return s;
  if (!shard_.last()) {
    if (Status s = pp.send_async(model_.stage_output(), n, stage + 1, 0); !s) return s;
    return pp.wait_sends();
  }
  return Status::ok();
}

}  // namespace smelt::train_detail
