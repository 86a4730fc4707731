// CUDA tensors go through c10d's ProcessGroupNCCL in builds with CADRE_CUDA=ON (a CUDA
// libtorch). Compiled only in such builds and untested on the CPU-only machines this project is
// developed on; elsewhere the stub reports that there is no CUDA path. Internal to comm/.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>

#include "comm/comm.h"

namespace cadre::comm {

class NcclGroup {
 public:
  // True when this build has NCCL and a CUDA device is visible.
  static bool usable();
  NcclGroup(c10::intrusive_ptr<c10d::Store> store, int rank, int size, std::chrono::milliseconds timeout);
  ~NcclGroup();

  // Blocking from the caller's view (c10d work waited); tensors on the current CUDA device.
  void all_reduce(at::Tensor tensor, ReduceOp op);
  void all_gather(at::Tensor output, at::Tensor input);
  void reduce_scatter(at::Tensor output, at::Tensor input, ReduceOp op);
  void broadcast(at::Tensor tensor, int root);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cadre::comm
