// A bias-free linear whose backward adds the weight's gradient into the weight's .grad (one
// GEMM accumulating into it) instead of returning it.
//
// Why: autograd sums the gradients of a weight used twice (a head tied to the embedding) before
// they reach .grad, so the head's dense vocabulary x dim gradient waits in the engine through
// the whole backward until the embedding's arrives at its end: 0.5 GB for Llama 3.2 1B's
// shapes in bf16, beside the FSDP gradient buffer it is then added into, and a third dense copy
// while the two are summed. For the weight the backward returns an empty sparse gradient, so the
// weight's AccumulateGrad still runs once both uses are done (FSDP counts gradients arriving
// there) and adds only what the other use returns (embedding_rows: the looked-up rows).
#pragma once

#include <ATen/core/Tensor.h>

namespace cadre {

// y = x W^T for x [..., in], W [out, in], with the forward of linear_no_bias. Where W's .grad is
// not a contiguous tensor of W's dtype and shape when the backward runs (no FSDP buffer yet, or a
// backward that builds a graph), the gradient is returned as linear_no_bias's backward returns it.
at::Tensor linear_grad_into_weight(const at::Tensor& x, const at::Tensor& weight);

}  // namespace cadre
