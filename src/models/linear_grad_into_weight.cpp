// The linear whose weight gradient goes straight into .grad (see linear_grad_into_weight.h).
#include "models/linear_grad_into_weight.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "models/dnnl_linear.h"

namespace cadre {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

bool is_buffer_for(const at::Tensor& grad, const at::Tensor& weight) {
  return grad.defined() && !grad.is_sparse() && grad.is_contiguous() && grad.scalar_type() == weight.scalar_type() &&
         grad.sizes() == weight.sizes() && grad.device() == weight.device();
}

at::Tensor empty_sparse_like(const at::Tensor& weight) {
  const at::Tensor indices = at::empty({1, 0}, weight.options().dtype(at::kLong));
  const at::Tensor values = at::empty({0, weight.size(1)}, weight.options());
  return at::sparse_coo_tensor(indices, values, weight.sizes())._coalesced_(true);
}

struct LinearGradIntoWeight : public torch::autograd::Function<LinearGradIntoWeight> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w) {
    ctx->save_for_backward({x, w});
    return linear_no_bias(x, w);
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1];
    const int64_t in = w.size(1), out = w.size(0);
    const at::Tensor g2 = grads[0].reshape({-1, out});
    at::Tensor dx, dw;
    if (ctx->needs_input_grad(0)) dx = linear_input_grad(g2, w).view(x.sizes());
    if (ctx->needs_input_grad(1)) {
      at::Tensor grad = w.grad();  // the leaf's own .grad: `w` was saved unchanged
      const at::Tensor x2 = x.reshape({-1, in});
      if (!at::GradMode::is_enabled() && is_buffer_for(grad, w)) {
        linear_weight_grad_add(g2, x2, grad);
        dw = empty_sparse_like(w);
      } else {
        dw = linear_weight_grad(g2, x2);
      }
    }
    return {dx, dw};
  }
};

}  // namespace

at::Tensor linear_grad_into_weight(const at::Tensor& x, const at::Tensor& weight) {
  return LinearGradIntoWeight::apply(x, weight);
}

}  // namespace cadre
