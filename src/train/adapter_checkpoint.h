// A LoRA run's checkpoints (lora.rank > 0) hold what trains, the adapters with their optimizer
// state, and leave the frozen base out: megabytes, not the model. The base comes back from where
// the run read it (train.init_from, or the initialisation of train.seed), which a resumed run
// reads anyway as its shards are made; the checkpoint records the base's fingerprint
// (core/value_fingerprint.h) so that adapters are never resumed, or merged, onto another base.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ckpt/checkpoint_reader.h"
#include "ckpt/export.h"
#include "comm/comm.h"
#include "core/config.h"
#include "shard/fully_shard.h"

namespace cadre {

// The fingerprint of the model's frozen parameters as the ranks hold them, sharded and split
// any way: each rank adds the elements it would write to a checkpoint, and the sums are added
// over `world` (all ranks, null for one). Collective. The same value for the same base at any
// world size, strategy or tensor-parallel size.
uint64_t frozen_base_fingerprint(FSDPModule& model, comm::Communicator* world);

// What a run's base is, for messages: "the Hugging Face folder X" (train.init_from), "the
// checkpoint X", or "the initialisation of train.seed N".
std::string base_description(const Config& config);

// The base of a LoRA run (`config`: the run's, as its checkpoint records it), read from where the
// run read it: what `cadre ckpt export --format hf --merge` merges a checkpoint that leaves its
// base out into. ConfigError naming train.init_from when it is gone or no longer fits.
BaseWeights adapter_base_weights(const Config& config);

// For a checkpoint that leaves its base out: ConfigError unless this run has a frozen base
// (`here`, its fingerprint) and it is the one the adapters were trained on. Nothing for a
// checkpoint that holds its base.
void check_adapter_base(const CheckpointReader& reader, const Config& config, std::optional<uint64_t> here);

}  // namespace cadre
