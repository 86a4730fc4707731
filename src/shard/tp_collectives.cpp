// f and g of Megatron-LM as torch::autograd::Functions.
#include "shard/tp_collectives.h"

#include <torch/csrc/autograd/custom_function.h>

namespace cadre {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The communicator rides in the context as a raw pointer: it outlives every graph built
// during training (the mesh owns it).
at::Tensor summed(const at::Tensor& x, comm::Communicator& group) {
  at::Tensor out = x.contiguous().clone();
  group.all_reduce(out, comm::ReduceOp::Sum);
  return out;
}

comm::Communicator& group_of(AutogradContext* ctx) {
  return *reinterpret_cast<comm::Communicator*>(ctx->saved_data["group"].toInt());
}

struct CopyToRegion : public torch::autograd::Function<CopyToRegion> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, comm::Communicator* group) {
    ctx->saved_data["group"] = reinterpret_cast<int64_t>(group);
    return x;  // autograd gives the output its own node (as Megatron returns its input)
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {summed(grads[0], group_of(ctx)), at::Tensor()};
  }
};

struct ReduceFromRegion : public torch::autograd::Function<ReduceFromRegion> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, comm::Communicator* group) {
    (void)ctx;
    return summed(x, *group);
  }
  static variable_list backward(AutogradContext*, variable_list grads) { return {grads[0], at::Tensor()}; }
};

}  // namespace

at::Tensor copy_to_tp_region(const at::Tensor& x, comm::Communicator& group) {
  return CopyToRegion::apply(x, &group);
}

at::Tensor reduce_from_tp_region(const at::Tensor& x, comm::Communicator& group) {
  return ReduceFromRegion::apply(x, &group);
}

}  // namespace cadre
