// Rotary position embedding as one autograd function on the CPU: one pass forward and one
// backward, where libtorch's ops take five forward (two products, a negation, a concatenation, a
// sum) and more backward, each slice's gradient a zero-filled full-size tensor.
#pragma once

#include <ATen/core/Tensor.h>

namespace cadre {

// x * cos + rotate_half(x) * sin, Hugging Face's layout (rotate_half(x) = cat(-x2, x1), the two
// halves of the last dimension), for x [B, H, T, D] (any strides) and cos, sin [T, D]. The output
// is contiguous, so the heads reshape into a batch without a copy; its values round as libtorch's
// ops round them (each product, then the sum). Differentiable in x; float32 and bfloat16 CPU
// tensors of one dtype run fused; others take libtorch's ops.
at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// The same through libtorch's ops (the reference the fused kernel is tested against).
at::Tensor apply_rope_composite(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace cadre
