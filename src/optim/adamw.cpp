// AdamW update.
#include "optim/adamw.h"

#include <ATen/ATen.h>

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

void AdamW::step(double lr) {
  at::NoGradGuard no_grad;
  ++step_;
  const double b1 = options_.beta1, b2 = options_.beta2;
  const double bias1 = 1.0 - std::pow(b1, double(step_));
  const double bias2_sqrt = std::sqrt(1.0 - std::pow(b2, double(step_)));
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& p = params_[i];
    const at::Tensor& g = p.grad();
    if (!g.defined()) continue;
    if (decay_[i] && options_.weight_decay != 0) p.mul_(1.0 - lr * options_.weight_decay);
    exp_avg_[i].lerp_(g, 1.0 - b1);
    exp_avg_sq_[i].mul_(b2).addcmul_(g, g, 1.0 - b2);
    at::Tensor denom = (exp_avg_sq_[i].sqrt() / bias2_sqrt).add_(options_.eps);
    p.addcdiv_(exp_avg_[i], denom, -lr / bias1);
  }
}

}  // namespace cadre
