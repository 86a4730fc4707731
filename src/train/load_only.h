// `cadre train` with train.steps 0: the run set up as training would set it up (the mesh, the
// model made in shards, train.init_from read), then each rank reports what it holds and the job
// stops, before any gradient, optimizer state or data: a check that a model loads and fits,
// and how long that takes, without training it.
#pragma once

#include "core/config.h"
#include "train/trainer.h"

namespace cadre {

// Logs per rank: the float32 shard, the gradient shard, the largest unit a gather makes whole,
// the optimizer state training would add, peak RSS (VmHWM) and the seconds from start. Collective.
TrainSummary train_load_only(const Config& config);

}  // namespace cadre
