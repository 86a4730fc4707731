// Cross-entropy of logits against class targets as one autograd function on the CPU: it reads the
// logits in their dtype (bfloat16 too) and writes their gradient in it, one pass each way after
// the row's maximum. Casting [tokens, vocab] logits to float32 first, as the composite must, adds
// a float32 copy, log-softmax's float32 output, a float32 gradient and a cast back: at a Llama's
// head those are the largest tensors of the step.
#pragma once

#include <ATen/core/Tensor.h>

namespace cadre {

// The mean over rows of -log softmax(logits[r])[targets[r]] for logits [N, V] and targets [N]
// (int64), in float32 as at::cross_entropy_loss of the logits cast to float32 computes it: rows
// whose target is -100 are left out of the sum and the count. Differentiable in the logits.
// float32 and bfloat16 CPU logits run fused; others take libtorch's ops. A target outside
// [0, V) (and not -100) throws, naming the row.
at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& targets);

// The same through libtorch's ops (the reference the fused kernel is tested against).
at::Tensor cross_entropy_composite(const at::Tensor& logits, const at::Tensor& targets);

}  // namespace cadre
