// `cadre train --dry-run [--world-size N]`: what each of N ranks would hold, printed without
// starting them or allocating the model (built deferred, planned on one rank and regrouped
// over N), and checked against train.memory_limit. Runs the 7B and 70B configs on any machine.
#pragma once

#include "core/config.h"

namespace cadre {

// Prints the plan and estimate on stdout; ConfigError (exit 2) for a world the config cannot
// use or an estimate over train.memory_limit.
void train_dry_run(const Config& config, int64_t world_size);

}  // namespace cadre
