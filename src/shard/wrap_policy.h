// Wrap policies: which submodules become FSDP units (or get activation checkpointing), as
// PyTorch FSDP's auto-wrap policies: by module type (transformer_auto_wrap_policy), by a
// predicate (lambda_auto_wrap_policy), by parameter count (size_based_auto_wrap_policy).
// Whatever no unit takes belongs to the root unit.
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "shard/fully_shard.h"

namespace cadre {

// A submodule considered for wrapping, visited inner first: its path from the root, and how
// many parameters under it are not yet in a selected submodule.
struct WrapCandidate {
  const std::string& name;
  torch::nn::Module& module;
  int64_t unwrapped_params;
};
using WrapPolicy = std::function<bool(const WrapCandidate&)>;

template <typename T>
WrapPolicy wrap_by_type() {
  return [](const WrapCandidate& c) { return dynamic_cast<T*>(&c.module) != nullptr; };
}
// A submodule whose not-yet-wrapped parameters number at least `min_params`.
WrapPolicy wrap_by_param_count(int64_t min_params);

// The submodules `policy` selects, inner first (post-order), the root excluded.
std::vector<torch::nn::Module*> wrap_select(torch::nn::Module& root, const WrapPolicy& policy);

// fully_shard on every selected submodule, then on the root; returns the root's handle.
FSDPModule auto_wrap(torch::nn::Module& root, const WrapPolicy& policy, const FullyShardOptions& options);

// Consecutive blocks grouped into units of at least `min_params` (block_params[i] is block i's
// count); 0 means one block per unit. A short tail joins the last unit.
std::vector<std::vector<int64_t>> wrap_blocks(const std::vector<int64_t>& block_params, int64_t min_params);

}  // namespace cadre
