// How ResNet is sharded: each residual block is an FSDP unit; the stem and the classifier are
// the root unit; parallel.activation_checkpointing recomputes each block in the backward.
// Under NO_SHARD the units only mark structure: gradients go in DDP's size buckets.
#pragma once

#include <vector>

#include "core/config.h"
#include "models/resnet/model.h"
#include "shard/fully_shard.h"
#include "shard/module_hooks.h"

namespace cadre {

FSDPModule resnet_parallelize(ResNetImpl& model, const FullyShardOptions& options, const ParallelConfig& parallel,
                              std::vector<HookHandle>& checkpointing);

}  // namespace cadre
