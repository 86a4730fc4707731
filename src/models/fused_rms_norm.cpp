// RMSNorm's fused forward and backward on the CPU (see fused_rms_norm.h).
#include "models/fused_rms_norm.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "models/cpu_vector_math.h"

namespace cadre {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

using BF16 = c10::BFloat16;

// One float32 row: y = round(round(x s) w), s = 1 / sqrt(mean(x^2) + eps) returned for the
// backward; the composite's roundings in T (the normalised value to x's dtype here, the product
// with the weight when the caller narrows y).
template <typename T>
inline __attribute__((always_inline)) float forward_row(const float* x, const float* w, float* y, int64_t D,
                                                        float eps) {
  const double squares = lane_sum(D, [&](int64_t i) { return x[i] * x[i]; });
  const float s = 1.0f / std::sqrt(static_cast<float>(squares / double(D)) + eps);
  for (int64_t i = 0; i < D; ++i) y[i] = round_as<T>(x[i] * s) * w[i];
  return s;
}

// The chain rule through the forward for one float32 row, with n = x s and gn = g w (the
// normalised value's gradient): dx = s (gn - n mean(gn n)), dw += g round(n); either null when
// not wanted.
template <typename T>
inline __attribute__((always_inline)) void backward_row(const float* x, const float* w, float s, const float* g,
                                                        float* dx, float* dw, int64_t D) {
  if (dx) {
    const double dot = lane_sum(D, [&](int64_t i) { return g[i] * w[i] * (x[i] * s); });
    const float mean_dot = static_cast<float>(dot / double(D));
    for (int64_t i = 0; i < D; ++i) dx[i] = s * (g[i] * w[i] - x[i] * s * mean_dot);
  }
  if (dw)
    for (int64_t i = 0; i < D; ++i) dw[i] += g[i] * round_as<T>(x[i] * s);
}

// Rows r0..r1 of the forward, compiled per ISA. bfloat16 rows are staged in float32 (`stage`:
// 3 D floats), as in the other kernels here: GCC vectorises the mixed 16/32-bit loops poorly
// (bench/fused_kernels: a [2048, 512] forward and backward 1.9 ms unstaged, 0.6 ms staged).
CADRE_CPU_CLONES void forward_rows(const float* x, const float* w, float* y, float* rstd, int64_t r0, int64_t r1,
                                   int64_t D, float eps, float*) {
  for (int64_t r = r0; r < r1; ++r) rstd[r] = forward_row<float>(x + r * D, w, y + r * D, D, eps);
}
CADRE_CPU_CLONES void forward_rows(const BF16* x, const BF16* w, BF16* y, float* rstd, int64_t r0, int64_t r1,
                                   int64_t D, float eps, float* stage) {
  float *fx = stage, *fw = stage + D, *fy = stage + 2 * D;
  widen(w, fw, D);
  for (int64_t r = r0; r < r1; ++r) {
    widen(x + r * D, fx, D);
    rstd[r] = forward_row<BF16>(fx, fw, fy, D, eps);
    narrow(fy, y + r * D, D);
  }
}

// Rows r0..r1 of the backward, compiled per ISA, dw accumulated into `dw` (D floats, or null);
// bfloat16 rows staged in float32 (`stage`: 4 D floats).
CADRE_CPU_CLONES void backward_rows(const float* x, const float* w, const float* rstd, const float* g, float* dx,
                                    float* dw, int64_t r0, int64_t r1, int64_t D, float*) {
  for (int64_t r = r0; r < r1; ++r)
    backward_row<float>(x + r * D, w, rstd[r], g + r * D, dx ? dx + r * D : nullptr, dw, D);
}
CADRE_CPU_CLONES void backward_rows(const BF16* x, const BF16* w, const float* rstd, const BF16* g, BF16* dx,
                                    float* dw, int64_t r0, int64_t r1, int64_t D, float* stage) {
  float *fx = stage, *fw = stage + D, *fg = stage + 2 * D, *fdx = stage + 3 * D;
  widen(w, fw, D);
  for (int64_t r = r0; r < r1; ++r) {
    widen(x + r * D, fx, D);
    widen(g + r * D, fg, D);
    backward_row<BF16>(fx, fw, rstd[r], fg, dx ? fdx : nullptr, dw, D);
    if (dx) narrow(fdx, dx + r * D, D);
  }
}

// Floats of staging a thread needs for `per_row` rows of D (none for float32, which is not staged).
template <typename T>
std::vector<float> stage_for(int64_t per_row, int64_t D) {
  return std::vector<float>(std::is_same<T, float>::value ? 0 : per_row * D);
}

// All rows of the forward in parallel.
template <typename T>
void forward_all(const T* x, const T* w, T* y, float* rstd, int64_t rows, int64_t D, float eps) {
  at::parallel_for(0, rows, 8, [&](int64_t r0, int64_t r1) {
    std::vector<float> stage = stage_for<T>(3, D);
    forward_rows(x, w, y, rstd, r0, r1, D, eps, stage.data());
  });
}

// All rows of the backward in `chunks` runs of rows, each accumulating its dw into its own row of
// dw_parts (null when the weight needs no gradient); dx null likewise.
template <typename T>
void backward_all(const T* x, const T* w, const float* rstd, const T* g, T* dx, float* dw_parts, int64_t rows,
                  int64_t D, int64_t chunks) {
  at::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
    std::vector<float> stage = stage_for<T>(4, D);
    for (int64_t c = c0; c < c1; ++c)
      backward_rows(x, w, rstd, g, dx, dw_parts ? dw_parts + c * D : nullptr, rows * c / chunks,
                    rows * (c + 1) / chunks, D, stage.data());
  });
}

struct FusedRmsNorm : public torch::autograd::Function<FusedRmsNorm> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, double eps) {
    const int64_t D = weight.numel();
    at::Tensor xc = x.contiguous(), wc = weight.contiguous();
    at::Tensor y = at::empty_like(xc);
    at::Tensor rstd = at::empty({xc.numel() / D}, xc.options().dtype(at::kFloat));
    if (x.scalar_type() == at::kFloat)
      forward_all(xc.data_ptr<float>(), wc.data_ptr<float>(), y.data_ptr<float>(), rstd.data_ptr<float>(),
                  rstd.numel(), D, static_cast<float>(eps));
    else
      forward_all(xc.data_ptr<BF16>(), wc.data_ptr<BF16>(), y.data_ptr<BF16>(), rstd.data_ptr<float>(), rstd.numel(),
                  D, static_cast<float>(eps));
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
      backward_all(x.data_ptr<float>(), w.data_ptr<float>(), rstd.data_ptr<float>(), g.data_ptr<float>(),
                   dx.defined() ? dx.data_ptr<float>() : nullptr, parts, rows, D, chunks);
    else
      backward_all(x.data_ptr<BF16>(), w.data_ptr<BF16>(), rstd.data_ptr<float>(), g.data_ptr<BF16>(),
                   dx.defined() ? dx.data_ptr<BF16>() : nullptr, parts, rows, D, chunks);
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
