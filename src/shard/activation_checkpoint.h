// Activation checkpointing for one Llama block: the forward keeps only the block's input; the
// backward runs the block again with autograd on and back-propagates through the recomputed
// graph (PyTorch's re-entrant checkpoint). Parameter gradients land in the parameters' .grad
// through their usual AccumulateGrad nodes, so FSDP's post-backward hooks still fire.
#pragma once

#include <ATen/core/Tensor.h>

#include "models/llama/llama.h"

namespace cadre {

at::Tensor checkpointed_block(Block& block, const at::Tensor& x, const Rope& rope, const at::Tensor& mask);

}  // namespace cadre
