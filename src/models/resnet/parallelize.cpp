// FSDP units and activation checkpointing for ResNet.
#include "models/resnet/parallelize.h"

namespace cadre {

FSDPModule resnet_parallelize(ResNetImpl& model, const FullyShardOptions& options, const ParallelConfig& parallel,
                              std::vector<HookHandle>& checkpointing) {
  for (torch::nn::Module* block : model.blocks()) {
    // BatchNorm's running statistics would be updated twice per step under recomputation, as
    // with PyTorch's checkpoint; the gradients are exact.
    if (parallel.activation_checkpointing) checkpointing.push_back(checkpoint_wrapper(*block));
    fully_shard(*block, options);
  }
  return fully_shard(model, options);
}

}  // namespace cadre
