// What a worker tells its agent after each step (and once at start): who it is, where its run
// directory is, the step's time split, throughput, loss, memory, checkpoints and straggler
// state. Counters are running totals, so a dropped message costs nothing but its moment.
#pragma once

#include <cstdint>
#include <string>

#include "obs/step_timer.h"

namespace cadre::obs {

struct WorkerReport {
  int rank = 0, local_rank = 0, world_size = 1, pid = 0;
  std::string run_dir;            // flight-recorder dumps go to <run_dir>/flight_recorder/
  bool dumps_on_sigusr1 = false;  // the worker answers SIGUSR1 with a flight-recorder dump
  int64_t step = 0;               // last completed step (0: not started)
  StepSplit last;                 // the last step
  StepSplit totals;               // all steps of this process
  int64_t steps_total = 0;
  std::string unit = "tokens";    // throughput unit: tokens or images
  double units_total = 0, units_per_s = 0;
  double samples_total = 0, samples_per_s = 0;
  double loss = 0, grad_norm = 0, lr = 0;
  bool has_val_loss = false;
  double val_loss = 0;
  int64_t model_state_bytes = 0;
  int64_t saves_total = 0, save_bytes_total = 0;
  double save_s = 0, save_blocked_s = 0;
  bool resumed = false;
  double load_s = 0;
  int64_t load_bytes = 0;
  bool straggler_tracking = false, straggling = false;
  double straggler_ratio = 1;
  std::string straggler_cause;

  std::string to_json() const;
  // Throws cadre::Error naming what is wrong with a message that is not a report.
  static WorkerReport from_json(const std::string& text);
};

}  // namespace cadre::obs
