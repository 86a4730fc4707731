// The optimizer the config names (optim.name: adamw | sgd) over a rank's parameter pieces,
// with weight decay where optim.no_decay allows it.
#pragma once

#include <memory>
#include <vector>

#include "core/config.h"
#include "optim/optimizer.h"

namespace cadre {

// `norm_and_bias_free[i]`: false for parameters with fewer than 2 dimensions (norm scales and
// shifts, biases), true for matrices and kernels (FSDPModule::decay_mask). Under
// optim.no_decay = none every parameter decays.
std::unique_ptr<Optimizer> make_optimizer(const OptimConfig& optim, std::vector<at::Tensor> params,
                                          const std::vector<bool>& norm_and_bias_free);

}  // namespace cadre
