// RMSNorm as one autograd function on the CPU: one pass over each row forward and two backward,
// where libtorch's ops take eight (cast, pow, mean, add, rsqrt, mul, cast, mul) and autograd keeps
// float32 copies of the activations for their backward.
#pragma once

#include <ATen/core/Tensor.h>

namespace cadre {

// x [..., D] * rsqrt(mean(x^2) + eps) * weight [D]: normalised in float32, rounded to x's dtype,
// then scaled by the weight in that dtype, as Meta's reference computes it. Differentiable in x
// and weight. float32 and bfloat16 CPU tensors (x and weight of one dtype) run fused; others
// take libtorch's ops.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// The same through libtorch's ops (the reference the fused kernel is tested against).
at::Tensor rms_norm_composite(const at::Tensor& x, const at::Tensor& weight, double eps);

}  // namespace cadre
