// oneDNN sgemm as an autograd function: forward x W^T, backward g W and g^T x; bfloat16
// linears widened to it where libtorch has no fast bfloat16 GEMM for the CPU.
#include "models/dnnl_linear.h"

#include <ATen/ATen.h>
#include <oneapi/dnnl/dnnl.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "models/bf16_widening.h"

namespace cadre {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// Row-major C[M,N] = op(A) op(B) + beta C; A, B, C contiguous float32.
void sgemm(char ta, char tb, int64_t M, int64_t N, int64_t K, const at::Tensor& A, int64_t lda, const at::Tensor& B,
           int64_t ldb, at::Tensor& C, int64_t ldc, float beta = 0.0f) {
  dnnl_status_t status = dnnl_sgemm(ta, tb, M, N, K, 1.0f, A.data_ptr<float>(), lda, B.data_ptr<float>(), ldb, beta,
                                    C.data_ptr<float>(), ldc);
  CADRE_CHECK(status == dnnl_success, "oneDNN sgemm ", ta, tb, " M=", M, " N=", N, " K=", K, " failed: status ",
              static_cast<int>(status));
}

// The forward both linear Functions share: x as [M, in] and W contiguous, saved for backward
// with x's shape; `product(x2, w)` gives x2 W^T as [M, out], returned in x's shape.
template <typename Product>
at::Tensor linear_forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, Product product) {
  const int64_t K = w.size(1), N = w.size(0), M = x.numel() / K;
  at::Tensor x2 = x.reshape({M, K}).contiguous();
  at::Tensor wc = w.contiguous();
  at::Tensor y = product(x2, wc);
  ctx->save_for_backward({x2, wc});
  ctx->saved_data["x_sizes"] = x.sizes();
  auto out_sizes = x.sizes().vec();
  out_sizes.back() = N;
  return y.view(out_sizes);
}

struct DnnlLinear : public torch::autograd::Function<DnnlLinear> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w) {
    return linear_forward(ctx, x, w, [](const at::Tensor& x2, const at::Tensor& wc) {
      const int64_t M = x2.size(0), K = wc.size(1), N = wc.size(0);
      at::Tensor y = at::empty({M, N}, x2.options());
      sgemm('N', 'T', M, N, K, x2, K, wc, K, y, N);
      return y;
    });
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor& x2 = saved[0];
    const at::Tensor& w = saved[1];
    const int64_t K = w.size(1), N = w.size(0), M = x2.size(0);
    at::Tensor g = grads[0].reshape({M, N}).contiguous();
    at::Tensor dx, dw;
    if (ctx->needs_input_grad(0)) {
      dx = at::empty({M, K}, g.options());
      sgemm('N', 'N', M, K, N, g, N, w, K, dx, K);
      dx = dx.view(ctx->saved_data["x_sizes"].toIntVector());
    }
    if (ctx->needs_input_grad(1)) {
      dw = at::empty({N, K}, g.options());
      sgemm('T', 'N', N, K, M, g, N, x2, K, dw, K);
    }
    return {dx, dw};
  }
};

// bfloat16 x W^T computed in float32 (inputs widened exactly, one rounding of the float32
// result, as libtorch's bfloat16 GEMMs accumulate in float32 and round once). Saves the bfloat16
// input and weight, not widened copies: FSDP regathers the weight for backward, and the saved
// activation stays half the size.
struct WidenedLinear : public torch::autograd::Function<WidenedLinear> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w) {
    return linear_forward(ctx, x, w, [](const at::Tensor& x2, const at::Tensor& wc) {
      return linear_no_bias(x2.to(at::kFloat), wc.to(at::kFloat)).to(x2.scalar_type());
    });
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor& x2 = saved[0];
    const at::Tensor& w = saved[1];
    at::Tensor g = grads[0].reshape({x2.size(0), w.size(0)}).to(at::kFloat).contiguous();
    at::Tensor dx, dw;
    if (ctx->needs_input_grad(0))
      dx = linear_input_grad(g, w.to(at::kFloat)).to(x2.scalar_type()).view(ctx->saved_data["x_sizes"].toIntVector());
    if (ctx->needs_input_grad(1)) dw = linear_weight_grad(g, x2.to(at::kFloat)).to(w.scalar_type()).contiguous();
    return {dx, dw};
  }
};

}  // namespace

bool dnnl_linear_enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("CADRE_DNNL_LINEAR");
    return !(env && std::strcmp(env, "0") == 0);
  }();
  return enabled;
}

namespace {
bool uses_dnnl(const at::Tensor& x, const at::Tensor& weight) {
  return dnnl_linear_enabled() && x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat &&
         x.device().is_cpu() && weight.device().is_cpu() && x.numel() > 0;
}
bool widens(const at::Tensor& x, const at::Tensor& weight) {
  return x.scalar_type() == at::kBFloat16 && weight.scalar_type() == at::kBFloat16 && x.device().is_cpu() &&
         weight.device().is_cpu() && x.numel() > 0 && bf16_linear_widens();
}
}  // namespace

at::Tensor linear_no_bias(const at::Tensor& x, const at::Tensor& weight) {
  if (uses_dnnl(x, weight)) return DnnlLinear::apply(x, weight);
  if (widens(x, weight)) return WidenedLinear::apply(x, weight);
  return at::linear(x, weight);
}

// The same kernels (and so the same bits) as the backward of linear_no_bias.
at::Tensor linear_input_grad(const at::Tensor& g2, const at::Tensor& weight) {
  if (widens(g2, weight)) return linear_input_grad(g2.to(at::kFloat), weight.to(at::kFloat)).to(g2.scalar_type());
  if (!uses_dnnl(g2, weight)) return g2.mm(weight);
  const int64_t M = g2.size(0), N = weight.size(0), K = weight.size(1);
  at::Tensor gc = g2.contiguous(), wc = weight.contiguous(), dx = at::empty({M, K}, g2.options());
  sgemm('N', 'N', M, K, N, gc, N, wc, K, dx, K);
  return dx;
}

at::Tensor linear_weight_grad(const at::Tensor& g2, const at::Tensor& x2) {
  if (widens(g2, x2))
    return linear_weight_grad(g2.to(at::kFloat), x2.to(at::kFloat)).to(g2.scalar_type()).contiguous();
  if (!uses_dnnl(g2, x2)) return x2.t().mm(g2).t();  // as at::linear's backward: [in, out], transposed
  const int64_t M = g2.size(0), N = g2.size(1), K = x2.size(1);
  at::Tensor gc = g2.contiguous(), xc = x2.contiguous(), dw = at::empty({N, K}, g2.options());
  sgemm('T', 'N', N, K, M, gc, N, xc, K, dw, K);
  return dw;
}

void linear_weight_grad_add(const at::Tensor& g2, const at::Tensor& x2, at::Tensor& grad) {
  CADRE_CHECK(grad.is_contiguous(), "linear_weight_grad_add: the gradient buffer must be contiguous");
  if (widens(g2, grad)) {
    grad.add_(linear_weight_grad(g2.to(at::kFloat), x2.to(at::kFloat)));  // one rounding of the float32 sum
    return;
  }
  if (!uses_dnnl(g2, grad)) {
    grad.addmm_(g2.t(), x2);
    return;
  }
  const int64_t M = g2.size(0), N = grad.size(0), K = grad.size(1);
  at::Tensor gc = g2.contiguous(), xc = x2.contiguous();
  sgemm('T', 'N', N, K, M, gc, N, xc, K, grad, K, /*beta=*/1.0f);
}

}  // namespace cadre
