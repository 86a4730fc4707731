// Fine-tuning from a checkpoint (train.init_from): a fresh run whose weights come from
// another run's or an imported checkpoint, at step 0 with a fresh optimizer and data order.
// Each rank reads only the pieces of the checkpoint its shard needs, so any world size and
// strategy loads any checkpoint and no rank holds the whole model.
#pragma once

#include <string>

#include "comm/comm.h"
#include "core/config.h"
#include "shard/fully_shard.h"

namespace cadre {

// Completes config.model from the checkpoint's config: keys the config leaves out are taken
// from it, keys it sets win (a shape they change is caught when loading). Call before
// model_config_resolve; a no-op without train.init_from. ConfigError naming train.init_from
// for a path without a loadable checkpoint or of another architecture.
void init_from_config(Config& config);

// Loads the checkpoint's model.* (and buffer.*) into this rank's shard. Collective: every
// rank calls it and all fail if one does. Returns the checkpoint's path.
std::string init_from_load(const Config& config, FSDPModule& model, int rank, comm::Communicator* group);

}  // namespace cadre
