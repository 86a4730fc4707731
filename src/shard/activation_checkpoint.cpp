// Re-entrant activation checkpoint as a torch::autograd::Function.
#include "shard/activation_checkpoint.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

namespace cadre {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                            const at::Tensor& mask, Block* block) {
    // The block's pointer rides in saved_data as an integer: the module outlives the graph.
    ctx->saved_data["block"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(block));
    ctx->saved_data["cos"] = cos;
    ctx->saved_data["sin"] = sin;
    ctx->saved_data["mask"] = mask;
    ctx->save_for_backward({x});
    at::NoGradGuard no_grad;
    return block->forward(x, Rope{cos, sin}, mask);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    Block* block = reinterpret_cast<Block*>(static_cast<intptr_t>(ctx->saved_data["block"].toInt()));
    Rope rope{ctx->saved_data["cos"].toTensor(), ctx->saved_data["sin"].toTensor()};
    at::Tensor mask = ctx->saved_data["mask"].toTensor();
    at::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    at::Tensor out;
    {
      torch::autograd::AutoGradMode on(true);
      out = block->forward(x, rope, mask);
    }
    // Accumulates into the parameters' .grad (and x.grad) like the un-checkpointed graph would.
    torch::autograd::backward({out}, {grad_out[0]});
    return {x.grad(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor checkpointed_block(Block& block, const at::Tensor& x, const Rope& rope, const at::Tensor& mask) {
  return CheckpointFunction::apply(x, rope.cos, rope.sin, mask, &block);
}

}  // namespace cadre
