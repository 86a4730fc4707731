// libtorch's own c10d ProcessGroupGloo, kept beside our collectives so the benchmark measures
// both in one run: its all-reduce, and the all_gather_into_tensor / reduce_scatter_tensor that a
// PyTorch program (FSDP2 on Gloo) runs for those ops.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <memory>

#include "comm/comm.h"
#include "core/torch_compat.h"

namespace cadre::comm {

class C10dGloo {
 public:
  // Whether this libtorch's Gloo has all_gather / reduce_scatter over flat tensors.
  static constexpr bool kHasTensorCollectives = CADRE_TORCH_GLOO_HAS_TENSOR_COLLECTIVES;

  // Collective; needs the job's store to be up (a world Communicator on rank 0 hosts it).
  C10dGloo(const JobEnv& env, std::chrono::milliseconds timeout);
  ~C10dGloo();
  // float32 only (c10d Gloo 1.13 rejects bfloat16); sum or max. Each waits for the op.
  void all_reduce(at::Tensor tensor, ReduceOp op);
  // `output` holds size() chunks of `input`'s size. Error without kHasTensorCollectives.
  void all_gather(at::Tensor output, at::Tensor input);
  // `input` holds size() chunks of `output`'s size. Error without kHasTensorCollectives.
  void reduce_scatter(at::Tensor output, at::Tensor input, ReduceOp op);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cadre::comm
