// Cross-entropy's fused forward and backward on the CPU (see fused_cross_entropy.h).
#include "models/fused_cross_entropy.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "models/cpu_vector_math.h"

namespace cadre {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;
using BF16 = c10::BFloat16;

constexpr int64_t kIgnoreIndex = -100;  // libtorch's default ignore_index

// log sum exp of a float32 row, in lanes shifted by the row's maximum.
inline __attribute__((always_inline)) float row_log_sum_exp(const float* x, int64_t V) {
  const float top = row_max(x, V);
  const double sum = lane_sum(V, [&](int64_t i) { return exp_f32(x[i] - top); });
  return top + static_cast<float>(std::log(sum));
}

// The gradient of a float32 row's loss, scaled: (softmax - onehot(target)) * scale.
inline __attribute__((always_inline)) void row_gradient(const float* x, float lse, int64_t target, float scale,
                                                        float* dx, int64_t V) {
  for (int64_t i = 0; i < V; ++i) dx[i] = exp_f32(x[i] - lse) * scale;
  dx[target] = (exp_f32(x[target] - lse) - 1.0f) * scale;
}

// Per row; a bfloat16 row is staged in `stage` (2 V floats: the row, then its gradient).
CADRE_CPU_CLONES float log_sum_exp(const float* x, int64_t V, float*) { return row_log_sum_exp(x, V); }
CADRE_CPU_CLONES float log_sum_exp(const BF16* x, int64_t V, float* stage) {
  widen(x, stage, V);
  return row_log_sum_exp(stage, V);
}
CADRE_CPU_CLONES void gradient(const float* x, float lse, int64_t target, float scale, float* dx, int64_t V,
                               float*) {
  row_gradient(x, lse, target, scale, dx, V);
}
CADRE_CPU_CLONES void gradient(const BF16* x, float lse, int64_t target, float scale, BF16* dx, int64_t V,
                               float* stage) {
  widen(x, stage, V);
  row_gradient(stage, lse, target, scale, stage + V, V);
  narrow(stage + V, dx, V);
}

// Rows' losses into loss[] (0 for an ignored row) and log-sum-exps into lse[].
template <typename T>
void forward_rows(const T* x, const int64_t* targets, float* lse, double* loss, int64_t N, int64_t V) {
  at::parallel_for(0, N, 4, [&](int64_t r0, int64_t r1) {
    std::vector<float> stage(std::is_same<T, float>::value ? 0 : V);
    for (int64_t r = r0; r < r1; ++r) {
      if (targets[r] == kIgnoreIndex) {
        lse[r] = 0;
        loss[r] = 0;
        continue;
      }
      lse[r] = log_sum_exp(x + r * V, V, stage.data());
      loss[r] = double(lse[r]) - double(f32(x[r * V + targets[r]]));
    }
  });
}

template <typename T>
void backward_rows(const T* x, const int64_t* targets, const float* lse, float scale, T* dx, int64_t N, int64_t V) {
  at::parallel_for(0, N, 4, [&](int64_t r0, int64_t r1) {
    std::vector<float> stage(std::is_same<T, float>::value ? 0 : 2 * V);
    for (int64_t r = r0; r < r1; ++r) {
      if (targets[r] == kIgnoreIndex)
        std::fill(dx + r * V, dx + (r + 1) * V, T(0.0f));
      else
        gradient(x + r * V, lse[r], targets[r], scale, dx + r * V, V, stage.data());
    }
  });
}

// Rows that count, after checking every target names a class (or -100).
int64_t counted_rows(const at::Tensor& targets, int64_t V) {
  const int64_t* t = targets.data_ptr<int64_t>();
  int64_t counted = 0;
  for (int64_t r = 0; r < targets.numel(); ++r) {
    if (t[r] == kIgnoreIndex) continue;
    CADRE_CHECK(t[r] >= 0 && t[r] < V, "cross_entropy: the target of row ", r, " is ", t[r], ", outside the ", V,
                " classes");
    ++counted;
  }
  return counted;
}

struct FusedCrossEntropy : public torch::autograd::Function<FusedCrossEntropy> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& targets_in) {
    const at::Tensor x = logits.contiguous(), targets = targets_in.contiguous();
    const int64_t N = x.size(0), V = x.size(1);
    const int64_t counted = counted_rows(targets, V);
    at::Tensor lse = at::empty({N}, x.options().dtype(at::kFloat));
    std::vector<double> loss(N);
    if (x.scalar_type() == at::kFloat)
      forward_rows(x.data_ptr<float>(), targets.data_ptr<int64_t>(), lse.data_ptr<float>(), loss.data(), N, V);
    else
      forward_rows(x.data_ptr<BF16>(), targets.data_ptr<int64_t>(), lse.data_ptr<float>(), loss.data(), N, V);
    double total = 0;
    for (double l : loss) total += l;  // in row order: the same sum whatever the threads
    ctx->save_for_backward({x, targets, lse});
    ctx->saved_data["counted"] = counted;
    const double mean = counted > 0 ? total / double(counted) : std::numeric_limits<double>::quiet_NaN();
    return at::scalar_tensor(mean, x.options().dtype(at::kFloat));
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &targets = saved[1], &lse = saved[2];
    const int64_t N = x.size(0), V = x.size(1), counted = ctx->saved_data["counted"].toInt();
    const float scale = grads[0].item<float>() / static_cast<float>(counted);
    at::Tensor dx = at::empty_like(x);
    if (x.scalar_type() == at::kFloat)
      backward_rows(x.data_ptr<float>(), targets.data_ptr<int64_t>(), lse.data_ptr<float>(), scale,
                    dx.data_ptr<float>(), N, V);
    else
      backward_rows(x.data_ptr<BF16>(), targets.data_ptr<int64_t>(), lse.data_ptr<float>(), scale,
                    dx.data_ptr<BF16>(), N, V);
    return {dx, at::Tensor()};
  }
};

}  // namespace

at::Tensor cross_entropy_composite(const at::Tensor& logits, const at::Tensor& targets) {
  // float32 for lower precisions; float64 stays float64 (the tests' exact reference).
  return at::cross_entropy_loss(logits.scalar_type() == at::kDouble ? logits : logits.to(at::kFloat), targets);
}

at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& targets) {
  const at::ScalarType t = logits.scalar_type();
  const bool fused = logits.device().is_cpu() && targets.device().is_cpu() && (t == at::kFloat || t == at::kBFloat16) &&
                     logits.dim() == 2 && targets.dim() == 1 && targets.scalar_type() == at::kLong &&
                     targets.size(0) == logits.size(0) && logits.size(1) > 0;
  return fused ? FusedCrossEntropy::apply(logits, targets) : cross_entropy_composite(logits, targets);
}

}  // namespace cadre
