// SGD update.
#include "optim/sgd.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>

#include "core/error.h"

namespace cadre {

void sgd_options_check(const SgdOptions& o) {
  CADRE_CONFIG_CHECK(o.momentum >= 0 && o.momentum < 1, "optim.momentum must be in [0, 1) for sgd, got ", o.momentum);
  CADRE_CONFIG_CHECK(o.dampening >= 0 && o.dampening <= 1, "optim.dampening must be in [0, 1], got ", o.dampening);
  CADRE_CONFIG_CHECK(o.weight_decay >= 0, "optim.weight_decay must be >= 0, got ", o.weight_decay);
  CADRE_CONFIG_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0),
                     "optim.nesterov needs optim.momentum > 0 and optim.dampening = 0 (as torch.optim.SGD), got "
                     "momentum ",
                     o.momentum, " and dampening ", o.dampening);
}

Sgd::Sgd(std::vector<at::Tensor> params, std::vector<bool> decay, SgdOptions options)
    : params_(std::move(params)), decay_(std::move(decay)), has_buffer_(params_.size(), false), options_(options) {
  CADRE_CHECK(params_.size() == decay_.size(), "SGD: ", params_.size(), " parameters but ", decay_.size(), " decay flags");
  sgd_options_check(options_);
  if (options_.momentum != 0)
    for (const auto& p : params_) momentum_buffer_.push_back(at::zeros_like(p));
}

void Sgd::set_steps(int64_t steps) {
  step_ = steps;
  has_buffer_.assign(params_.size(), steps > 0);
}

std::vector<OptimizerState> Sgd::state() {
  if (options_.momentum == 0) return {};
  return {{"momentum_buffer", &momentum_buffer_}};
}

namespace {

// One pass over a contiguous float32 parameter, reading p, g and the buffer once (the step is
// memory bound). G is float or c10::BFloat16 (ZeRO-1 keeps gradients in the compute dtype).
// `buf` is null without momentum.
template <typename G>
void sgd_update_fused(float* p, const G* g, float* buf, int64_t n, float lr, float weight_decay, float momentum,
                      float dampening, bool nesterov, bool first) {
  at::parallel_for(0, n, 1 << 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float gi = static_cast<float>(g[i]);
      if (weight_decay != 0.0f) gi = gi + weight_decay * p[i];
      if (buf) {
        const float b = first ? gi : momentum * buf[i] + (1.0f - dampening) * gi;
        buf[i] = b;
        gi = nesterov ? gi + momentum * b : b;
      }
      p[i] = p[i] - lr * gi;
    }
  });
}

}  // namespace

void Sgd::step(double lr) {
  c10::NoGradGuard no_grad;
  ++step_;
  const SgdOptions& o = options_;
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& p = params_[i];
    const at::Tensor& g = p.grad();
    if (!g.defined()) continue;
    const bool first = !has_buffer_[i];
    has_buffer_[i] = true;
    const float wd = decay_[i] ? float(o.weight_decay) : 0.0f;
    float* buf = nullptr;
    if (o.momentum != 0) {
      if (!momentum_buffer_[i].is_contiguous()) {
        step_op_by_op(i, lr, first);
        continue;
      }
      buf = momentum_buffer_[i].data_ptr<float>();
    }
    const bool fusable = p.scalar_type() == at::kFloat &&
                         (g.scalar_type() == at::kFloat || g.scalar_type() == at::kBFloat16) && p.is_contiguous() &&
                         g.is_contiguous() && p.device().is_cpu();
    if (!fusable) {
      step_op_by_op(i, lr, first);
      continue;
    }
    if (g.scalar_type() == at::kFloat)
      sgd_update_fused(p.data_ptr<float>(), g.data_ptr<float>(), buf, p.numel(), float(lr), wd, float(o.momentum),
                       float(o.dampening), o.nesterov, first);
    else
      sgd_update_fused(p.data_ptr<float>(), g.data_ptr<c10::BFloat16>(), buf, p.numel(), float(lr), wd,
                       float(o.momentum), float(o.dampening), o.nesterov, first);
  }
}

// Any other dtype or layout (CUDA tensors in libtorch 2.x builds): the same update op by op,
// in torch.optim.SGD's order.
void Sgd::step_op_by_op(size_t i, double lr, bool first) {
  at::Tensor& p = params_[i];
  at::Tensor g = p.grad().to(p.scalar_type());
  const SgdOptions& o = options_;
  if (decay_[i] && o.weight_decay != 0) g = g.add(p, o.weight_decay);
  if (o.momentum != 0) {
    at::Tensor& buf = momentum_buffer_[i];
    if (first) buf.copy_(g);
    else buf.mul_(o.momentum).add_(g, 1.0 - o.dampening);
    g = o.nesterov ? g.add(buf, o.momentum) : buf;
  }
  p.add_(g, -lr);
}

}  // namespace cadre
