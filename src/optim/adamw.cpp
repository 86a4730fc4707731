// AdamW update.
#include "optim/adamw.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>

#include <cmath>

#include "core/error.h"

namespace cadre {

AdamW::AdamW(std::vector<at::Tensor> params, std::vector<bool> decay, AdamWOptions options)
    : params_(std::move(params)), decay_(std::move(decay)), options_(options) {
  CADRE_CHECK(params_.size() == decay_.size(), "AdamW: ", params_.size(), " parameters but ", decay_.size(), " decay flags");
  for (const auto& p : params_) {
    exp_avg_.push_back(at::zeros_like(p));
    exp_avg_sq_.push_back(at::zeros_like(p));
  }
}

namespace {

// One pass over a contiguous float32 parameter: decay, both moments and the update, reading
// each of p, g, m, v once. The op-by-op form (lerp_, mul_, addcmul_, sqrt, div, add_, addcdiv_)
// streams the 4 arrays about 8 times; the optimizer step is memory bound, so this matters.
// G is float or c10::BFloat16 (ZeRO-1 keeps gradients in the compute dtype).
template <typename G>
void adamw_update_fused(float* p, const G* g, float* m, float* v, int64_t n, float decay_factor, float b1,
                        float b2, float step_size, float bias2_sqrt, float eps) {
  at::parallel_for(0, n, 1 << 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float gi = static_cast<float>(g[i]);
      float mi = m[i] + (1.0f - b1) * (gi - m[i]);
      float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
      m[i] = mi;
      v[i] = vi;
      p[i] = p[i] * decay_factor - step_size * mi / (std::sqrt(vi) / bias2_sqrt + eps);
    }
  });
}

}  // namespace

void AdamW::step(double lr) {
  c10::NoGradGuard no_grad;
  ++step_;
  const double b1 = options_.beta1, b2 = options_.beta2;
  const double bias1 = 1.0 - std::pow(b1, double(step_));
  const double bias2_sqrt = std::sqrt(1.0 - std::pow(b2, double(step_)));
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& p = params_[i];
    const at::Tensor& g = p.grad();
    if (!g.defined()) continue;
    const double decay = decay_[i] ? 1.0 - lr * options_.weight_decay : 1.0;
    bool fusable = p.scalar_type() == at::kFloat && (g.scalar_type() == at::kFloat || g.scalar_type() == at::kBFloat16) &&
                   p.is_contiguous() && g.is_contiguous() && p.device().is_cpu() && exp_avg_[i].is_contiguous() &&
                   exp_avg_sq_[i].is_contiguous();
    if (fusable) {
      float* m = exp_avg_[i].data_ptr<float>();
      float* v = exp_avg_sq_[i].data_ptr<float>();
      if (g.scalar_type() == at::kFloat)
        adamw_update_fused(p.data_ptr<float>(), g.data_ptr<float>(), m, v, p.numel(), float(decay), float(b1),
                           float(b2), float(lr / bias1), float(bias2_sqrt), float(options_.eps));
      else
        adamw_update_fused(p.data_ptr<float>(), g.data_ptr<c10::BFloat16>(), m, v, p.numel(), float(decay),
                           float(b1), float(b2), float(lr / bias1), float(bias2_sqrt), float(options_.eps));
      continue;
    }
    // Any other dtype or layout (CUDA tensors in libtorch 2.x builds): the same update op by op.
    const at::Tensor gf = g.to(p.scalar_type());
    if (decay != 1.0) p.mul_(decay);
    exp_avg_[i].lerp_(gf, 1.0 - b1);
    exp_avg_sq_[i].mul_(b2).addcmul_(gf, gf, 1.0 - b2);
    at::Tensor denom = (exp_avg_sq_[i].sqrt() / bias2_sqrt).add_(options_.eps);
    p.addcdiv_(exp_avg_[i], denom, -lr / bias1);
  }
}

}  // namespace cadre
