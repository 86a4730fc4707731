// How Llama is sharded: each transformer block is an FSDP unit (or consecutive blocks grouped
// to at least parallel.wrap_min_params parameters); the embedding, final norm and head are the
// root unit; parallel.activation_checkpointing recomputes each block in the backward.
#pragma once

#include <vector>

#include "core/config.h"
#include "models/llama/model.h"
#include "shard/fully_shard.h"
#include "shard/module_hooks.h"

namespace cadre {

// Keep `checkpointing` alive as long as the model trains.
FSDPModule llama_parallelize(Llama& model, const FullyShardOptions& options, const ParallelConfig& parallel,
                             std::vector<HookHandle>& checkpointing);

}  // namespace cadre
