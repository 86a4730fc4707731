// CUDA tensors go through c10d's ProcessGroupNCCL in builds with CADRE_CUDA=ON (a CUDA
// libtorch). Compiled only in such builds and untested on the CPU-only machines this project is
// developed on; elsewhere the stub reports that there is no CUDA path. Internal to comm/.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <functional>
#include <memory>

#include "comm/comm.h"

namespace cadre::comm {

class NcclGroup {
 public:
  // True when this build has NCCL and a CUDA device is visible.
  static bool usable();
  NcclGroup(c10::intrusive_ptr<c10d::Store> store, int rank, int size, std::chrono::milliseconds timeout);
  ~NcclGroup();

  // Each op is enqueued on NCCL's stream, after the work already on the issuing thread's current
  // stream (c10d orders it so), and returns without waiting. The returned function, called on
  // the thread that uses the result, makes that thread's current stream wait for the op (a CUDA
  // event, no host synchronisation): compute issued before it overlaps the op. c10d keeps the
  // tensors (recordStream, or a stash until the event) so the caching allocator never hands out
  // their memory while NCCL still reads or writes it.
  using StreamWait = std::function<void()>;
  StreamWait all_reduce(at::Tensor tensor, ReduceOp op);
  StreamWait all_gather(at::Tensor output, at::Tensor input);
  StreamWait reduce_scatter(at::Tensor output, at::Tensor input, ReduceOp op);
  StreamWait broadcast(at::Tensor tensor, int root);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cadre::comm
