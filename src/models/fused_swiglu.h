// SwiGLU's gate, silu(a) * b, as one autograd function on the CPU: one pass forward and one
// backward, where libtorch's ops take two and three and autograd keeps silu(a) for the product's
// backward.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

namespace cadre {

// silu(a) * b for a and b of one shape. Differentiable in both. CPU tensors of the dtypes
// swiglu_fused_on_cpu names run fused; others take libtorch's ops.
at::Tensor swiglu(const at::Tensor& a, const at::Tensor& b);

// Whether `swiglu` runs the fused kernel for CPU tensors of `dtype`: float32 always; bfloat16
// (staged through float32, each result rounded once, where libtorch's ops round silu(a) first)
// where libtorch's own bfloat16 silu is slow, 1.x (CADRE_TORCH_FAST_BF16_SILU, core/torch_compat.h).
bool swiglu_fused_on_cpu(at::ScalarType dtype);

// The fused kernel itself, whichever libtorch: a and b float32 or bfloat16 CPU tensors of one
// dtype and shape (the tests and bench/fused_kernels judge it on every build).
at::Tensor swiglu_fused(const at::Tensor& a, const at::Tensor& b);

// The same through libtorch's ops (the reference the fused kernel is tested against).
at::Tensor swiglu_composite(const at::Tensor& a, const at::Tensor& b);

}  // namespace cadre
