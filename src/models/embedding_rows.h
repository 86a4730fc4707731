// An embedding lookup whose gradient is only the rows the batch looked up: a sparse
// [vocabulary, dim] tensor with one row per distinct token, summed in float32 and rounded to
// the weight's dtype once. For a weight whose .grad is already a dense buffer that autograd
// adds into (FSDP's flat gradient), so no dense vocabulary x dim gradient is ever made beside
// it: 262M elements for a 128k vocabulary at dim 2048, 0.5 GB in bf16.
#pragma once

#include <ATen/core/Tensor.h>

namespace cadre {

// weight [V, D], tokens (any shape, int64) -> [tokens..., D], as at::embedding.
at::Tensor embedding_rows(const at::Tensor& weight, const at::Tensor& tokens);

}  // namespace cadre
