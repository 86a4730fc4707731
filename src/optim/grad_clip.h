// Gradient clipping by global L2 norm, as torch.nn.utils.clip_grad_norm_.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace cadre {

// Sum of squares of all gradients, accumulated in float64 (the global norm's square; under
// sharding each rank computes its part and the parts are summed across ranks).
double grad_sq_norm(const std::vector<at::Tensor>& grads);

// Scales grads by min(1, max_norm / (norm + 1e-6)) when max_norm > 0.
void grad_clip_scale(const std::vector<at::Tensor>& grads, double norm, double max_norm);

}  // namespace cadre
