// The row-sparse embedding (models/embedding_rows.h): its forward is at::embedding's, and its
// gradient holds one row per distinct token, equal to the dense gradient's rows. Judged against
// the dense gradient computed in float64: each row is a float32 sum of k values (at most k - 1
// roundings of 2^-24 relative to the sum of their magnitudes), rounded once to the weight's
// dtype; so float32 rows lie within (k - 1) 2^-24 sum|g| of it and bf16 rows within that plus
// half a bf16 ulp (2^-8 relative). Added into a dense gradient (what autograd does when the
// weight's .grad is FSDP's flat buffer), the rows land where the dense gradient's do.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>

#include "models/embedding_rows.h"

namespace {

TEST(EmbeddingRows, GradientIsTheDenseGradientsRowsAndAddsIntoADenseGrad) {
  at::manual_seed(7);
  const int64_t V = 50, D = 16;
  // Repeated tokens: row 3 four times, row 0 twice; most rows never looked up.
  const at::Tensor tokens = at::tensor({3, 0, 7, 3, 3, 0, 11, 3, 49, 7}, at::kLong).reshape({2, 5});
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(dtype == at::kFloat ? "float32" : "bfloat16");
    at::Tensor weight = at::randn({V, D}).to(dtype).requires_grad_(true);
    const at::Tensor g = at::randn({2, 5, D}).to(dtype);
    at::Tensor y = cadre::embedding_rows(weight, tokens);
    EXPECT_TRUE(at::equal(y, at::embedding(weight.detach(), tokens)));
    const at::Tensor grad = torch::autograd::grad({y}, {weight}, {g})[0];
    ASSERT_TRUE(grad.is_sparse());
    EXPECT_EQ(grad._nnz(), 5) << "one row per distinct token";
    EXPECT_EQ(grad.scalar_type(), dtype);
    // The dense gradient in float64, and the bound on each element.
    const at::Tensor g64 = g.to(at::kDouble).reshape({-1, D});
    at::Tensor want = at::zeros({V, D}, at::kDouble).index_add_(0, tokens.reshape({-1}), g64);
    at::Tensor magnitude = at::zeros({V, D}, at::kDouble).index_add_(0, tokens.reshape({-1}), g64.abs());
    const double rounding = dtype == at::kFloat ? 0.0 : std::ldexp(1.0, -8);
    at::Tensor bound = magnitude * (3 * std::ldexp(1.0, -24)) + want.abs() * rounding;  // k - 1 <= 3 here
    const at::Tensor got = grad.to_dense().to(at::kDouble);
    EXPECT_TRUE(((got - want).abs() <= bound).all().item<bool>()) << (got - want).abs().max();
    // Added into a dense gradient as AccumulateGrad adds it.
    at::Tensor into = at::ones({V, D}, dtype);
    into += grad;
    EXPECT_TRUE(at::equal(into, at::ones({V, D}, dtype) + grad.to_dense())) << "rows in their places";
  }
}

}  // namespace
