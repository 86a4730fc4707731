// Attention's fused causal softmax on the CPU (see fused_causal_softmax.h).
#include "models/fused_causal_softmax.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "models/cpu_vector_math.h"

namespace cadre {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;
using BF16 = c10::BFloat16;

// p[0..n) = softmax(scale * x[0..n)) for a float32 row (scale > 0), rounded to T.
template <typename T>
inline __attribute__((always_inline)) void softmax_row(const float* x, float scale, float* p, int64_t n) {
  const float top = scale * row_max(x, n);
  for (int64_t j = 0; j < n; ++j) p[j] = exp_f32(scale * x[j] - top);
  const float inverse = static_cast<float>(1.0 / lane_sum(n, [&](int64_t j) { return p[j]; }));
  for (int64_t j = 0; j < n; ++j) p[j] = round_as<T>(p[j] * inverse);
}

// ds = scale * p * (dp - sum(dp * p)) for a float32 row: softmax's backward, through the scale.
inline __attribute__((always_inline)) void softmax_grad_row(const float* p, const float* dp, float scale, float* ds,
                                                            int64_t n) {
  const float dot = static_cast<float>(lane_sum(n, [&](int64_t j) { return dp[j] * p[j]; }));
  for (int64_t j = 0; j < n; ++j) ds[j] = scale * p[j] * (dp[j] - dot);
}

// Row i of a [T, T] matrix has i + 1 keys; the rest of it is zero. `stage` holds 3 T floats.
CADRE_CPU_CLONES void forward_row(const float* x, float* p, int64_t keys, int64_t T, float scale, float*) {
  softmax_row<float>(x, scale, p, keys);
  std::fill(p + keys, p + T, 0.0f);
}
CADRE_CPU_CLONES void forward_row(const BF16* x, BF16* p, int64_t keys, int64_t T, float scale, float* stage) {
  widen(x, stage, keys);
  softmax_row<BF16>(stage, scale, stage + T, keys);
  narrow(stage + T, p, keys);
  std::fill(p + keys, p + T, BF16(0.0f));
}
CADRE_CPU_CLONES void backward_row(const float* p, const float* dp, float* ds, int64_t keys, int64_t T, float scale,
                                   float*) {
  softmax_grad_row(p, dp, scale, ds, keys);
  std::fill(ds + keys, ds + T, 0.0f);
}
CADRE_CPU_CLONES void backward_row(const BF16* p, const BF16* dp, BF16* ds, int64_t keys, int64_t T, float scale,
                                   float* stage) {
  widen(p, stage, keys);
  widen(dp, stage + T, keys);
  softmax_grad_row(stage, stage + T, scale, stage + 2 * T, keys);
  narrow(stage + 2 * T, ds, keys);
  std::fill(ds + keys, ds + T, BF16(0.0f));
}

// f(row, keys, stage) over the N * T rows of [N, T, T] in parallel, each task with its own stage.
template <typename F>
void for_rows(int64_t N, int64_t T, const F& f) {
  at::parallel_for(0, N * T, 16, [&](int64_t r0, int64_t r1) {
    std::vector<float> stage(3 * T);
    for (int64_t r = r0; r < r1; ++r) f(r, r % T + 1, stage.data());
  });
}

template <typename T>
void forward_all(const at::Tensor& x, const at::Tensor& p, float scale) {
  const int64_t N = x.size(0), L = x.size(1);
  const T* xp = x.data_ptr<T>();
  T* pp = p.data_ptr<T>();
  for_rows(N, L, [&](int64_t r, int64_t keys, float* stage) {
    forward_row(xp + r * L, pp + r * L, keys, L, scale, stage);
  });
}

template <typename T>
void backward_all(const at::Tensor& p, const at::Tensor& dp, const at::Tensor& ds, float scale) {
  const int64_t N = p.size(0), L = p.size(1);
  const T *pp = p.data_ptr<T>(), *dpp = dp.data_ptr<T>();
  T* dsp = ds.data_ptr<T>();
  for_rows(N, L, [&](int64_t r, int64_t keys, float* stage) {
    backward_row(pp + r * L, dpp + r * L, dsp + r * L, keys, L, scale, stage);
  });
}

struct FusedCausalSoftmax : public torch::autograd::Function<FusedCausalSoftmax> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& scores, double scale) {
    const at::Tensor x = scores.contiguous();
    at::Tensor p = at::empty_like(x);
    if (x.scalar_type() == at::kFloat)
      forward_all<float>(x, p, static_cast<float>(scale));
    else
      forward_all<BF16>(x, p, static_cast<float>(scale));
    ctx->save_for_backward({p});
    ctx->saved_data["scale"] = scale;
    return p;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const at::Tensor p = ctx->get_saved_variables()[0];
    const at::Tensor dp = grads[0].contiguous();
    const float scale = static_cast<float>(ctx->saved_data["scale"].toDouble());
    at::Tensor ds = at::empty_like(p);
    if (p.scalar_type() == at::kFloat)
      backward_all<float>(p, dp, ds, scale);
    else
      backward_all<BF16>(p, dp, ds, scale);
    return {ds, at::Tensor()};
  }
};

}  // namespace

at::Tensor causal_softmax_composite(const at::Tensor& scores, double scale) {
  // float32 sums for lower precisions; float64 stays float64 (the tests' exact reference).
  const at::ScalarType sums = scores.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const int64_t T = scores.size(-1);
  const at::Tensor mask = at::full({T, T}, -std::numeric_limits<double>::infinity(), scores.options().dtype(sums));
  return at::softmax(scores.to(sums) * scale + mask.triu(1), -1).to(scores.scalar_type());
}

at::Tensor causal_softmax(const at::Tensor& scores, double scale) {
  const at::ScalarType t = scores.scalar_type();
  const bool fused = scores.device().is_cpu() && (t == at::kFloat || t == at::kBFloat16) && scores.dim() == 3 &&
                     scores.size(1) == scores.size(2) && scores.numel() > 0 && scale > 0;
  return fused ? FusedCausalSoftmax::apply(scores, scale) : causal_softmax_composite(scores, scale);
}

}  // namespace cadre
