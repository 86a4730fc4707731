// The fused BatchNorm + residual + ReLU against libtorch's ops, both judged against float64:
// the output, every gradient, the running statistics, and the module form's batch counting.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/nn/modules/batchnorm.h>

#include <string>
#include <vector>

#include "fused_judge.h"
#include "models/fused_batch_norm_relu.h"

namespace {

using fused_judge::expect_judged;
using fused_judge::Inputs;

constexpr double kMomentum = 0.1, kEps = 1e-5;

// A channels-last [4, 24, 5, 7] batch: 140 rows (four blocks of 32 and a tail of 12), 24 channels
// (a 16-wide vector and a tail of 8), one channel's mean hundreds of times its spread (the variance's
// cancellation), a weight and a bias, a residual, and an output gradient.
struct Case {
  at::Tensor x, weight, bias, residual, g;
  Case() {
    at::manual_seed(11);
    x = at::randn({4, 24, 5, 7}, at::kDouble) * at::rand({1, 24, 1, 1}, at::kDouble).mul(3).add(0.1) +
        at::randn({1, 24, 1, 1}, at::kDouble);
    x.select(1, 5).add_(200.0);
    x = x.contiguous(at::MemoryFormat::ChannelsLast);
    weight = at::randn({24}, at::kDouble).mul(0.3).add(1);
    bias = at::randn({24}, at::kDouble).mul(0.5);
    residual = at::randn({4, 24, 5, 7}, at::kDouble).contiguous(at::MemoryFormat::ChannelsLast);
    g = at::randn({4, 24, 5, 7}, at::kDouble).contiguous(at::MemoryFormat::ChannelsLast);
  }
};

// batch_norm_relu or its composite over inputs {x, weight, bias[, residual]}, in training mode
// without running statistics.
fused_judge::Function training(bool fused) {
  return [fused](const Inputs& in) {
    const at::Tensor residual = in.size() > 3 ? in[3] : at::Tensor();
    return fused ? cadre::batch_norm_relu(in[0], in[1], in[2], residual, {}, {}, true, kMomentum, kEps)
                 : cadre::batch_norm_relu_composite(in[0], in[1], in[2], residual, {}, {}, true, kMomentum, kEps);
  };
}

TEST(FusedBatchNormRelu, OutputAndGradientsWithAResidualAsAccurateAsLibtorchsOps) {
  Case c;
  fused_judge::expect_as_accurate("bn+add+relu", training(true), training(false),
                                  {c.x, c.weight, c.bias, c.residual}, c.g, at::kFloat);
}

TEST(FusedBatchNormRelu, OutputAndGradientsWithoutAResidualAsAccurateAsLibtorchsOps) {
  Case c;
  fused_judge::expect_as_accurate("bn+relu", training(true), training(false), {c.x, c.weight, c.bias}, c.g,
                                  at::kFloat);
}

// The fused path is the one under test: its output is stored channels-last, as its input.
TEST(FusedBatchNormRelu, KeepsTheChannelsLastLayout) {
  Case c;
  at::Tensor y = training(true)({c.x.to(at::kFloat), c.weight.to(at::kFloat), c.bias.to(at::kFloat)});
  EXPECT_TRUE(y.is_contiguous(at::MemoryFormat::ChannelsLast));
  EXPECT_FALSE(y.is_contiguous());
}

// Frozen inputs get no gradient; the others are still right (a frozen BatchNorm in a fine-tune,
// an identity that is the network's input).
TEST(FusedBatchNormRelu, FrozenInputsGetNoGradientAndTheOthersAreRight) {
  Case c;
  auto grads = [&](bool fused, at::ScalarType dtype) {
    at::Tensor x = c.x.to(dtype).requires_grad_(true), w = c.weight.to(dtype), b = c.bias.to(dtype);
    at::Tensor r = c.residual.to(dtype);
    at::Tensor y = training(fused)({x, w, b, r});
    return torch::autograd::grad({y}, {x}, {c.g.to(dtype)}).front().to(at::kDouble);
  };
  expect_judged("dx, the rest frozen", grads(true, at::kFloat), grads(false, at::kFloat), grads(false, at::kDouble),
                0x1p-24);
}

// The running statistics move towards the batch's mean and unbiased variance by the momentum,
// from non-trivial starting values.
TEST(FusedBatchNormRelu, RunningStatisticsAsAccurateAsLibtorchsOps) {
  Case c;
  auto run = [&](bool fused, at::ScalarType dtype) {
    at::Tensor mean = at::linspace(-1, 1, 24, at::kDouble).to(dtype), var = at::linspace(0.5, 2, 24, at::kDouble).to(dtype);
    const at::Tensor x = c.x.to(dtype), w = c.weight.to(dtype), b = c.bias.to(dtype);
    if (fused)
      cadre::batch_norm_relu(x, w, b, {}, mean, var, true, kMomentum, kEps);
    else
      cadre::batch_norm_relu_composite(x, w, b, {}, mean, var, true, kMomentum, kEps);
    return std::vector<at::Tensor>{mean.to(at::kDouble), var.to(at::kDouble)};
  };
  const auto fused = run(true, at::kFloat), ops = run(false, at::kFloat), exact = run(false, at::kDouble);
  expect_judged("running mean", fused[0], ops[0], exact[0], 0x1p-24);
  expect_judged("running variance", fused[1], ops[1], exact[1], 0x1p-24);
  EXPECT_GT((fused[0] - at::linspace(-1, 1, 24, at::kDouble)).abs().max().item<double>(), 1e-3);
}

// The module form counts batches in num_batches_tracked and, without a momentum, keeps the
// cumulative average, as BatchNorm2d's own forward does; in eval mode it normalises by the
// running statistics. The two sum each batch in other orders (over 140 terms: at worst 140 unit
// roundoffs of float32, 8e-6, of the terms' magnitudes): relative 1e-5.
TEST(FusedBatchNormRelu, ModuleFormCountsBatchesAndFollowsTheModulesMomentum) {
  Case c;
  const at::Tensor x = c.x.to(at::kFloat), second = (c.x * 0.5 + 1).to(at::kFloat);
  torch::nn::BatchNorm2d fused(torch::nn::BatchNormOptions(24).momentum(c10::nullopt));
  torch::nn::BatchNorm2d ops(torch::nn::BatchNormOptions(24).momentum(c10::nullopt));
  for (const at::Tensor& batch : {x, second}) {
    cadre::batch_norm_relu(*fused, batch);
    at::relu(ops->forward(batch));
  }
  EXPECT_EQ(fused->num_batches_tracked.item<int64_t>(), 2);
  EXPECT_TRUE(at::allclose(fused->running_mean, ops->running_mean, 1e-5, 1e-5))
      << fused->running_mean << ops->running_mean;
  EXPECT_TRUE(at::allclose(fused->running_var, ops->running_var, 1e-5, 1e-5));
  fused->eval();
  ops->eval();
  EXPECT_TRUE(at::equal(cadre::batch_norm_relu(*fused, second), at::relu(fused->forward(second))));
  EXPECT_EQ(fused->num_batches_tracked.item<int64_t>(), 2);
}

}  // namespace
