// AdamW update.
#include "optim/adamw.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <c10/util/BFloat16.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include "core/error.h"
#include "core/zero_pages.h"
#include "core/torch_compat.h"

namespace cadre {

AdamW::AdamW(std::vector<at::Tensor> params, std::vector<bool> decay, AdamWOptions options)
    : params_(std::move(params)), decay_(std::move(decay)), options_(options) {
  CADRE_CHECK(params_.size() == decay_.size(), "AdamW: ", params_.size(), " parameters but ", decay_.size(), " decay flags");
  // Zero pages until the first step writes them, as PyTorch's optimizers make their state then.
  auto state_zeros = [](const at::Tensor& p) {
    return p.is_contiguous() ? zeros_on_first_touch(p.numel(), p.options()).view(p.sizes()) : at::zeros_like(p);
  };
  for (const auto& p : params_) {
    exp_avg_.push_back(state_zeros(p));
    exp_avg_sq_.push_back(state_zeros(p));
  }
}

namespace {

// A gradient element as float32. bfloat16 is the upper half of a float32: widening its bits
// with c10's own conversion (rather than loading c10::BFloat16, a struct) keeps the loop below
// vectorisable.
inline float grad_as_float(float g) { return g; }
inline float grad_as_float(uint16_t bf16_bits) { return c10::detail::f32_from_bits(bf16_bits); }

// One pass over [begin, end) of a contiguous float32 parameter: decay, both moments and the
// update, reading each of p, g, m, v once. The op-by-op form (lerp_, mul_, addcmul_, sqrt, div,
// add_, addcdiv_) streams the 4 arrays about 8 times; the optimizer step is memory bound, so
// this matters. A plain function with restrict pointers, not the parallel_for lambda's body:
// inside the lambda GCC left the loop scalar (one sqrtss and two divss per element, 1.6 ms a
// step for ResNet's 0.7M parameters); vector sqrt and division round as the scalar ones do, so
// the results are the same bits.
template <typename G>
void adamw_update_range(float* __restrict p, const G* __restrict g, float* __restrict m, float* __restrict v,
                        int64_t begin, int64_t end, float decay_factor, float b1, float b2, float step_size,
                        float bias2_sqrt, float eps) {
  for (int64_t i = begin; i < end; ++i) {
    const float gi = grad_as_float(g[i]);
    const float mi = m[i] + (1.0f - b1) * (gi - m[i]);
    const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay_factor - step_size * mi / (std::sqrt(vi) / bias2_sqrt + eps);
  }
}

// G is float or uint16_t (bfloat16 bits: ZeRO-1 keeps gradients in the compute dtype).
template <typename G>
void adamw_update_fused(float* p, const G* g, float* m, float* v, int64_t n, float decay_factor, float b1,
                        float b2, float step_size, float bias2_sqrt, float eps) {
  at::parallel_for(0, n, 1 << 16, [&](int64_t begin, int64_t end) {
    adamw_update_range(p, g, m, v, begin, end, decay_factor, b1, b2, step_size, bias2_sqrt, eps);
  });
}

}  // namespace

// Float32 parameters in CPU memory with float32 or bfloat16 gradients, all contiguous.
bool AdamW::takes_cpu_loop(size_t i) const {
  const at::Tensor& p = params_[i];
  const at::Tensor& g = p.grad();
  return !options_.multi_tensor_on_cpu && p.device().is_cpu() && p.scalar_type() == at::kFloat &&
         (g.scalar_type() == at::kFloat || g.scalar_type() == at::kBFloat16) && p.is_contiguous() &&
         g.is_contiguous() && exp_avg_[i].is_contiguous() && exp_avg_sq_[i].is_contiguous();
}

void AdamW::step(double lr) {
  c10::NoGradGuard no_grad;
  ++step_;
  const double b1 = options_.beta1, b2 = options_.beta2;
  const double bias1 = 1.0 - std::pow(b1, double(step_));
  const double bias2_sqrt = std::sqrt(1.0 - std::pow(b2, double(step_)));
  std::vector<size_t> multi;
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& p = params_[i];
    const at::Tensor& g = p.grad();
    if (!g.defined()) continue;
    if (!takes_cpu_loop(i)) {
      multi.push_back(i);
      continue;
    }
    const double decay = decay_[i] ? 1.0 - lr * options_.weight_decay : 1.0;
    float* m = exp_avg_[i].data_ptr<float>();
    float* v = exp_avg_sq_[i].data_ptr<float>();
    if (g.scalar_type() == at::kFloat)
      adamw_update_fused(p.data_ptr<float>(), g.data_ptr<float>(), m, v, p.numel(), float(decay), float(b1),
                         float(b2), float(lr / bias1), float(bias2_sqrt), float(options_.eps));
    else
      adamw_update_fused(p.data_ptr<float>(), reinterpret_cast<const uint16_t*>(g.data_ptr<c10::BFloat16>()), m, v,
                         p.numel(), float(decay), float(b1), float(b2), float(lr / bias1), float(bias2_sqrt),
                         float(options_.eps));
  }
  if (!multi.empty()) step_multi_tensor(multi, lr);
}

