// train.epochs: a run sized by passes over the training split rather than by steps.
#pragma once

#include <cstdint>

#include "core/config.h"

namespace cadre {

// With train.epochs > 0, sets train.steps = ceil(epochs x the training split's samples / the
// global batch (data.batch_size x optim.grad_accum_steps x the data-parallel ranks of `world`))
// and checks train.stop_at against it; a no-op otherwise. The last step runs into the next
// epoch where the split does not divide into global batches (the loader's order is a function
// of the seed and the epoch, so the steps after it are what a longer run would take).
// ConfigError naming the keys for a world that parallel.tp_size does not divide or a missing
// data.dir. A run resumed at another world size works its steps out again.
void resolve_epochs(Config& config, int64_t world);

}  // namespace cadre
