// ProcessGroupNCCL wrapper for CUDA tensors (see nccl_group.h); a stub unless built with CADRE_CUDA.
// (Not USE_C10D_NCCL: a CUDA libtorch's CMake target defines that for every file, CADRE_CUDA on or off.)
#include "comm/nccl_group.h"

#include "core/error.h"
#include "core/torch_compat.h"

#ifdef CADRE_CUDA
#include <ATen/Context.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <map>
#include <mutex>
#endif

namespace cadre::comm {

#ifdef CADRE_CUDA

struct NcclGroup::IssueMark {
  mutable at::cuda::CUDAEvent event;  // block() is not const (it would create an unrecorded event)
  c10::DeviceIndex device = 0;
};

struct NcclGroup::Impl {
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> group;
  std::mutex mu;
  std::map<c10::DeviceIndex, at::cuda::CUDAStream> ordering;  // one per device, made on first use

  at::cuda::CUDAStream ordering_stream(c10::DeviceIndex device) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = ordering.find(device);
    if (it == ordering.end()) it = ordering.emplace(device, at::cuda::getStreamFromPool(false, device)).first;
    return it->second;
  }
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

// c10d orders an op after the work on the calling thread's current stream (it records an event
// there for NCCL's stream to wait on). Called on the communication thread, that would be the
// device's default stream, where the training thread goes on queueing kernels after it issued
// the op: NCCL would wait for those as well. So a stream holding only the wait for the issue
// mark is current while c10d is called.
template <typename CallC10d>
NcclGroup::StreamWait ordered_after(at::cuda::CUDAStream stream, const NcclGroup::IssueMark& after, CallC10d call) {
  after.event.block(stream);
  at::cuda::CUDAStreamGuard current(stream);
  return on_caller(call());
}
}  // namespace

std::shared_ptr<NcclGroup::IssueMark> NcclGroup::mark_issue(const at::Tensor& tensor) {
  auto mark = std::make_shared<IssueMark>();
  mark->device = tensor.device().index();
  mark->event.record(at::cuda::getCurrentCUDAStream(mark->device));
  return mark;
}

bool NcclGroup::usable() { return at::hasCUDA(); }

NcclGroup::NcclGroup(c10::intrusive_ptr<c10d::Store> store, int rank, int size, std::chrono::milliseconds timeout)
    : impl_(std::make_unique<Impl>()) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  impl_->group = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
}

NcclGroup::StreamWait NcclGroup::all_reduce(const IssueMark& after, at::Tensor tensor, ReduceOp op) {
  return ordered_after(impl_->ordering_stream(after.device), after, [&] {
    std::vector<at::Tensor> tensors{tensor};
    c10d::AllreduceOptions options;
    options.reduceOp = to_c10d(op);
    return impl_->group->allreduce(tensors, options);
  });
}

NcclGroup::StreamWait NcclGroup::all_gather(const IssueMark& after, at::Tensor output, at::Tensor input) {
  return ordered_after(impl_->ordering_stream(after.device), after,
                       [&] { return impl_->group->_allgather_base(output, input); });
}

NcclGroup::StreamWait NcclGroup::reduce_scatter(const IssueMark& after, at::Tensor output, at::Tensor input,
                                                ReduceOp op) {
  return ordered_after(impl_->ordering_stream(after.device), after, [&] {
    c10d::ReduceScatterOptions options;
    options.reduceOp = to_c10d(op);
    return impl_->group->_reduce_scatter_base(output, input, options);
  });
}

NcclGroup::StreamWait NcclGroup::broadcast(const IssueMark& after, at::Tensor tensor, int root) {
  return ordered_after(impl_->ordering_stream(after.device), after, [&] {
    std::vector<at::Tensor> tensors{tensor};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    return impl_->group->broadcast(tensors, options);
  });
}

#else  // CADRE_CUDA=OFF

struct NcclGroup::IssueMark {};
struct NcclGroup::Impl {};

bool NcclGroup::usable() { return false; }
std::shared_ptr<NcclGroup::IssueMark> NcclGroup::mark_issue(const at::Tensor&) { return nullptr; }

NcclGroup::NcclGroup(c10::intrusive_ptr<c10d::Store>, int, int, std::chrono::milliseconds) {
  throw Error("this build of Cadre has no CUDA code paths (CADRE_CUDA=OFF): CUDA tensors cannot be communicated");
}
NcclGroup::StreamWait NcclGroup::all_reduce(const IssueMark&, at::Tensor, ReduceOp) { return {}; }
NcclGroup::StreamWait NcclGroup::all_gather(const IssueMark&, at::Tensor, at::Tensor) { return {}; }
NcclGroup::StreamWait NcclGroup::reduce_scatter(const IssueMark&, at::Tensor, at::Tensor, ReduceOp) { return {}; }
NcclGroup::StreamWait NcclGroup::broadcast(const IssueMark&, at::Tensor, int) { return {}; }

#endif

NcclGroup::~NcclGroup() {
#if defined(CADRE_CUDA) && CADRE_TORCH_HAS_PG_SHUTDOWN
  // See core/torch_compat.h. Not run on the CPU-only CI machines.
  if (impl_ && impl_->group) impl_->group->shutdown();
#endif
}

}  // namespace cadre::comm