namespace {

// The tensors of one multi-tensor launch: the kernels take one device and dtype per list, and
// one weight decay.
struct Group {
  std::vector<at::Tensor> params, grads, exp_avg, exp_avg_sq;
};

}  // namespace

at::Tensor& AdamW::step_count(const at::Device& device) {
  auto it = step_counts_.find(device);
  if (it == step_counts_.end())
    it = step_counts_.emplace(device, at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device))).first;
  return it->second;
}

void AdamW::step_multi_tensor(const std::vector<size_t>& which, double lr) {
  std::map<std::tuple<std::string, at::ScalarType, bool>, Group> groups;
  for (size_t i : which) {
    const at::Tensor& p = params_[i];
    // Multi-tensor kernels index flat storage; anything strided goes op by op.
    if (!p.is_contiguous() || !p.is_floating_point() || !exp_avg_[i].is_contiguous() ||
        !exp_avg_sq_[i].is_contiguous()) {
      step_one_by_one(i, lr);
      continue;
    }
    Group& g = groups[{p.device().str(), p.scalar_type(), bool(decay_[i])}];
    g.params.push_back(p);
    // The kernels want gradients in the parameters' dtype (ZeRO-1 keeps bfloat16 ones).
    g.grads.push_back(p.grad().scalar_type() == p.scalar_type() ? p.grad() : p.grad().to(p.scalar_type()));
    g.exp_avg.push_back(exp_avg_[i]);
    g.exp_avg_sq.push_back(exp_avg_sq_[i]);
  }
  const double b1 = options_.beta1, b2 = options_.beta2;
  for (auto& [key, g] : groups) {
    const double weight_decay = std::get<2>(key) ? options_.weight_decay : 0.0;
#if CADRE_TORCH_HAS_FUSED_ADAMW
    // One launch per group; the kernel reads the step from a device tensor (no host sync).
    at::Tensor& steps = step_count(g.params[0].device());
    steps.fill_(double(step_));
    const std::vector<at::Tensor> state_steps(g.params.size(), steps);
    at::_fused_adamw_(g.params, g.grads, g.exp_avg, g.exp_avg_sq, /*max_exp_avg_sqs=*/{}, state_steps, lr, b1, b2,
                      weight_decay, options_.eps, /*amsgrad=*/false, /*maximize=*/false);
#else
    // libtorch 1.13 has no fused AdamW (its _fused_adam_ is CUDA-only Adam with L2 decay, not
    // decoupled): torch.optim.AdamW's foreach sequence, a few multi-tensor launches per group.
    const double bias1 = 1.0 - std::pow(b1, double(step_));
    const double bias2_sqrt = std::sqrt(1.0 - std::pow(b2, double(step_)));
    if (weight_decay != 0.0) at::_foreach_mul_(g.params, 1.0 - lr * weight_decay);
    at::_foreach_mul_(g.exp_avg, b1);
    at::_foreach_add_(g.exp_avg, g.grads, 1.0 - b1);
    at::_foreach_mul_(g.exp_avg_sq, b2);
    at::_foreach_addcmul_(g.exp_avg_sq, g.grads, g.grads, 1.0 - b2);
    std::vector<at::Tensor> denom = at::_foreach_sqrt(g.exp_avg_sq);
    at::_foreach_div_(denom, bias2_sqrt);
    at::_foreach_add_(denom, options_.eps);
    at::_foreach_addcdiv_(g.params, g.exp_avg, denom, -lr / bias1);
#endif
  }
}

// Strided or integer tensors: the same update op by op.
void AdamW::step_one_by_one(size_t i, double lr) {
  const double b1 = options_.beta1, b2 = options_.beta2;
  const double bias1 = 1.0 - std::pow(b1, double(step_));
  const double bias2_sqrt = std::sqrt(1.0 - std::pow(b2, double(step_)));
  at::Tensor& p = params_[i];
  const at::Tensor gf = p.grad().to(p.scalar_type());
  const double decay = decay_[i] ? 1.0 - lr * options_.weight_decay : 1.0;
  if (decay != 1.0) p.mul_(decay);
  exp_avg_[i].lerp_(gf, 1.0 - b1);
  exp_avg_sq_[i].mul_(b2).addcmul_(gf, gf, 1.0 - b2);
  at::Tensor denom = (exp_avg_sq_[i].sqrt() / bias2_sqrt).add_(options_.eps);
  p.addcdiv_(exp_avg_[i], denom, -lr / bias1);
}

}  // namespace cadre
