// Learning-rate schedule: linear warmup, then cosine decay to a floor.
#pragma once

#include <cstdint>

namespace cadre {

struct LrSchedule {
  double lr, min_lr;
  int64_t warmup_steps, total_steps;

  // Rate for 0-based step `step`: lr * (step+1)/warmup during warmup, then
  // min_lr + (lr - min_lr) * (1 + cos(pi * progress)) / 2 over the remaining steps.
  double at(int64_t step) const;
};

}  // namespace cadre
