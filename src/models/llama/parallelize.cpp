// FSDP units and activation checkpointing for Llama.
#include "models/llama/parallelize.h"

#include "shard/wrap_policy.h"

namespace cadre {

FSDPModule llama_parallelize(Llama& model, const FullyShardOptions& options, const ParallelConfig& parallel,
                             std::vector<HookHandle>& checkpointing) {
  auto& blocks = model.layers->blocks;
  if (parallel.activation_checkpointing)
    for (auto& block : blocks) checkpointing.push_back(checkpoint_wrapper(*block));
  std::vector<int64_t> block_params;
  for (auto& b : blocks) {
    int64_t n = 0;
    for (auto& p : b->parameters()) n += p.numel();
    block_params.push_back(n);
  }
  for (const auto& unit : wrap_blocks(block_params, parallel.wrap_min_params)) {
    std::vector<torch::nn::Module*> members;
    for (int64_t i : unit) members.push_back(blocks[i].get());
    fully_shard(members, options);
  }
  return fully_shard(model, options);
}

}  // namespace cadre
