// The fused CPU kernels a Llama step runs (SwiGLU, RoPE, causal softmax, cross-entropy) and the
// vectorised exp under them, each against libtorch's ops, judged in float64 (fused_judge.h).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "fused_judge.h"
#include "core/torch_compat.h"
#include "models/cpu_vector_math.h"
#include "models/fused_causal_softmax.h"
#include "models/fused_cross_entropy.h"
#include "models/fused_rope.h"
#include "models/fused_swiglu.h"

namespace {

using fused_judge::expect_as_accurate;
using fused_judge::Inputs;

// Values of several scales, so rows differ in magnitude; 100 wide rows have a 16-lane tail.
at::Tensor scaled_randn(at::IntArrayRef shape) {
  std::vector<int64_t> per_row(shape.size(), 1);
  per_row[0] = shape[0];
  return at::randn(shape, at::kDouble) * at::rand(per_row, at::kDouble).mul(4).add(0.05);
}

TEST(CpuVectorMath, ExpWithinTwoUlpsOverItsRangeAndNaNStaysNaN) {
  double worst = 0;
  for (int i = 0; i <= 1000000; ++i) {
    const float x = -87.0f + 175.37f * float(i) / 1e6f;
    const double exact = std::exp(double(x));
    worst = std::max(worst, std::abs(double(cadre::exp_f32(x)) - exact) / exact);
  }
  EXPECT_LE(worst, 2 * 0x1p-24 * 2) << "largest relative error " << worst;  // 2 ulp = 2 * 2^-23
  EXPECT_TRUE(std::isnan(cadre::exp_f32(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_LE(cadre::exp_f32(-std::numeric_limits<float>::infinity()), 2e-38f);
  EXPECT_TRUE(std::isfinite(cadre::exp_f32(1000.0f)));
}

// The largest value wherever it sits: in the first lanes, the vector loop, or the tail after it,
// for rows shorter than, equal to and longer than the 16 lanes; -inf entries never win.
TEST(CpuVectorMath, RowMaxFindsTheLargestAtEveryPositionAndLength) {
  for (int64_t n = 1; n <= 50; ++n)
    for (int64_t at = 0; at < n; ++at) {
      std::vector<float> row(n);
      for (int64_t i = 0; i < n; ++i) row[i] = i % 3 == 0 ? -std::numeric_limits<float>::infinity() : -1.0f - i;
      row[at] = 0.5f;
      EXPECT_EQ(cadre::row_max(row.data(), n), 0.5f) << "n " << n << ", largest at " << at;
    }
  const std::vector<float> all_minus_inf(20, -std::numeric_limits<float>::infinity());
  EXPECT_EQ(cadre::row_max(all_minus_inf.data(), 20), -std::numeric_limits<float>::infinity());
}

// bfloat16 too: staged through float32 and rounded once per result, where libtorch's ops round
// silu(a) before the product. 1000-element rows: several staging blocks and a tail.
TEST(FusedSwiglu, OutputAndGradientsAsAccurateAsLibtorchsOps) {
  at::manual_seed(1);
  for (const int64_t width : {100, 1000}) {
    const Inputs in{scaled_randn({37, 3, width}), at::randn({37, 3, width}, at::kDouble)};
    const at::Tensor g = at::randn({37, 3, width}, at::kDouble);
    for (at::ScalarType t : {at::kFloat, at::kBFloat16})
      expect_as_accurate(
          "swiglu, rows of " + std::to_string(width), [](const Inputs& x) { return cadre::swiglu_fused(x[0], x[1]); },
          [](const Inputs& x) { return cadre::swiglu_composite(x[0], x[1]); }, in, g, t);
  }
}

// swiglu runs the kernel where swiglu_fused_on_cpu says so, libtorch's ops elsewhere: among a
// few thousand bfloat16 elements some round differently from the composite's two roundings.
TEST(FusedSwiglu, SwigluRunsTheKernelWhereItIsTheFasterOne) {
  at::manual_seed(2);
  for (at::ScalarType t : {at::kFloat, at::kBFloat16}) {
    const at::Tensor a = at::randn({70, 50}).to(t), b = at::randn({70, 50}).to(t);
    const at::Tensor y = cadre::swiglu(a, b);
    EXPECT_TRUE(y.equal(cadre::swiglu_fused_on_cpu(t) ? cadre::swiglu_fused(a, b) : cadre::swiglu_composite(a, b)))
        << c10::toString(t);
    EXPECT_FALSE(cadre::swiglu_fused(a, b).equal(cadre::swiglu_composite(a, b))) << c10::toString(t);
  }
  EXPECT_TRUE(cadre::swiglu_fused_on_cpu(at::kFloat));
  EXPECT_EQ(cadre::swiglu_fused_on_cpu(at::kBFloat16), !CADRE_TORCH_FAST_BF16_SILU);
}

// q as the attention makes it: a projection's [B, T, H, D] output viewed [B, H, T, D] (the kernel
// walks rows heads-inner), or a contiguous [B, H, T, D] (walked positions-inner).
struct RopeCase {
  bool projection_layout;
  at::Tensor x, cos, sin, g;
  explicit RopeCase(bool projection = true) : projection_layout(projection) {
    at::manual_seed(3);
    x = projection ? scaled_randn({2, 5, 3, 8}) : scaled_randn({2, 3, 5, 8});
    const at::Tensor angles = at::rand({5, 8}, at::kDouble) * 6;
    cos = angles.cos();
    sin = angles.sin();
    g = at::randn({2, 3, 5, 8}, at::kDouble);
  }
  fused_judge::Function with(at::Tensor (*rope)(const at::Tensor&, const at::Tensor&, const at::Tensor&)) const {
    return [rope, c = cos, s = sin, projection = projection_layout](const Inputs& in) {
      const at::ScalarType t = in[0].scalar_type();
      return rope(projection ? in[0].transpose(1, 2) : in[0], c.to(t), s.to(t));
    };
  }
};

TEST(FusedRope, OutputAndGradientAsAccurateAsLibtorchsOps) {
  for (bool projection : {true, false}) {
    const RopeCase c(projection);
    for (at::ScalarType t : {at::kFloat, at::kBFloat16})
      expect_as_accurate(projection ? "rope, projection layout" : "rope, contiguous", c.with(cadre::apply_rope),
                         c.with(cadre::apply_rope_composite), {c.x}, c.g, t);
  }
}

// Each product rounds to the dtype, then their sum: the composite's roundings, so the outputs are
// the same bit for bit.
TEST(FusedRope, ForwardRoundsAsLibtorchsOpsBitForBit) {
  for (bool projection : {true, false}) {
    const RopeCase c(projection);
    for (at::ScalarType t : {at::kFloat, at::kBFloat16}) {
      const Inputs in{c.x.to(t)};
      EXPECT_TRUE(c.with(cadre::apply_rope)(in).equal(c.with(cadre::apply_rope_composite)(in)))
          << c10::toString(t) << (projection ? ", projection layout" : ", contiguous");
    }
  }
}

// The output is contiguous (the heads reshape into a batch without a copy); the gradient comes
// back in the input's layout (a transposed view here), so the view's backward copies nothing.
TEST(FusedRope, OutputContiguousGradientInTheInputsLayout) {
  const RopeCase c;
  const at::Tensor x = c.x.to(at::kFloat).transpose(1, 2).detach().requires_grad_(true);
  const at::Tensor y = cadre::apply_rope(x, c.cos.to(at::kFloat), c.sin.to(at::kFloat));
  EXPECT_TRUE(y.is_contiguous());
  const at::Tensor dx = torch::autograd::grad({y}, {x}, {c.g.to(at::kFloat)})[0];
  EXPECT_EQ(dx.strides(), x.strides());
}

TEST(FusedCausalSoftmax, OutputAndGradientAsAccurateAsLibtorchsOps) {
  at::manual_seed(4);
  const Inputs in{scaled_randn({3, 37, 37})};
  const at::Tensor g = at::randn({3, 37, 37}, at::kDouble);
  for (at::ScalarType t : {at::kFloat, at::kBFloat16})
    expect_as_accurate(
        "causal softmax", [](const Inputs& x) { return cadre::causal_softmax(x[0], 0.3); },
        [](const Inputs& x) { return cadre::causal_softmax_composite(x[0], 0.3); }, in, g, t);
}

TEST(FusedCausalSoftmax, KeysAfterTheQueryGetNothingAndRowsSumToOne) {
  at::manual_seed(5);
  const at::Tensor p = cadre::causal_softmax(at::randn({2, 20, 20}), 0.5);
  EXPECT_EQ(p.triu(1).abs().max().item<float>(), 0.0f);
  EXPECT_LT((p.sum(-1) - 1).abs().max().item<float>(), 20 * 0x1p-24);
}

struct LossCase {
  at::Tensor logits = scaled_randn({37, 100});
  at::Tensor targets = at::randint(100, {37}, at::kLong);
  LossCase() {
    targets[4] = -100;  // left out of the sum and the count, as libtorch's ignore_index
    targets[20] = -100;
  }
};

TEST(FusedCrossEntropy, LossAndGradientAsAccurateAsLibtorchsOps) {
  at::manual_seed(6);
  const LossCase c;
  for (at::ScalarType t : {at::kFloat, at::kBFloat16})
    expect_as_accurate(
        "cross-entropy", [&](const Inputs& x) { return cadre::cross_entropy(x[0], c.targets); },
        [&](const Inputs& x) { return cadre::cross_entropy_composite(x[0], c.targets); }, {c.logits},
        at::scalar_tensor(1.3, at::kDouble), t);
}

TEST(FusedCrossEntropy, IgnoredRowsGetNoGradientAndAllIgnoredIsNaN) {
  at::manual_seed(7);
  const LossCase c;
  const at::Tensor x = c.logits.to(at::kBFloat16).requires_grad_(true);
  const at::Tensor dx = torch::autograd::grad({cadre::cross_entropy(x, c.targets)}, {x})[0];
  EXPECT_EQ(dx[4].abs().max().item<float>(), 0.0f);
  EXPECT_GT(dx[5].abs().max().item<float>(), 0.0f);
  const at::Tensor none = at::full({37}, -100, at::kLong);
  EXPECT_TRUE(std::isnan(cadre::cross_entropy(c.logits.to(at::kFloat), none).item<float>()));
}

TEST(FusedCrossEntropy, ATargetOutsideTheClassesNamesItsRow) {
  LossCase c;
  c.targets[5] = 100;
  try {
    cadre::cross_entropy(c.logits.to(at::kFloat), c.targets);
    FAIL() << "no error for target 100 of 100 classes";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("row 5 is 100, outside the 100 classes"), std::string::npos) << e.what();
  }
}

}  // namespace
