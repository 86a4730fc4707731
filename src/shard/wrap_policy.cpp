// Module selection for FSDP units and activation checkpointing.
#include "shard/wrap_policy.h"

namespace cadre {
namespace {

// Post-order walk; returns the parameters under `m` that no selected submodule took.
int64_t visit(torch::nn::Module& m, const std::string& name, const WrapPolicy& policy, bool is_root,
              std::vector<torch::nn::Module*>& selected) {
  int64_t unwrapped = 0;
  for (const auto& p : m.parameters(/*recurse=*/false)) unwrapped += p.numel();
  for (const auto& child : m.named_children()) {
    if (child.key() == "_fsdp_state") continue;  // a unit's sharding state, not part of the model
    unwrapped += visit(*child.value(), name.empty() ? child.key() : name + "." + child.key(), policy, false, selected);
  }
  if (!is_root && policy({name, m, unwrapped})) {
    selected.push_back(&m);
    return 0;
  }
  return unwrapped;
}

}  // namespace

WrapPolicy wrap_by_param_count(int64_t min_params) {
  return [min_params](const WrapCandidate& c) { return c.unwrapped_params >= min_params; };
}

std::vector<torch::nn::Module*> wrap_select(torch::nn::Module& root, const WrapPolicy& policy) {
  std::vector<torch::nn::Module*> selected;
  visit(root, "", policy, true, selected);
  return selected;
}

FSDPModule auto_wrap(torch::nn::Module& root, const WrapPolicy& policy, const FullyShardOptions& options) {
  for (torch::nn::Module* m : wrap_select(root, policy)) fully_shard(*m, options);
  return fully_shard(root, options);
}

std::vector<std::vector<int64_t>> wrap_blocks(const std::vector<int64_t>& block_params, int64_t min_params) {
  std::vector<std::vector<int64_t>> units;
  std::vector<int64_t> current;
  int64_t count = 0;
  for (size_t i = 0; i < block_params.size(); ++i) {
    current.push_back(static_cast<int64_t>(i));
    count += block_params[i];
    if (count >= min_params) {
      units.push_back(current);
      current.clear();
      count = 0;
    }
  }
  // Blocks left over are smaller than a unit: they join the last one rather than form a runt.
  if (!current.empty()) {
    if (units.empty()) units.push_back({});
    units.back().insert(units.back().end(), current.begin(), current.end());
  }
  return units;
}

}  // namespace cadre
