// SwiGLU's fused forward and backward on the CPU (see fused_swiglu.h).
#include "models/fused_swiglu.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include "models/cpu_vector_math.h"

namespace cadre {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

constexpr int64_t kGrain = 1 << 15;  // elements per task: large enough to amortise the task

inline float sigmoid(float x) { return 1.0f / (1.0f + exp_f32(-x)); }

CADRE_CPU_CLONES void forward_f32(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * sigmoid(a[i]) * b[i];
}

// d/da silu(a) = s (1 + a (1 - s)) with s = sigmoid(a); the product's gradients are g b and
// g silu(a).
CADRE_CPU_CLONES void backward_f32(const float* a, const float* b, const float* g, float* da, float* db, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float s = sigmoid(a[i]);
    da[i] = g[i] * b[i] * (s * (1.0f + a[i] * (1.0f - s)));
    db[i] = g[i] * (a[i] * s);
  }
}

float* at_offset(const at::Tensor& t, int64_t i) { return t.data_ptr<float>() + i; }

struct FusedSwiglu : public torch::autograd::Function<FusedSwiglu> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b) {
    at::Tensor ac = a.contiguous(), bc = b.contiguous();
    at::Tensor y = at::empty_like(ac, at::MemoryFormat::Contiguous);
    at::parallel_for(0, ac.numel(), kGrain, [&](int64_t i0, int64_t i1) {
      forward_f32(at_offset(ac, i0), at_offset(bc, i0), at_offset(y, i0), i1 - i0);
    });
    ctx->save_for_backward({ac, bc});
    return y;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &a = saved[0], &b = saved[1];
    const at::Tensor g = grads[0].contiguous();
    at::Tensor da = at::empty_like(a), db = at::empty_like(b);
    at::parallel_for(0, a.numel(), kGrain, [&](int64_t i0, int64_t i1) {
      backward_f32(at_offset(a, i0), at_offset(b, i0), at_offset(g, i0), at_offset(da, i0), at_offset(db, i0),
                   i1 - i0);
    });
    return {ctx->needs_input_grad(0) ? da : at::Tensor(), ctx->needs_input_grad(1) ? db : at::Tensor()};
  }
};

}  // namespace

at::Tensor swiglu_composite(const at::Tensor& a, const at::Tensor& b) { return at::silu(a) * b; }

at::Tensor swiglu(const at::Tensor& a, const at::Tensor& b) {
  const at::ScalarType t = a.scalar_type();
  const bool fused = a.device().is_cpu() && b.device().is_cpu() && t == at::kFloat && b.scalar_type() == t &&
                     a.sizes() == b.sizes() && a.numel() > 0;
  return fused ? FusedSwiglu::apply(a, b) : swiglu_composite(a, b);
}

}  // namespace cadre
