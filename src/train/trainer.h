// The training loop: `cadre train --config <yaml>`.
#pragma once

#include <string>

#include "core/config.h"

namespace cadre {

struct TrainSummary {
  int64_t steps = 0;
  double final_loss = 0;      // mean training loss of the last step
  double final_val_loss = -1; // -1 when validation is off
  double final_val_accuracy = -1;  // classifiers with validation on
  double throughput = 0;      // median over steps after the first, in throughput_unit per second
  std::string throughput_unit = "tokens";  // "tokens" or "images"
  std::string run_dir;
  bool lead = true;           // this process wrote the run directory (rank 0)
  std::string resumed_from;   // checkpoint the run resumed from ("" when it started fresh)
  std::string checkpoint;     // the last checkpoint written (or resumed from)
  bool nothing_to_train = false;  // resumed at or past the step to stop at
  int stopped_by_signal = 0;      // SIGTERM/SIGINT: stopped early after checkpointing `steps`
  // On a GPU, host synchronisations per step (median; CUDA's sync-debug mode counts them); -1
  // on the CPU.
  double host_syncs_per_step = -1;
  bool load_only = false;  // train.steps 0: set up and reported, nothing trained (load_only.h)
  double load_s = 0;       // from start until the model's shards were made
};

// Checks the configuration against the data (ConfigError before any work), then trains,
// writing <run.dir>/{config.yaml, metrics.jsonl, summary.json} and checkpoints (by default in
// <run.dir>/checkpoints/step-NNNNNNNN/), resuming from one as checkpoint.resume says.
TrainSummary train_run(const Config& config);

}  // namespace cadre
