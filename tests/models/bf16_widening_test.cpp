// bfloat16 linears and batched products widened to float32 GEMMs (models/bf16_widening.h),
// judged against float64 on the same bfloat16 inputs.
//
// Each output element is a sum of K products of bfloat16 values (exact in float32), summed in
// float32 (within K 2^-24 of the sum of the terms' magnitudes, in any order) and rounded once
// to bfloat16 (2^-8 relative): |y - ref| <= 2^-8 |ref| + (K + 1) 2^-24 sum |terms|. Both paths
// hold that bound, whatever their summation order; a wrong transpose or a lost rounding
// misses it by orders of magnitude.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "models/bf16_widening.h"
#include "models/dnnl_linear.h"

namespace {

// The largest |got - ref| over its bound (pass: <= 1). `abs_terms` is the sum of the terms'
// magnitudes per element, `k` the number of terms.
double share_of_bound(const at::Tensor& got, const at::Tensor& ref, const at::Tensor& abs_terms, int64_t k) {
  const at::Tensor err = (got.to(at::kDouble) - ref).abs();
  const at::Tensor bound = ref.abs() * std::ldexp(1.0, -8) + abs_terms * (double(k + 1) * std::ldexp(1.0, -24)) + 1e-30;
  return (err / bound).max().item<double>();
}

at::Tensor bf16_randn(at::IntArrayRef sizes) { return at::randn(sizes).to(at::kBFloat16); }

void expect_linear_within_bound() {
  cadre::set_bf16_linear_widens(true);
  at::manual_seed(5);
  const int64_t M = 37, K = 300, N = 23;
  const at::Tensor x = bf16_randn({M, K}).requires_grad_(true), w = bf16_randn({N, K}).requires_grad_(true);
  const at::Tensor r = bf16_randn({M, N});
  const at::Tensor y = cadre::linear_no_bias(x, w);
  (y * r).sum().backward();
  const at::Tensor x64 = x.detach().to(at::kDouble), w64 = w.detach().to(at::kDouble), r64 = r.to(at::kDouble);
  const double fwd = share_of_bound(y.detach(), x64.mm(w64.t()), x64.abs().mm(w64.abs().t()), K);
  const double dx = share_of_bound(x.grad(), r64.mm(w64), r64.abs().mm(w64.abs()), N);
  const double dw = share_of_bound(w.grad(), r64.t().mm(x64), r64.abs().t().mm(x64.abs()), M);
  EXPECT_EQ(y.scalar_type(), at::kBFloat16);
  EXPECT_EQ(w.grad().scalar_type(), at::kBFloat16);
  EXPECT_LE(fwd, 1.0) << "forward";
  EXPECT_LE(dx, 1.0) << "input gradient";
  EXPECT_LE(dw, 1.0) << "weight gradient";
  std::printf("linear: forward %.3f, input gradient %.3f, weight gradient %.3f of the bound\n", fwd, dx, dw);

  // The pieces FSDP's tied head calls: grad += g^T x into a bfloat16 buffer, rounded once.
  const at::Tensor start = bf16_randn({N, K});
  at::Tensor grad = start.clone();
  cadre::linear_weight_grad_add(r, x.detach(), grad);
  const at::Tensor added = start.to(at::kDouble) + r64.t().mm(x64);
  const double add = share_of_bound(grad, added, start.to(at::kDouble).abs() + r64.abs().t().mm(x64.abs()), M + 1);
  EXPECT_LE(add, 1.0) << "weight gradient added into a buffer";
  const double in = share_of_bound(cadre::linear_input_grad(r, w.detach()), r64.mm(w64), r64.abs().mm(w64.abs()), N);
  EXPECT_LE(in, 1.0) << "linear_input_grad";
}

// Widened on every CPU. libtorch's own bf16 GEMMs are not judged here: on a CPU without AVX-512
// Debian's 1.13 sums the backward's products in bfloat16 (input and weight gradients 790x and
// 670x this bound on a Zen 3, 2026-12-07), which is why such a CPU widens by default.
TEST(Bf16Widening, LinearAndItsGradientsFollowFloat64WithinOneRounding) { expect_linear_within_bound(); }

TEST(Bf16Widening, BatchedProductAndItsGradientsFollowFloat64WithinOneRounding) {
  cadre::set_bf16_linear_widens(true);
  at::manual_seed(6);
  const int64_t B = 3, m = 17, k = 64, n = 19;
  const at::Tensor a = bf16_randn({B, m, k}).requires_grad_(true), b = bf16_randn({B, k, n}).requires_grad_(true);
  const at::Tensor r = bf16_randn({B, m, n});
  const at::Tensor y = cadre::widened_bmm(a, b);
  (y * r).sum().backward();
  const at::Tensor a64 = a.detach().to(at::kDouble), b64 = b.detach().to(at::kDouble), r64 = r.to(at::kDouble);
  const double fwd = share_of_bound(y.detach(), a64.bmm(b64), a64.abs().bmm(b64.abs()), k);
  const double da = share_of_bound(a.grad(), r64.bmm(b64.transpose(1, 2)), r64.abs().bmm(b64.abs().transpose(1, 2)), n);
  const double db = share_of_bound(b.grad(), a64.transpose(1, 2).bmm(r64), a64.abs().transpose(1, 2).bmm(r64.abs()), m);
  EXPECT_EQ(y.scalar_type(), at::kBFloat16);
  EXPECT_EQ(a.grad().scalar_type(), at::kBFloat16);
  EXPECT_LE(fwd, 1.0);
  EXPECT_LE(da, 1.0);
  EXPECT_LE(db, 1.0);
  std::printf("bmm: forward %.3f, gradients %.3f and %.3f of the bound\n", fwd, da, db);
}

TEST(Bf16Widening, TheChoiceFollowsTheCpuUnlessTheEnvironmentSaysOtherwise) {
  EXPECT_TRUE(cadre::bf16_widening_choice("", /*cpu_has_fast_gemm=*/false));
  EXPECT_FALSE(cadre::bf16_widening_choice("", true));
  EXPECT_FALSE(cadre::bf16_widening_choice("auto", true));
  EXPECT_TRUE(cadre::bf16_widening_choice("widen", true));
  EXPECT_FALSE(cadre::bf16_widening_choice("native", false));
  try {
    cadre::bf16_widening_choice("fast", false);
    FAIL() << "an unknown choice was accepted";
  } catch (const cadre::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("CADRE_BF16_LINEAR='fast'"), std::string::npos) << e.what();
  }
}

}  // namespace
