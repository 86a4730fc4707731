// The fused RMSNorm against libtorch's ops, both judged against float64: its output and both
// gradients in float32 and bfloat16, with either input frozen.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "fused_judge.h"
#include "models/fused_rms_norm.h"

namespace {

using fused_judge::expect_judged;

constexpr double kEps = 1e-5;

struct Results {
  at::Tensor y, dx, dw;  // float64 copies; dx / dw undefined where that input was frozen
};

// y = norm(x, w) and the gradients of sum(y * g), computed in `dtype` by `norm`.
template <typename Norm>
Results run(const Norm& norm, const at::Tensor& x, const at::Tensor& w, const at::Tensor& g, at::ScalarType dtype,
            bool x_grad, bool w_grad) {
  at::Tensor xd = x.to(dtype).detach().requires_grad_(x_grad);
  at::Tensor wd = w.to(dtype).detach().requires_grad_(w_grad);
  at::Tensor y = norm(xd, wd, kEps);
  std::vector<at::Tensor> inputs;
  if (x_grad) inputs.push_back(xd);
  if (w_grad) inputs.push_back(wd);
  std::vector<at::Tensor> grads = torch::autograd::grad({y}, inputs, {g.to(dtype)});
  Results r{y.detach().to(at::kDouble), {}, {}};
  if (x_grad) r.dx = grads.front().to(at::kDouble);
  if (w_grad) r.dw = grads.back().to(at::kDouble);
  return r;
}

// Rows of 100 (six 16-wide lanes and a tail of 4), 3 x 37 of them, scales that differ per row.
struct Case {
  at::Tensor x, w, g;
  Case() {
    at::manual_seed(7);
    x = at::randn({3, 37, 100}, at::kDouble) * at::rand({3, 37, 1}, at::kDouble).mul(4).add(0.05);
    w = at::randn({100}, at::kDouble).mul(0.3).add(1);
    g = at::randn({3, 37, 100}, at::kDouble);
  }
};

void check(at::ScalarType dtype, double unit_roundoff, bool x_grad, bool w_grad) {
  Case c;
  const Results exact = run(cadre::rms_norm_composite, c.x, c.w, c.g, at::kDouble, x_grad, w_grad);
  const Results fused = run(cadre::rms_norm, c.x, c.w, c.g, dtype, x_grad, w_grad);
  const Results ops = run(cadre::rms_norm_composite, c.x, c.w, c.g, dtype, x_grad, w_grad);
  const std::string name = std::string(c10::toString(dtype));
  expect_judged(name + " y", fused.y, ops.y, exact.y, unit_roundoff);
  if (x_grad) expect_judged(name + " dx", fused.dx, ops.dx, exact.dx, unit_roundoff);
  if (w_grad) expect_judged(name + " dw", fused.dw, ops.dw, exact.dw, unit_roundoff);
}

TEST(FusedRmsNorm, Float32OutputAndGradientsAsAccurateAsLibtorchsOps) {
  check(at::kFloat, 0x1p-24, true, true);
}

TEST(FusedRmsNorm, Bfloat16OutputAndGradientsAsAccurateAsLibtorchsOps) {
  check(at::kBFloat16, 0x1p-8, true, true);
}

TEST(FusedRmsNorm, AFrozenInputGetsNoGradientAndTheOtherIsRight) {
  check(at::kFloat, 0x1p-24, /*x_grad=*/true, /*w_grad=*/false);
  check(at::kFloat, 0x1p-24, /*x_grad=*/false, /*w_grad=*/true);
}

// The forward rounds as the composite does (the normalised value to bfloat16, then the product
// with the weight): the outputs are equal but where the two sums of squares round differently.
// Those differ by a few float32 ulps (2^-23 relative), which flips a bfloat16 rounding (2^-8)
// only for values that close to a rounding boundary: about 1e-4 of them; 1% allows 100 times
// that, where skipping either rounding changes a quarter and more.
TEST(FusedRmsNorm, Bfloat16ForwardRoundsAsLibtorchsOps) {
  Case c;
  at::Tensor x = c.x.to(at::kBFloat16), w = c.w.to(at::kBFloat16);
  at::Tensor fused = cadre::rms_norm(x, w, kEps).to(at::kDouble);
  at::Tensor ops = cadre::rms_norm_composite(x, w, kEps).to(at::kDouble);
  const double differing = fused.ne(ops).to(at::kDouble).mean().item<double>();
  EXPECT_LT(differing, 0.01) << "a share of " << differing << " of the outputs differ";
}

}  // namespace
