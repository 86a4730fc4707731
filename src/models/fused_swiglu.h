// SwiGLU's gate, silu(a) * b, as one autograd function on the CPU: one pass forward and one
// backward, where libtorch's ops take two and three and autograd keeps silu(a) for the product's
// backward.
#pragma once

#include <ATen/core/Tensor.h>

namespace cadre {

// silu(a) * b for a and b of one shape. Differentiable in both. float32 CPU tensors run fused;
// others take libtorch's ops. bfloat16 among them: libtorch's bfloat16 silu and products convert
// with the CPU's bfloat16 instructions and ran faster than this kernel staged through float32
// (bench/fused_kernels: 3.8 against 5.1 ms forward and backward at [2048, 1536], one thread).
at::Tensor swiglu(const at::Tensor& a, const at::Tensor& b);

// The same through libtorch's ops (the reference the fused kernel is tested against).
at::Tensor swiglu_composite(const at::Tensor& a, const at::Tensor& b);

}  // namespace cadre
