// Learning-rate schedule.
#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace cadre {

double LrSchedule::at(int64_t step) const {
  if (step < warmup_steps) return lr * double(step + 1) / double(warmup_steps);
  int64_t decay_steps = std::max<int64_t>(1, total_steps - warmup_steps);
  double progress = std::min(1.0, double(step - warmup_steps) / double(decay_steps));
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace cadre
