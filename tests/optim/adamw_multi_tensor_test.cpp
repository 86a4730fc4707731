// AdamW's multi-tensor path (at::_fused_adamw_ on libtorch 2.x, the _foreach_* ops on 1.13; what
// GPU tensors take) against Cadre's own one-pass CPU loop: the same parameters and moments after
// several steps, with and without weight decay, float32 and bfloat16 gradients; and an
// optimizer restored from another's state (what a checkpoint holds) continues it on that path.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <vector>

#include "optim/adamw.h"

namespace {

constexpr double kLr = 1e-2;
constexpr int kSteps = 6;
constexpr double kEps = 1.0 / (1 << 24);  // float32 unit roundoff

struct AdamWRun {
  std::vector<at::Tensor> params;
  std::unique_ptr<cadre::AdamW> opt;
};

// Odd sizes so vectorised kernels run their tails; the third tensor gets bfloat16 gradients
// (ZeRO-1's), the last none (it is skipped).
AdamWRun make_run(bool multi_tensor) {
  at::manual_seed(7);
  AdamWRun r;
  for (int64_t n : {1, 37, 1000, 4099, 5}) r.params.push_back(at::randn({n}));
  cadre::AdamWOptions options;
  options.multi_tensor_on_cpu = multi_tensor;
  r.opt = std::make_unique<cadre::AdamW>(r.params, std::vector<bool>{true, false, true, false, true}, options);
  return r;
}

void set_grads(AdamWRun& r, int step) {
  at::manual_seed(100 + step);
  for (size_t i = 0; i + 1 < r.params.size(); ++i) {
    at::Tensor g = at::randn(r.params[i].sizes());
    r.params[i].mutable_grad() = i == 2 ? g.to(at::kBFloat16) : g;
  }
}

double max_abs(const at::Tensor& t) { return t.abs().max().item<double>(); }

// Bound on one step's |update| / lr: |m| <= C sqrt(v) by Cauchy-Schwarz over the moments' sums
// (C^2 = (1-b1)^2 / ((1-b2) (1 - b1^2/b2))), times the bias corrections' ratio sqrt(1-b2^k)/(1-b1^k).
double update_bound_over_lr(int k) {
  const cadre::AdamWOptions o;
  const double c = std::sqrt((1 - o.beta1) * (1 - o.beta1) / ((1 - o.beta2) * (1 - o.beta1 * o.beta1 / o.beta2)));
  return c * std::sqrt(1 - std::pow(o.beta2, k)) / (1 - std::pow(o.beta1, k));
}

TEST(AdamWMultiTensor, MatchesTheCpuLoopWithinFloat32Rounding) {
  AdamWRun loop = make_run(false), multi = make_run(true);
  double grad_max = 0;
  for (int k = 1; k <= kSteps; ++k) {
    set_grads(loop, k);
    set_grads(multi, k);
    for (size_t i = 0; i + 1 < loop.params.size(); ++i) grad_max = std::max(grad_max, max_abs(loop.params[i].grad()));
    loop.opt->step(kLr);
    multi.opt->step(kLr);
  }
  // Each step rounds p once or twice (<= 2 eps |p| apart) and the update through ~8 operations;
  // the moments' differing roundings (lerp against mul-add) carry into later steps, growing
  // their relative error by a few eps per step.
  double update_sum = 0;
  for (int k = 1; k <= kSteps; ++k) update_sum += (8 + 4 * k) * kEps * kLr * update_bound_over_lr(k);
  for (size_t i = 0; i < loop.params.size(); ++i) {
    SCOPED_TRACE(i);
    const at::Tensor& p = loop.params[i];
    const double tol_p = kSteps * 2 * 2 * kEps * max_abs(p) + update_sum;
    const double tol_m = kSteps * 3 * kEps * (max_abs(loop.opt->exp_avg()[i]) + grad_max);
    const double tol_v = kSteps * 3 * kEps * (max_abs(loop.opt->exp_avg_sq()[i]) + grad_max * grad_max);
    EXPECT_LE(max_abs(multi.params[i] - p), tol_p);
    EXPECT_LE(max_abs(multi.opt->exp_avg()[i] - loop.opt->exp_avg()[i]), tol_m);
    EXPECT_LE(max_abs(multi.opt->exp_avg_sq()[i] - loop.opt->exp_avg_sq()[i]), tol_v);
  }
  // The steps moved the parameters by far more than the tolerance (about lr per step), and
  // the tensor without a gradient not at all.
  const AdamWRun start = make_run(false);
  for (size_t i = 0; i + 1 < start.params.size(); ++i)
    EXPECT_GT(max_abs(multi.params[i] - start.params[i]), 1000 * update_sum) << i;
  EXPECT_TRUE(at::equal(multi.params[4], start.params[4]));
}

// A checkpoint holds the moments and the step count (state() and steps()); an optimizer given
// them takes exactly the step the original takes next, the fused kernel's step tensor included.
TEST(AdamWMultiTensor, RestoredStateContinuesExactly) {
  AdamWRun a = make_run(true);
  for (int k = 1; k <= 3; ++k) {
    set_grads(a, k);
    a.opt->step(kLr);
  }
  AdamWRun b = make_run(true);
  for (size_t i = 0; i < a.params.size(); ++i) b.params[i].copy_(a.params[i]);
  const auto from = a.opt->state(), to = b.opt->state();
  ASSERT_EQ(from.size(), 2u);
  EXPECT_EQ(from[0].name, "exp_avg");
  EXPECT_EQ(from[1].name, "exp_avg_sq");
  for (size_t s = 0; s < from.size(); ++s)
    for (size_t i = 0; i < a.params.size(); ++i) (*to[s].tensors)[i].copy_((*from[s].tensors)[i]);
  b.opt->set_steps(a.opt->steps());
  set_grads(a, 4);
  set_grads(b, 4);
  a.opt->step(kLr);
  b.opt->step(kLr);
  EXPECT_EQ(b.opt->steps(), 4);
  for (size_t i = 0; i < a.params.size(); ++i) {
    EXPECT_TRUE(at::equal(a.params[i], b.params[i])) << i;
    EXPECT_TRUE(at::equal(a.opt->exp_avg_sq()[i], b.opt->exp_avg_sq()[i])) << i;
  }
}

}  // namespace
