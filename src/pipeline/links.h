// Point-to-point links between neighbouring pipeline stages, built from two-rank communicators:
// a broadcast from the sender is a send, and each link carries one kind of tensor in one
// direction (activations from stage s to the next, gradients back), so its transfers run in the
// order both ends issue them and the collectives layer's in-band checks (kind, dtype, size,
// root) name a schedule whose ends disagree. Ops are asynchronous: a send never stalls the
// stage's compute, and receives are posted ahead of the action that needs them.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "comm/comm.h"

namespace cadre::pipeline {

class Links {
 public:
  // Collective over `pp_group` (rank k is stage k). `wrap`: the last stage also sends to the
  // first (interleaved chunks). Edges are connected in one global order, each by its two ends.
  Links(comm::Communicator& pp_group, bool wrap);

  int64_t stage() const { return stage_; }
  int64_t stages() const { return stages_; }
  bool has_next() const { return bool(act_out_); }
  bool has_previous() const { return bool(act_in_); }

  comm::Work send_activation(const at::Tensor& t) { return act_out_->broadcast_async(t, own_root(*act_out_)); }
  comm::Work receive_activation(const at::Tensor& into) { return act_in_->broadcast_async(into, peer_root(*act_in_)); }
  comm::Work send_gradient(const at::Tensor& t) { return grad_out_->broadcast_async(t, own_root(*grad_out_)); }
  comm::Work receive_gradient(const at::Tensor& into) { return grad_in_->broadcast_async(into, peer_root(*grad_in_)); }
  // The links this stage has (to abort their ops when a peer is lost).
  std::vector<comm::Communicator*> communicators() const;

 private:
  static int own_root(const comm::Communicator& c) { return c.rank(); }
  static int peer_root(const comm::Communicator& c) { return 1 - c.rank(); }

  int64_t stage_ = 0, stages_ = 1;
  // To the next stage: activations out, gradients in; from the previous: activations in,
  // gradients out.
  std::unique_ptr<comm::Communicator> act_out_, grad_in_, act_in_, grad_out_;
};

}  // namespace cadre::pipeline
