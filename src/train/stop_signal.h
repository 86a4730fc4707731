// Graceful stop for training (preemption under Slurm or Kubernetes, an agent stopping its
// workers, Ctrl-C): while a StopSignal lives, SIGTERM and SIGINT are only recorded; the trainer
// agrees on them across ranks at the next step, finishes that step, checkpoints it and exits
// with 128 + signal. A second signal gets the default action (the process ends at once).
#pragma once

namespace cadre {

class StopSignal {
 public:
  StopSignal();   // installs the handlers
  ~StopSignal();  // restores the previous ones
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  int received() const;  // the first SIGTERM/SIGINT received, 0 if none
};

}  // namespace cadre
