// RMSNorm's fused forward and backward on the CPU (see fused_rms_norm.h).
#include "models/fused_rms_norm.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>

#include "models/cpu_vector_math.h"

namespace cadre {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// y = round(round(x s) w) per row, s = 1 / sqrt(mean(x^2) + eps) kept for the backward: the
// composite's roundings (the normalised value to x's dtype, then the product with the weight).
template <typename T>
void forward_rows(const T* x, const T* w, T* y, float* rstd, int64_t rows, int64_t D, float eps) {
  at::parallel_for(0, rows, 8, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * D;
      T* yr = y + r * D;
      const double squares = lane_sum(D, [&](int64_t i) { return f32(xr[i]) * f32(xr[i]); });
      const float s = 1.0f / std::sqrt(static_cast<float>(squares / double(D)) + eps);
      rstd[r] = s;
      for (int64_t i = 0; i < D; ++i) yr[i] = from_f32<T>(f32(from_f32<T>(f32(xr[i]) * s)) * f32(w[i]));
    }
  });
}

// The chain rule through the forward, per row, with n = x s and gn = g w (the normalised value's
// gradient): dx = s (gn - n mean(gn n)); dw = sum over rows of g round(n), accumulated per chunk of
// rows into its own row of dw_parts (null when the weight needs no gradient), dx null likewise.
template <typename T>
void backward_rows(const T* x, const T* w, const float* rstd, const T* g, T* dx, float* dw_parts, int64_t rows,
                   int64_t D, int64_t chunks) {
  at::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      float* dw = dw_parts ? dw_parts + c * D : nullptr;
      for (int64_t r = rows * c / chunks; r < rows * (c + 1) / chunks; ++r) {
        const T* xr = x + r * D;
        const T* gr = g + r * D;
        const float s = rstd[r];
        if (dx) {
          T* dxr = dx + r * D;
          const double dot = lane_sum(D, [&](int64_t i) { return f32(gr[i]) * f32(w[i]) * (f32(xr[i]) * s); });
          const float mean_dot = static_cast<float>(dot / double(D));
          for (int64_t i = 0; i < D; ++i)
            dxr[i] = from_f32<T>(s * (f32(gr[i]) * f32(w[i]) - f32(xr[i]) * s * mean_dot));
        }
        if (dw)
          for (int64_t i = 0; i < D; ++i) dw[i] += f32(gr[i]) * f32(from_f32<T>(f32(xr[i]) * s));
      }
    }
  });
}

struct FusedRmsNorm : public torch::autograd::Function<FusedRmsNorm> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, double eps) {
    const int64_t D = weight.numel();
    at::Tensor xc = x.contiguous(), wc = weight.contiguous();
    at::Tensor y = at::empty_like(xc);
    at::Tensor rstd = at::empty({xc.numel() / D}, xc.options().dtype(at::kFloat));
    if (x.scalar_type() == at::kFloat)
      forward_rows(xc.data_ptr<float>(), wc.data_ptr<float>(), y.data_ptr<float>(), rstd.data_ptr<float>(),
                   rstd.numel(), D, static_cast<float>(eps));
    else
      forward_rows(xc.data_ptr<c10::BFloat16>(), wc.data_ptr<c10::BFloat16>(), y.data_ptr<c10::BFloat16>(),
                   rstd.data_ptr<float>(), rstd.numel(), D, static_cast<float>(eps));
    ctx->save_for_backward({xc, wc, rstd});
    return y;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1], &rstd = saved[2];
    const at::Tensor g = grads[0].contiguous();
    const int64_t rows = rstd.numel(), D = w.numel();
    const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), rows));
    at::Tensor dx = ctx->needs_input_grad(0) ? at::empty_like(x) : at::Tensor();
    at::Tensor dw_parts = ctx->needs_input_grad(1) ? at::zeros({chunks, D}, w.options().dtype(at::kFloat)) : at::Tensor();
    float* parts = dw_parts.defined() ? dw_parts.data_ptr<float>() : nullptr;
    if (x.scalar_type() == at::kFloat)
      backward_rows(x.data_ptr<float>(), w.data_ptr<float>(), rstd.data_ptr<float>(), g.data_ptr<float>(),
                    dx.defined() ? dx.data_ptr<float>() : nullptr, parts, rows, D, chunks);
    else
      backward_rows(x.data_ptr<c10::BFloat16>(), w.data_ptr<c10::BFloat16>(), rstd.data_ptr<float>(),
                    g.data_ptr<c10::BFloat16>(), dx.defined() ? dx.data_ptr<c10::BFloat16>() : nullptr, parts, rows,
                    D, chunks);
    at::Tensor dw = dw_parts.defined() ? dw_parts.sum(0).to(w.scalar_type()) : at::Tensor();
    return {dx, dw, at::Tensor()};
  }
};

}  // namespace

at::Tensor rms_norm_composite(const at::Tensor& x, const at::Tensor& weight, double eps) {
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor normed = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return normed.to(x.scalar_type()) * weight;
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::ScalarType t = x.scalar_type();
  const bool fused = x.device().is_cpu() && weight.device().is_cpu() && (t == at::kFloat || t == at::kBFloat16) &&
                     weight.scalar_type() == t && weight.dim() == 1 && x.dim() >= 1 &&
                     x.size(-1) == weight.numel() && x.numel() > 0;
  return fused ? FusedRmsNorm::apply(x, weight, eps) : rms_norm_composite(x, weight, eps);
}

}  // namespace cadre
