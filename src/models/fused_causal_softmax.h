// Attention's causal softmax as one autograd function on the CPU: scale, causal mask and softmax
// of the scores in one pass forward and one backward, in the scores' dtype with float32 sums.
// The composite (scores + mask, softmax to float32, a cast back) makes four passes over the
// [batch x heads, T, T] scores forward and more backward, with float32 copies in between.
#pragma once

#include <ATen/core/Tensor.h>

namespace cadre {

// softmax over the last dimension of scale * scores [N, T, T], query i attending to keys j <= i
// (the rest 0), as softmax(scale * scores + causal mask) in float32 rounded to the scores'
// dtype. Differentiable in the scores. float32 and bfloat16 CPU tensors run fused; others take
// libtorch's ops.
at::Tensor causal_softmax(const at::Tensor& scores, double scale);

// The same through libtorch's ops (the reference the fused kernel is tested against).
at::Tensor causal_softmax_composite(const at::Tensor& scores, double scale);

}  // namespace cadre
