// ProcessGroupNCCL wrapper for CUDA tensors (see nccl_group.h); a stub unless built with CADRE_CUDA.
// (Not USE_C10D_NCCL: a CUDA libtorch's CMake target defines that for every file, CADRE_CUDA on or off.)
#include "comm/nccl_group.h"

#include "core/error.h"
#include "core/torch_compat.h"

#ifdef CADRE_CUDA
#include <ATen/Context.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace cadre::comm {

#ifdef CADRE_CUDA

struct NcclGroup::Impl {
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> group;
};

namespace {
// c10d's wait() on a NCCL work is the stream wait (an event recorded on NCCL's stream, waited
// on by the current stream); it blocks the host only under TORCH_NCCL_BLOCKING_WAIT.
NcclGroup::StreamWait on_caller(c10::intrusive_ptr<c10d::Work> work) {
  return [work = std::move(work)] { work->wait(); };
}

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return c10d::ReduceOp::SUM;
    case ReduceOp::Avg: return c10d::ReduceOp::AVG;  // NCCL >= 2.10
    case ReduceOp::Max: return c10d::ReduceOp::MAX;
  }
  return c10d::ReduceOp::SUM;
}
}  // namespace

bool NcclGroup::usable() { return at::hasCUDA(); }

NcclGroup::NcclGroup(c10::intrusive_ptr<c10d::Store> store, int rank, int size, std::chrono::milliseconds timeout)
    : impl_(std::make_unique<Impl>()) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  impl_->group = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
}

NcclGroup::StreamWait NcclGroup::all_reduce(at::Tensor tensor, ReduceOp op) {
  std::vector<at::Tensor> tensors{tensor};
  c10d::AllreduceOptions options;
  options.reduceOp = to_c10d(op);
  return on_caller(impl_->group->allreduce(tensors, options));
}

NcclGroup::StreamWait NcclGroup::all_gather(at::Tensor output, at::Tensor input) {
  return on_caller(impl_->group->_allgather_base(output, input));
}

NcclGroup::StreamWait NcclGroup::reduce_scatter(at::Tensor output, at::Tensor input, ReduceOp op) {
  c10d::ReduceScatterOptions options;
  options.reduceOp = to_c10d(op);
  return on_caller(impl_->group->_reduce_scatter_base(output, input, options));
}

NcclGroup::StreamWait NcclGroup::broadcast(at::Tensor tensor, int root) {
  std::vector<at::Tensor> tensors{tensor};
  c10d::BroadcastOptions options;
  options.rootRank = root;
  return on_caller(impl_->group->broadcast(tensors, options));
}

#else  // CADRE_CUDA=OFF

struct NcclGroup::Impl {};

bool NcclGroup::usable() { return false; }

NcclGroup::NcclGroup(c10::intrusive_ptr<c10d::Store>, int, int, std::chrono::milliseconds) {
  throw Error("this build of Cadre has no CUDA code paths (CADRE_CUDA=OFF): CUDA tensors cannot be communicated");
}
NcclGroup::StreamWait NcclGroup::all_reduce(at::Tensor, ReduceOp) { return {}; }
NcclGroup::StreamWait NcclGroup::all_gather(at::Tensor, at::Tensor) { return {}; }
NcclGroup::StreamWait NcclGroup::reduce_scatter(at::Tensor, at::Tensor, ReduceOp) { return {}; }
NcclGroup::StreamWait NcclGroup::broadcast(at::Tensor, int) { return {}; }

#endif

NcclGroup::~NcclGroup() {
#if defined(CADRE_CUDA) && CADRE_TORCH_HAS_PG_SHUTDOWN
  // See core/torch_compat.h. Not run on the CPU-only CI machines.
  if (impl_ && impl_->group) impl_->group->shutdown();
#endif
}

}  // namespace cadre::comm
