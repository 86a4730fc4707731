// Tensor parallelism, FSDP units and activation checkpointing for Llama.
#include "models/llama/parallelize.h"

#include "models/llama/tensor_parallel.h"
#include "shard/wrap_policy.h"

namespace cadre {

FSDPModule llama_parallelize(Llama& model, const DeviceMesh& mesh, FullyShardOptions options,
                             const ParallelConfig& parallel, std::vector<HookHandle>& checkpointing) {
  if (mesh.tp()) options.tensor_parallel = llama_tensor_parallelize(model, *mesh.tp());
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
  // An untied head and the final norm form a unit of their own, as torchtitan wraps them:
  // otherwise they belong to the root, whose parameters are gathered before the first block
  // (nothing to hide the head's gather behind) and whose gradients are complete only after
  // the embedding's, at the very end of the backward (nothing to hide their reduction
  // behind). As a unit the head is gathered while the last block computes and its gradients
  // are reduced while the blocks' backward runs.
  if (model.output) fully_shard(std::vector<torch::nn::Module*>{model.norm.get(), model.output.get()}, options);
  // A last pipeline stage's copy of a tied table is the root's only parameter, as the first
  // stage's table is: the two roots' flat layouts, so each rank's shards, are then the same, and
  // the two stages' gradients of it add up shard by shard.
  else if (model.mirrors_embedding()) fully_shard(*model.norm, options);
  FSDPModule sharded = fully_shard(model, options);
  // Every parameter's .grad is now a view of its unit's flat gradient, which autograd adds into:
  // the embedding's rows go there directly, with no dense vocabulary x dim gradient beside it
  // (262M elements for a 128k vocabulary at dim 2048).
  model.sparse_embedding_grad = true;
  return sharded;
}

}  // namespace cadre
