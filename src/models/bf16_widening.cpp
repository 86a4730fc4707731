// The choice of widening bfloat16 products (bf16_widening.h) and the widened batched product.
#include "models/bf16_widening.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"

namespace cadre {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// Where libtorch sends bfloat16 matmuls to oneDNN (ATen's mkldnn_bf16_device_check).
bool cpu_has_fast_bf16_gemm() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512dq");
#else
  return true;  // libtorch's own choice, untested here
#endif
}

std::atomic<int> widening_override{-1};  // -1: the environment's or the CPU's choice

// Float32 a @ b, one GEMM per matrix of the batch, rounded to `dtype`.
at::Tensor float_bmm(const at::Tensor& a, const at::Tensor& b, at::ScalarType dtype) {
  at::Tensor out = at::empty({a.size(0), a.size(1), b.size(2)}, a.options().dtype(dtype));
  for (int64_t i = 0; i < a.size(0); ++i) out[i].copy_(at::mm(a[i], b[i]));
  return out;
}

struct WidenedBmm : public torch::autograd::Function<WidenedBmm> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b) {
    ctx->save_for_backward({a, b});
    return float_bmm(a.to(at::kFloat), b.to(at::kFloat), a.scalar_type());
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor& a = saved[0];
    const at::Tensor& b = saved[1];
    at::Tensor g = grads[0].to(at::kFloat);
    at::Tensor ga, gb;
    if (ctx->needs_input_grad(0)) ga = float_bmm(g, b.to(at::kFloat).transpose(1, 2), a.scalar_type());
    if (ctx->needs_input_grad(1)) gb = float_bmm(a.to(at::kFloat).transpose(1, 2), g, b.scalar_type());
    return {ga, gb};
  }
};

}  // namespace

bool bf16_linear_widens() {
  const int forced = widening_override.load(std::memory_order_relaxed);
  if (forced >= 0) return forced == 1;
  static const bool widens = [] {
    const char* env = std::getenv("CADRE_BF16_LINEAR");
    return bf16_widening_choice(env ? env : "", cpu_has_fast_bf16_gemm());
  }();
  return widens;
}

bool bf16_widening_choice(const std::string& value, bool cpu_has_fast_gemm) {
  if (value.empty() || value == "auto") return !cpu_has_fast_gemm;
  if (value == "widen") return true;
  if (value == "native") return false;
  throw ConfigError(str("CADRE_BF16_LINEAR='", value, "' is not a choice (auto, widen or native)"));
}

void set_bf16_linear_widens(bool widens) { widening_override.store(widens ? 1 : 0); }

at::Tensor widened_bmm(const at::Tensor& a, const at::Tensor& b) { return WidenedBmm::apply(a, b); }

}  // namespace cadre
