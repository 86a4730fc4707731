// The per-thread communication-wait clock and the step split (see step_timer.h).
#include "obs/step_timer.h"

#include <algorithm>

namespace cadre::obs {
namespace {
thread_local double t_comm_wait_s = 0;
}

void comm_wait_add(double seconds) { t_comm_wait_s += seconds; }

void StepTimer::start() {
  start_ = std::chrono::steady_clock::now();
  comm_at_start_ = t_comm_wait_s;
  data_wait_s_ = 0;
}

StepSplit StepTimer::split() const {
  StepSplit s;
  s.total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  s.comm_wait_s = t_comm_wait_s - comm_at_start_;
  s.data_wait_s = data_wait_s_;
  s.compute_s = std::max(0.0, s.total_s - s.comm_wait_s - s.data_wait_s);
  return s;
}

}  // namespace cadre::obs
