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

  // What the issuing thread's current stream (of `tensor`'s device) has queued when an op is
  // issued: a CUDA event recorded there, without waiting. Ops run later on the communication
  // thread; given this mark, an op starts after exactly that work and not after kernels the
  // issuing thread queues meanwhile (so a prefetch overlaps the compute issued after it).
  struct IssueMark;
  static std::shared_ptr<IssueMark> mark_issue(const at::Tensor& tensor);

  // Each op is enqueued on NCCL's stream after the work `after` marks, and returns without
  // waiting. The returned function, called on the thread that uses the result, makes that
  // thread's current stream wait for the op (a CUDA event, no host synchronisation): compute
  // issued before it overlaps the op. c10d keeps the tensors (recordStream, or a stash until
  // the event) so the caching allocator never hands out their memory while NCCL still reads or
  // writes it.
  using StreamWait = std::function<void()>;
  StreamWait all_reduce(const IssueMark& after, at::Tensor tensor, ReduceOp op);
  StreamWait all_gather(const IssueMark& after, at::Tensor output, at::Tensor input);
  StreamWait reduce_scatter(const IssueMark& after, at::Tensor output, at::Tensor input, ReduceOp op);
  StreamWait broadcast(const IssueMark& after, at::Tensor tensor, int root);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cadre::comm
