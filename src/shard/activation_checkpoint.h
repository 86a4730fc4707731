// Activation checkpointing for any module (PyTorch's re-entrant checkpoint): the forward keeps
// only the module's inputs; the backward runs the module again with autograd on and
// back-propagates through the recomputed graph. Parameter gradients land in the parameters'
// .grad through their usual AccumulateGrad nodes, so FSDP's post-backward hooks still fire.
// Mark modules with checkpoint_wrapper (shard/module_hooks.h) or by policy below; cadre::call
// does the rest.
#pragma once

#include <torch/nn/module.h>

#include <vector>

#include "shard/module_hooks.h"
#include "shard/wrap_policy.h"

namespace cadre {

// checkpoint_wrapper on every submodule the policy selects (the root excluded). Keep the
// handles: checkpointing ends when they are destroyed.
std::vector<HookHandle> apply_activation_checkpointing(torch::nn::Module& root, const WrapPolicy& policy);

}  // namespace cadre
