// c10d ProcessGroupGloo collectives over its own prefix of the job's store.
#include "comm/c10d_baseline.h"

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "comm/c10d_store.h"
#include "core/error.h"

namespace cadre::comm {

struct C10dGloo::Impl {
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group;
};

C10dGloo::C10dGloo(const JobEnv& env, std::chrono::milliseconds timeout) : impl_(std::make_unique<Impl>()) {
  // One process alone has no store to join (the Communicator used an in-memory one too).
  c10::intrusive_ptr<c10d::Store> client;
  if (env.world_size == 1)
    client = c10::make_intrusive<c10d::HashStore>();
  else
    client = c10::make_intrusive<JobStore>(env, /*host_server=*/false, timeout);
  auto store = c10::make_intrusive<c10d::PrefixStore>("cadre/c10d_baseline", client);
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  const bool loopback = env.master_addr == "localhost" || env.master_addr.rfind("127.", 0) == 0;
  options->devices.push_back(loopback ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                      : c10d::ProcessGroupGloo::createDefaultDevice());
  impl_->group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, env.rank, env.world_size, options);
}

C10dGloo::~C10dGloo() = default;

namespace {

c10d::ReduceOp c10d_op(const at::Tensor& tensor, ReduceOp op) {
  CADRE_CHECK(tensor.scalar_type() == at::kFloat, "c10d Gloo baseline runs float32 only, got ", tensor.scalar_type());
  CADRE_CHECK(op != ReduceOp::Avg, "c10d Gloo 1.13 has no AVG reduction");
  return op == ReduceOp::Max ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM;
}

void check_tensor_collectives(const char* op) {
  CADRE_CHECK(C10dGloo::kHasTensorCollectives, "c10d Gloo baseline: this libtorch's ProcessGroupGloo has no ", op,
              " over flat tensors (2.3 and later have)");
}

}  // namespace

void C10dGloo::all_reduce(at::Tensor tensor, ReduceOp op) {
  std::vector<at::Tensor> tensors{tensor};
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d_op(tensor, op);
  impl_->group->allreduce(tensors, opts)->wait();
}

void C10dGloo::all_gather(at::Tensor output, at::Tensor input) {
  check_tensor_collectives("all_gather");
  CADRE_CHECK(input.scalar_type() == at::kFloat, "c10d Gloo baseline runs float32 only, got ", input.scalar_type());
  impl_->group->_allgather_base(output, input)->wait();
}

void C10dGloo::reduce_scatter(at::Tensor output, at::Tensor input, ReduceOp op) {
  check_tensor_collectives("reduce_scatter");
  c10d::ReduceScatterOptions opts;
  opts.reduceOp = c10d_op(input, op);
  impl_->group->_reduce_scatter_base(output, input, opts)->wait();
}

}  // namespace cadre::comm
